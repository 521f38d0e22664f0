// Package benchkit holds what the `make bench` programs share: running a
// plumb server process on a free loopback port.
package benchkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Result is one measurement: bytes moved in secs.
type Result struct {
	Name  string
	Bytes int64
	Secs  float64
}

// MBps is the measurement's throughput in MB/s.
func (r Result) MBps() float64 { return float64(r.Bytes) / 1e6 / r.Secs }

// StartServer runs `plumb serve` with its data under dir and waits until
// it listens. Stop it with the returned function.
func StartServer(plumb, dir string) (addr string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = l.Addr().String()
	l.Close()
	srv := exec.Command(plumb, "serve", "--data", filepath.Join(dir, "data"), "--listen", addr, "--log-level", "warn")
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() }
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("plumb serve on %s did not start within 30s", addr)
}

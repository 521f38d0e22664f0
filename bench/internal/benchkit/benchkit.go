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

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/proc"
)

// Result is one measurement: bytes moved in secs.
type Result struct {
	Name  string
	Bytes int64
	Secs  float64
}

// MBps is the measurement's throughput in MB/s.
func (r Result) MBps() float64 { return float64(r.Bytes) / 1e6 / r.Secs }

// Server is a running plumb server process.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	c    *client.Client // the client Serve dialled, closed by Stop
}

// FreeAddr returns a loopback address no one listens on, for a server
// the bench starts.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartServer runs `plumb serve` with its data under dir and extra flags,
// and waits until it listens. Stop it with Stop.
func StartServer(plumb, dir string, extra ...string) (*Server, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--data", filepath.Join(dir, "data"), "--listen", addr, "--log-level", "warn"}, extra...)
	srv := exec.Command(plumb, args...)
	srv.Stderr = os.Stderr
	// A bench that dies (log.Fatal) takes its server with it, rather than
	// leaving it to hold the CPU and the bench's output pipe.
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	s := &Server{Addr: addr, cmd: srv}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return s, nil
		}
	}
	s.Stop()
	return nil, fmt.Errorf("plumb serve on %s did not start within 30s", addr)
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Serve is StartServer with a client dialled to it, which Stop closes:
// what most benches start with.
func Serve(plumb, dir string, extra ...string) (*Server, *client.Client, error) {
	srv, err := StartServer(plumb, dir, extra...)
	if err != nil {
		return nil, nil, err
	}
	if srv.c, err = client.Dial(srv.Addr); err != nil {
		srv.Stop()
		return nil, nil, err
	}
	return srv, srv.c, nil
}

// Stop ends the server with SIGTERM and waits for it, after closing the
// client Serve dialled.
func (s *Server) Stop() {
	if s.c != nil {
		s.c.Close()
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.cmd.Wait()
}

// CPU returns the CPU time the server and its reaped children have used.
func (s *Server) CPU() (time.Duration, error) { return ProcCPU(s.cmd.Process.Pid) }

// ProcCPU returns the CPU time a process and its reaped children have
// used.
func ProcCPU(pid int) (time.Duration, error) { return proc.CPU(pid) }

// Command spine measures the server spine against its limits in one run on
// loopback: DoPut into the local store beside `cp` + fsync to the same disk,
// and DoGet to the Go client and to pyarrow beside the same bytes over a
// raw loopback TCP connection. It prints MB/s and the ratios.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"

	"github.com/plumb-dev/plumb/client"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	sizeMiB := flag.Int("size", 256, "block size in MiB")
	n := flag.Int("blocks", 4, "blocks per measurement")
	reps := flag.Int("reps", 3, "repetitions of each measurement; the best is reported")
	dir := flag.String("dir", "", "work directory on the disk to measure (default: a temp dir)")
	flag.Parse()
	if err := run(*plumb, int64(*sizeMiB)<<20, *n, *reps, *dir); err != nil {
		log.Fatal(err)
	}
}

type result = benchkit.Result

// best runs f reps times and keeps the fastest run: on a shared 2-core
// machine the slower runs measure the neighbours, not the code.
func best(reps int, f func() (result, error)) (result, error) {
	var b result
	for i := range reps {
		r, err := f()
		if err != nil {
			return r, err
		}
		if i == 0 || r.Secs < b.Secs {
			b = r
		}
	}
	return b, nil
}

func run(plumb string, size int64, n, reps int, dir string) error {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "plumb-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	src := filepath.Join(dir, "block.bin")
	fmt.Printf("spine bench: %d blocks of %d MiB, work dir %s\n", n, size>>20, dir)
	if err := writeRandom(src, size); err != nil {
		return err
	}
	sum, err := sha256File(src)
	if err != nil {
		return err
	}

	// Server as its own process, as in production.
	srv, err := benchkit.StartServer(plumb, dir)
	if err != nil {
		return err
	}
	defer srv.Stop()
	addr := srv.Addr
	c, err := client.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()

	names := make([]string, n)

	// cp + fsync to the same disk: the limit for DoPut.
	cp, err := best(reps, func() (result, error) {
		r := result{Name: "cp + fsync (same disk)", Bytes: size * int64(n)}
		start := time.Now()
		for i := range n {
			dst := filepath.Join(dir, fmt.Sprintf("cp-%d.bin", i))
			if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
				return r, fmt.Errorf("cp: %v %s", err, out)
			}
			if err := fsync(dst); err != nil {
				return r, err
			}
		}
		r.Secs = time.Since(start).Seconds()
		for i := range n {
			os.Remove(filepath.Join(dir, fmt.Sprintf("cp-%d.bin", i)))
		}
		return r, nil
	})
	if err != nil {
		return err
	}

	rep := 0
	put, err := best(reps, func() (result, error) {
		r := result{Name: "DoPut, Go client -> local store", Bytes: size * int64(n)}
		rep++
		start := time.Now()
		for i := range n {
			// New names each repetition, so every put stores.
			name := fmt.Sprintf("20250505-151105-%08d.bench%d.pcap", i+1, rep)
			res, err := c.Put(ctx, client.Source{Name: name, Size: size, SHA256: sum,
				Open: func() (io.ReadCloser, error) { return os.Open(src) }})
			if err != nil || res[0].Status != "stored" {
				return r, fmt.Errorf("put %s: %v %v", name, res, err)
			}
		}
		r.Secs = time.Since(start).Seconds()
		return r, nil
	})
	if err != nil {
		return err
	}
	for i := range names {
		names[i] = fmt.Sprintf("20250505-151105-%08d.bench1.pcap", i+1)
	}

	// Raw loopback TCP: the limit for DoGet.
	tcp, err := best(reps, func() (result, error) { return rawTCP(src, size, n) })
	if err != nil {
		return err
	}

	get, err := best(reps, func() (result, error) {
		r := result{Name: "DoGet -> Go client (SHA-256 checked)", Bytes: size * int64(n)}
		start := time.Now()
		for _, name := range names {
			s, err := c.Get(ctx, name)
			if err != nil {
				return r, err
			}
			if !s.Next() {
				return r, fmt.Errorf("get %s: %v", name, s.Err())
			}
			if _, err := io.Copy(io.Discard, s); err != nil {
				return r, err
			}
			s.Close()
		}
		r.Secs = time.Since(start).Seconds()
		return r, nil
	})
	if err != nil {
		return err
	}

	py, err := best(reps, func() (result, error) { return pyarrowGet(addr, names) })
	if err != nil {
		return err
	}
	py.Bytes = size * int64(n)

	fmt.Println()
	fmt.Printf("best of %d runs each\n", reps)
	fmt.Printf("%-40s %10s\n", "measurement", "MB/s")
	for _, r := range []result{cp, put, tcp, get, py} {
		fmt.Printf("%-40s %10.0f\n", r.Name, r.MBps())
	}
	fmt.Println()
	fmt.Printf("DoPut / cp+fsync            = %5.0f%%  (aim >= 40%%)\n", 100*put.MBps()/cp.MBps())
	fmt.Printf("DoGet Go / raw TCP          = %5.0f%%  (aim >= 50%%)\n", 100*get.MBps()/tcp.MBps())
	fmt.Printf("DoGet pyarrow / raw TCP     = %5.0f%%  (aim >= 50%%)\n", 100*py.MBps()/tcp.MBps())
	return nil
}

func writeRandom(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		rand.Read(buf)
		if _, err := f.Write(buf[:min(int64(len(buf)), size-off)]); err != nil {
			return err
		}
	}
	return f.Sync()
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fsync(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// rawTCP sends the file n times over one loopback TCP connection from a
// sender reading the file to a receiver that discards: what the bytes cost
// with no protocol at all.
func rawTCP(src string, size int64, n int) (result, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		for range n {
			f, err := os.Open(src)
			if err != nil {
				done <- err
				return
			}
			// Copy through user space as a server would, not sendfile.
			_, err = io.CopyBuffer(struct{ io.Writer }{conn}, struct{ io.Reader }{f}, make([]byte, 1<<20))
			f.Close()
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	start := time.Now()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return result{}, err
	}
	got, err := io.CopyBuffer(io.Discard, io.LimitReader(conn, size*int64(n)), make([]byte, 1<<20))
	conn.Close()
	if err != nil {
		return result{}, err
	}
	if err := <-done; err != nil {
		return result{}, err
	}
	return result{Name: "raw loopback TCP (file -> socket)", Bytes: got, Secs: time.Since(start).Seconds()}, nil
}

const pyReader = `
import json, sys, time
import pyarrow.flight as fl
c = fl.FlightClient("grpc://" + sys.argv[1])
start = time.time()
total = 0
for name in sys.argv[2:]:
    r = c.do_get(fl.Ticket(json.dumps({"block": name}).encode()))
    while True:
        try:
            chunk = r.read_chunk()
        except StopIteration:
            break
        if chunk.data is not None and chunk.data.num_rows:
            total += chunk.data.column(1).buffers()[2].size
print(total, time.time() - start)
`

func pyarrowGet(addr string, names []string) (result, error) {
	out, err := exec.Command("python3", append([]string{"-c", pyReader, addr}, names...)...).CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("pyarrow reader: %v\n%s", err, out)
	}
	var r result
	r.Name = "DoGet -> pyarrow (read_chunk)"
	if _, err := fmt.Sscan(strings.TrimSpace(string(bytes.TrimSpace(out))), &r.Bytes, &r.Secs); err != nil {
		return r, fmt.Errorf("pyarrow reader said %q", out)
	}
	return r, nil
}

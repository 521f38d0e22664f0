// Command agent measures the capture agent against its two limits in one
// run: reading the capture with the pcap reader alone, and snappy
// compression alone. It imports a generated DNS capture into a local
// server and prints MB/s of uncompressed pcap, the ratio to the slower
// limit, and the compressed size beside gzip -1 and zstd -1.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/pcap"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	size := flag.String("size", "1GiB", "size of the generated capture")
	flag.Parse()
	if err := run(*plumb, *size); err != nil {
		log.Fatal(err)
	}
}

type result = benchkit.Result

func timed(name string, bytes int64, f func() error) (result, error) {
	start := time.Now()
	err := f()
	return result{Name: name, Bytes: bytes, Secs: time.Since(start).Seconds()}, err
}

func run(plumb, size string) error {
	dir, err := os.MkdirTemp("", "plumb-bench-agent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	input := filepath.Join(dir, "synth.pcap")
	fmt.Printf("agent bench: generating %s of DNS traffic in %s\n", size, dir)
	if out, err := exec.Command(plumb, "synth", "--out", input, "--size", size, "--seed", "1").CombinedOutput(); err != nil {
		return fmt.Errorf("synth: %v\n%s", err, out)
	}
	fi, err := os.Stat(input)
	if err != nil {
		return err
	}
	n := fi.Size()
	// Warm the page cache so every measurement reads from memory.
	if err := discard(input); err != nil {
		return err
	}

	reader, err := timed("pcap reader alone", n, func() error {
		f, err := os.Open(input)
		if err != nil {
			return err
		}
		defer f.Close()
		rd, closer, err := pcap.NewReader(f)
		if err != nil {
			return err
		}
		defer closer.Close()
		for {
			if _, _, err := rd.Next(); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	})
	if err != nil {
		return err
	}
	var szBytes int64
	snappy, err := timed("snappy compression alone", n, func() error {
		f, err := os.Open(input)
		if err != nil {
			return err
		}
		defer f.Close()
		cw := &countWriter{}
		w, _ := codecs.Snappy.NewWriter(cw)
		if _, err := io.Copy(w, f); err != nil {
			return err
		}
		err = w.Close()
		szBytes = cw.n
		return err
	})
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
	agent, err := timed("plumb import -> local server", n, func() error {
		out, err := exec.Command(plumb, "import", "--quiet", "--server", addr, "--site", "bench", "--new-instance",
			"--spool", filepath.Join(dir, "spool"), input).CombinedOutput()
		if err != nil {
			return fmt.Errorf("import: %v\n%s", err, out)
		}
		return nil
	})
	if err != nil {
		return err
	}

	gz, gzSize, err := external("gzip -1", input, n, "gzip", "-1", "-c")
	if err != nil {
		return err
	}
	zs, zsSize, err := external("zstd -1", input, n, "zstd", "-1", "-c", "-q")
	if err != nil {
		return err
	}

	fmt.Println()
	fmt.Printf("%-36s %10s\n", "measurement (uncompressed pcap)", "MB/s")
	for _, r := range []result{reader, snappy, agent, gz, zs} {
		fmt.Printf("%-36s %10.0f\n", r.Name, r.MBps())
	}
	slower := min(reader.MBps(), snappy.MBps())
	fmt.Printf("\nagent / slower limit        = %5.0f%%  (aim >= 70%%)\n", 100*agent.MBps()/slower)
	fmt.Printf("\n%-20s %8s\n", "compressed size", "of input")
	for _, c := range []struct {
		name string
		size int64
	}{{"snappy (blocks)", szBytes}, {"gzip -1", gzSize}, {"zstd -1", zsSize}} {
		fmt.Printf("%-20s %7.1f%%\n", c.name, 100*float64(c.size)/float64(n))
	}
	return nil
}

func external(name, input string, n int64, argv ...string) (result, int64, error) {
	if _, err := exec.LookPath(argv[0]); err != nil {
		return result{}, 0, fmt.Errorf("%s is needed for the comparison: %w", argv[0], err)
	}
	f, err := os.Open(input)
	if err != nil {
		return result{}, 0, err
	}
	defer f.Close()
	cw := &countWriter{}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout = f, cw
	r, err := timed(name, n, cmd.Run)
	return r, cw.n, err
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func discard(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}

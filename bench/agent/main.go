// Command agent measures the capture agent against its two limits in one
// run: reading the capture with the pcap reader alone, and snappy
// compression alone (on every core, as the agent compresses). It cuts a
// generated DNS capture into a spool in this process (the agent's own
// work), then imports it into a local server, and prints MB/s of
// uncompressed pcap, the ratios to the slower limit, the CPU seconds per
// GiB of each part, and the compressed size beside gzip -1 and zstd -1.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/plumb-dev/plumb/agent"
	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/pcap"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	size := flag.String("size", "1GiB", "size of the generated capture")
	server := flag.String("server", "", "import into this server (say, on another machine) instead of a local one")
	flag.Parse()
	if err := run(*plumb, *size, *server); err != nil {
		log.Fatal(err)
	}
}

type result = benchkit.Result

func timed(name string, bytes int64, f func() error) (result, error) {
	start := time.Now()
	err := f()
	return result{Name: name, Bytes: bytes, Secs: time.Since(start).Seconds()}, err
}

// median3 runs f three times (f gets the run's index) and returns the
// median time and the mean CPU this process used per run.
func median3(name string, bytes int64, f func(int) error) (result, time.Duration, error) {
	var rs []result
	// Write back what earlier measurements left dirty, so it is not
	// charged to this one.
	syscall.Sync()
	cpu0 := selfCPU()
	for i := range 3 {
		r, err := timed(name, bytes, func() error { return f(i) })
		if err != nil {
			return r, 0, err
		}
		rs = append(rs, r)
	}
	cpu := (selfCPU() - cpu0) / 3
	slices.SortFunc(rs, func(a, b result) int { return cmp.Compare(a.Secs, b.Secs) })
	return rs[1], cpu, nil
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(plumb, size, server string) error {
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

	// The agent's own work: cutting into its spool (fsynced blocks,
	// checksums), nothing shipped.
	cut, cutCPU, err := median3("agent cutting into its spool", n, func(i int) error {
		// Removed after the measurement: deleting is not cutting.
		spool, _, err := agent.OpenSpool(filepath.Join(dir, "cut", fmt.Sprint(i)), "pcap.sz", "bench")
		if err != nil {
			return err
		}
		if err := spool.SetLastSeq(0, false); err != nil {
			return err
		}
		src, err := agent.FileSource(input)
		if err != nil {
			return err
		}
		cfg := agent.CutConfig{Queue: "pcap.sz", Instance: "bench", Codec: codecs.Snappy, MaxBytes: 256 << 20}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		return agent.Cut(context.Background(), cfg, spool, agent.List(src), log, &agent.Counters{})
	})
	if err != nil {
		return err
	}
	os.RemoveAll(filepath.Join(dir, "cut"))

	// End to end: by default the server as its own process on the same
	// machine, as in production minus the network (and sharing the cores).
	target, where := server, "-> "+server
	var srv *benchkit.Server
	if server == "" {
		if srv, err = benchkit.StartServer(plumb, dir); err != nil {
			return err
		}
		defer srv.Stop()
		target, where = srv.Addr, "-> local server"
	}
	var clientCPU, serverCPU time.Duration
	// Sites new to the server: a block it already holds would be answered
	// duplicate without being sent.
	stamp := time.Now().UnixNano()
	agentRes, _, err := median3("plumb import "+where, n, func(i int) error {
		cmd := exec.Command(plumb, "import", "--quiet", "--server", target, "--site", fmt.Sprintf("bench%d-%d", stamp, i), "--new-instance",
			"--spool", filepath.Join(dir, fmt.Sprintf("spool%d", i)), input)
		var before time.Duration
		if srv != nil {
			before, _ = srv.CPU()
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("import: %v\n%s", err, out)
		}
		if srv != nil {
			after, _ := srv.CPU()
			serverCPU += after - before
		}
		clientCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		return nil
	})
	if err != nil {
		return err
	}
	clientCPU, serverCPU = clientCPU/3, serverCPU/3

	// Each measurement is the median of three runs.
	reader, readerCPU, err := median3("pcap reader alone", n, func(int) error {
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
	snappyWith := func(procs int) func(int) error {
		return func(int) error {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
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
		}
	}
	snappy, snappyCPU, err := median3(fmt.Sprintf("snappy alone (%d cores)", runtime.NumCPU()), n, snappyWith(runtime.NumCPU()))
	if err != nil {
		return err
	}
	snappy1, _, err := median3("snappy alone (1 core; not a limit)", n, snappyWith(1))
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
	fmt.Printf("%-40s %10s\n", "measurement (uncompressed pcap)", "MB/s")
	for _, r := range []result{reader, snappy, snappy1, cut, agentRes, gz, zs} {
		fmt.Printf("%-40s %10.0f\n", r.Name, r.MBps())
	}
	slower := min(reader.MBps(), snappy.MBps())
	fmt.Printf("\n%-43s = %5.0f%%\n", "agent cutting into its spool / slower limit", 100*cut.MBps()/slower)
	fmt.Printf("%-43s = %5.0f%%  (aim >= 70%%)\n", "import "+where+" / slower limit", 100*agentRes.MBps()/slower)
	// Where the CPU goes: a local server shares this machine's cores, so
	// the end-to-end run cannot beat the cores divided by the CPU it needs
	// per byte, whatever the overlap.
	gib := float64(n) / (1 << 30)
	perGiB := func(d time.Duration) float64 { return d.Seconds() / gib }
	fmt.Printf("\nCPU seconds per GiB: reader %.2f, snappy %.2f, cutting %.2f, import %.2f",
		perGiB(readerCPU), perGiB(snappyCPU), perGiB(cutCPU), perGiB(clientCPU))
	used := clientCPU
	if srv != nil {
		fmt.Printf(" + server %.2f", perGiB(serverCPU))
		used += serverCPU
	}
	bound := float64(runtime.NumCPU()) / used.Seconds() * float64(n) / 1e6
	fmt.Printf("\non %d cores the end-to-end run can do at most %.0f MB/s (%.0f%% of the slower limit)\n",
		runtime.NumCPU(), bound, 100*bound/slower)
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

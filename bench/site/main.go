// Command site measures one site's backfill through builtin:dns on the
// server: the runs its blocks get in parallel while their edges are
// joined in sequence.
//
// One capture is imported as one site's blocks (uncompressed, so the
// stage measured is builtin:dns alone), then a job with builtin:dns is
// submitted and timed until every block has its run. It runs:
//
//   - this build with 1 slot and with 2;
//   - this build with no slot and 2 remote workers (plumb worker);
//   - this build with 2 slots on the same capture cut into blocks of
//     separate sites, so no block has a neighbour: nothing is joined or
//     carried from block to block, and what straddles a cut is lost.
//     The CPU it takes is the decoder's and the server's alone, so the
//     ratio to it is what reading a site exactly costs;
//   - the previous design, which ran a site's blocks one at a time to
//     carry their state (built from git at -sequential-rev), with 2 slots;
//   - the design before that, which carried no state and so lost what
//     straddled a cut (built from -stateless-rev), with 2 slots.
//
// Printed: blocks/s, MB/s of capture, the server's CPU seconds per GiB
// of capture (which does not depend on the cores free) and the load
// average beside each run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pipeline"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	size := flag.String("size", "256MiB", "capture size")
	block := flag.String("block", "4MiB", "block size")
	mix := flag.String("mix", "normal", "plumb synth --mix")
	seqRev := flag.String("sequential-rev", "030afbb", "git revision of the design that ran a site's blocks in sequence (empty: skip)")
	noStateRev := flag.String("stateless-rev", "47f72f0^", "git revision of the design that carried no state (empty: skip)")
	flag.Parse()
	if err := run(*plumb, *size, *block, *mix, *seqRev, *noStateRev); err != nil {
		log.Fatal(err)
	}
}

const job = `
job: dns
from: earliest
stages:
  - {name: dns, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}
`

type result struct {
	name          string
	blocks, bytes int64
	secs, cpu     float64
	parted        int64
	load          string
}

func (r result) blocksPerSec() float64 { return float64(r.blocks) / r.secs }
func (r result) cpuPerGiB() float64    { return r.cpu / (float64(r.bytes) / (1 << 30)) }

func run(plumb, size, block, mix, seqRev, noStateRev string) error {
	dir, err := os.MkdirTemp("", "plumb-bench-site-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	capture := filepath.Join(dir, "site.pcap")
	if out, err := exec.Command(plumb, "synth", "--out", capture, "--mix", mix, "--size", size, "--seed", "5").CombinedOutput(); err != nil {
		return fmt.Errorf("synth: %v\n%s", err, out)
	}
	fmt.Printf("== one site's %s (plumb synth --mix %s) in %s blocks through builtin:dns on the server\n", size, mix, block)
	pieces, err := split(capture, filepath.Join(dir, "pieces"), block)
	if err != nil {
		return err
	}
	type variant struct {
		name, bin      string
		slots, workers int
		sites          bool
	}
	variants := []variant{
		{"1 slot", plumb, 1, 0, false},
		{"2 slots", plumb, 2, 0, false},
		{"2 remote workers", plumb, 0, 2, false},
		{"separate sites (nothing joined), 2 slots", plumb, 2, 0, true},
	}
	for _, old := range []struct{ name, rev string }{{"sequential (previous), 2 slots", seqRev}, {"no state, leaner records, 2 slots", noStateRev}} {
		if old.rev == "" {
			continue
		}
		bin, err := benchkit.BuildRev(dir, old.rev)
		if err != nil {
			fmt.Printf("(%s at %s not measured: %v)\n", old.name, old.rev, err)
			continue
		}
		variants = append(variants, variant{old.name + " @" + old.rev, bin, 2, 0, false})
	}
	var results []result
	for i, v := range variants {
		sources := []string{capture}
		if v.sites {
			sources = pieces
		}
		r, err := once(v.bin, filepath.Join(dir, fmt.Sprint("run", i)), sources, block, v.slots, v.workers)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		r.name = v.name
		results = append(results, r)
	}
	fmt.Printf("%-44s %7s %9s %7s %8s %10s %6s %7s  %s\n", "server", "blocks", "blocks/s", "MB/s", "seconds", "CPU s/GiB", "cores", "parted", "loadavg before")
	for _, r := range results {
		fmt.Printf("%-44s %7d %9.2f %7.1f %8.2f %10.1f %6.2f %7d  %s\n", r.name, r.blocks, r.blocksPerSec(), float64(r.bytes)/1e6/r.secs, r.secs,
			r.cpuPerGiB(), r.cpu/r.secs, r.parted, r.load)
	}
	ratio := func(a, b string) string {
		var x, y *result
		for i := range results {
			if results[i].name == a || strings.HasPrefix(results[i].name, a) {
				x = &results[i]
			}
			if results[i].name == b || strings.HasPrefix(results[i].name, b) {
				y = &results[i]
			}
		}
		if x == nil || y == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", x.blocksPerSec()/y.blocksPerSec())
	}
	cpuRatio := func(a, b string) string {
		var x, y *result
		for i := range results {
			if strings.HasPrefix(results[i].name, a) {
				x = &results[i]
			}
			if strings.HasPrefix(results[i].name, b) {
				y = &results[i]
			}
		}
		if x == nil || y == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", x.cpuPerGiB()/y.cpuPerGiB())
	}
	fmt.Printf("2 slots / 1 slot:          %s blocks/s  (aim >= 1.7x)\n", ratio("2 slots", "1 slot"))
	fmt.Printf("2 slots / sequential:      %s blocks/s  (aim >= 1.6x)\n", ratio("2 slots", "sequential"))
	// Blocks of separate sites share nothing, so 2 slots over them run as
	// parallel as this machine allows: one site's 2 slots near it means
	// the joins cost the site no parallelism, whatever the cores.
	fmt.Printf("2 slots, one site / 2 slots, separate sites: %s blocks/s  (1.0x: joining a site's edges costs it no parallelism)\n", ratio("2 slots", "separate sites"))
	fmt.Printf("2 remote workers / 1 slot: %s blocks/s\n", ratio("2 remote", "1 slot"))
	fmt.Printf("CPU s/GiB, 2 slots / separate sites: %s  (aim <= 1.1x: what joining and carrying cost)\n", cpuRatio("2 slots", "separate sites"))
	fmt.Printf("CPU s/GiB, 2 slots / no state, leaner records: %s  (issue 38: the richer records' cost)\n", cpuRatio("2 slots", "no state"))
	fmt.Printf("(blocks/s depends on the cores free (%d here; one slot's run already keeps more than one busy, its reader and\n", runtime.NumCPU())
	fmt.Println(" writer overlapping, so 2 slots can gain at most cores/one slot's cores); CPU s/GiB is the server's and its")
	fmt.Println(" workers', children included, and does not)")
	return nil
}

// split cuts a capture into files of about size bytes each, the blocks
// an import would cut.
func split(capture, dir, size string) ([]string, error) {
	n, err := pipeline.ParseSize(size)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	in, err := os.Open(capture)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	r, closer, err := pcap.NewReader(in)
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	var (
		files   []string
		f       *os.File
		w       *pcap.Writer
		written int64
	)
	closeFile := func() error {
		if f == nil {
			return nil
		}
		err := errors.Join(w.Flush(), f.Close())
		f = nil
		return err
	}
	for {
		data, ci, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if f == nil || written >= n {
			if err := closeFile(); err != nil {
				return nil, err
			}
			name := filepath.Join(dir, fmt.Sprintf("%04d.pcap", len(files)+1))
			if f, err = os.Create(name); err != nil {
				return nil, err
			}
			if w, err = pcap.NewWriter(f, r.LinkType, 262144, true); err != nil {
				return nil, err
			}
			files, written = append(files, name), 24
		}
		if err := w.WritePacket(ci, data); err != nil {
			return nil, err
		}
		written += 16 + int64(len(data))
	}
	return files, closeFile()
}

// once imports the capture into a fresh server as one site's blocks (or
// each of several captures as a site of its own), then submits the job
// and times it until every block has had its run.
func once(plumb, dir string, captures []string, block string, slots, workers int) (result, error) {
	args := []string{"--tick", "200ms"}
	if workers > 0 {
		args = append(args, "--remote-only")
	} else {
		args = append(args, "--slots", fmt.Sprint(slots))
	}
	srv, err := benchkit.StartServer(plumb, dir, args...)
	if err != nil {
		return result{}, err
	}
	defer srv.Stop()
	var bytes int64
	for i, capture := range captures {
		site, blockSize := "lax", block
		if len(captures) > 1 {
			site, blockSize = fmt.Sprintf("lax%03d", i), "1GiB" // one block each
		}
		if out, err := exec.Command(plumb, "import", "--quiet", "--server", srv.Addr, "--site", site, "--new-instance", "--codec", "none",
			"--spool", filepath.Join(dir, "spool", site), "--block-size", blockSize, capture).CombinedOutput(); err != nil {
			return result{}, fmt.Errorf("import: %v\n%s", err, out)
		}
		fi, err := os.Stat(capture)
		if err != nil {
			return result{}, err
		}
		bytes += fi.Size()
	}
	c, err := client.Dial(srv.Addr)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	ctx := context.Background()
	blocks, err := c.Blocks(ctx, "pcap")
	if err != nil {
		return result{}, err
	}
	var procs []*exec.Cmd
	defer func() {
		for _, w := range procs {
			w.Process.Kill()
			w.Wait()
		}
	}()
	for i := range workers {
		w := exec.Command(plumb, "worker", "--server", srv.Addr, "--slots", "1",
			"--scratch", filepath.Join(dir, fmt.Sprint("scratch", i)), "--log-level", "warn")
		w.Stderr = os.Stderr
		if err := w.Start(); err != nil {
			return result{}, err
		}
		procs = append(procs, w)
	}
	for deadline := time.Now().Add(30 * time.Second); workers > 0; time.Sleep(50 * time.Millisecond) {
		if ws, _ := c.Workers(ctx); len(ws) == workers {
			break
		}
		if time.Now().After(deadline) {
			return result{}, fmt.Errorf("%d workers did not join", workers)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	cpu0, err := cpuOf(srv, procs)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	if res, err := c.SubmitJob(ctx, "dns.yaml", []byte(job)); err != nil || res.State != "accepted" {
		return result{}, fmt.Errorf("submit: %+v %v", res, err)
	}
	var parted int64
	for deadline := time.Now().Add(60 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st, err := c.Stats(ctx)
		if err != nil {
			return result{}, err
		}
		if len(st) == 1 && st[0].Runs+st[0].Faulty >= int64(len(blocks)) {
			if st[0].Faulty > 0 {
				return result{}, fmt.Errorf("%d blocks faulty", st[0].Faulty)
			}
			parted = st[0].Parted
			break
		}
		if time.Now().After(deadline) {
			return result{}, errors.New("builtin:dns did not finish in 60 minutes")
		}
	}
	secs := time.Since(start).Seconds()
	cpu1, err := cpuOf(srv, procs)
	if err != nil {
		return result{}, err
	}
	f := strings.Fields(string(load))
	return result{blocks: int64(len(blocks)), bytes: bytes, secs: secs, cpu: (cpu1 - cpu0).Seconds(),
		parted: parted, load: strings.Join(f[:3], " ")}, nil
}

// cpuOf sums the CPU time of the server and the workers.
func cpuOf(srv *benchkit.Server, workers []*exec.Cmd) (time.Duration, error) {
	total, err := srv.CPU()
	if err != nil {
		return 0, err
	}
	for _, w := range workers {
		t, err := benchkit.ProcCPU(w.Process.Pid)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

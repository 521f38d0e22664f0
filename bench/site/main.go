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
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/client"
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
	type variant struct {
		name, bin      string
		slots, workers int
	}
	variants := []variant{
		{"1 slot", plumb, 1, 0},
		{"2 slots", plumb, 2, 0},
		{"2 remote workers", plumb, 0, 2},
	}
	for _, old := range []struct{ name, rev string }{{"sequential (previous), 2 slots", seqRev}, {"no state (lossy), 2 slots", noStateRev}} {
		if old.rev == "" {
			continue
		}
		bin, err := buildRev(dir, old.rev)
		if err != nil {
			fmt.Printf("(%s at %s not measured: %v)\n", old.name, old.rev, err)
			continue
		}
		variants = append(variants, variant{old.name + " @" + old.rev, bin, 2, 0})
	}
	var results []result
	for i, v := range variants {
		r, err := once(v.bin, filepath.Join(dir, fmt.Sprint("run", i)), capture, block, v.slots, v.workers)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		r.name = v.name
		results = append(results, r)
	}
	fmt.Printf("%-42s %7s %9s %7s %8s %10s %6s %7s  %s\n", "server", "blocks", "blocks/s", "MB/s", "seconds", "CPU s/GiB", "cores", "parted", "loadavg before")
	for _, r := range results {
		fmt.Printf("%-42s %7d %9.2f %7.1f %8.2f %10.1f %6.2f %7d  %s\n", r.name, r.blocks, r.blocksPerSec(), float64(r.bytes)/1e6/r.secs, r.secs,
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
	fmt.Printf("2 remote workers / 1 slot: %s blocks/s\n", ratio("2 remote", "1 slot"))
	fmt.Printf("CPU s/GiB, 2 slots / no state: %s  (aim <= 1.1x)\n", cpuRatio("2 slots", "no state"))
	fmt.Printf("(blocks/s depends on the cores free (%d here; one slot's run already keeps more than one busy, its reader and\n", runtime.NumCPU())
	fmt.Println(" writer overlapping, so 2 slots can gain at most cores/one slot's cores); CPU s/GiB is the server's and its")
	fmt.Println(" workers', children included, and does not)")
	return nil
}

// buildRev builds plumb at a git revision of this repository, in a
// worktree under dir.
func buildRev(dir, rev string) (string, error) {
	wt := filepath.Join(dir, "rev-"+strings.NewReplacer("^", "p", "~", "t", "/", "_").Replace(rev))
	if out, err := exec.Command("git", "worktree", "add", "--detach", "--force", wt, rev).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git worktree add %s: %v: %s", rev, err, out)
	}
	defer exec.Command("git", "worktree", "remove", "--force", wt).Run()
	bin := filepath.Join(dir, "plumb-"+filepath.Base(wt))
	build := exec.Command("go", "build", "-o", bin, "./cmd/plumb")
	build.Dir = wt
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build at %s: %v: %s", rev, err, out)
	}
	return bin, nil
}

// once imports the capture into a fresh server as one site's blocks,
// then submits the job and times it until every block has had its run.
func once(plumb, dir, capture, block string, slots, workers int) (result, error) {
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
	if out, err := exec.Command(plumb, "import", "--quiet", "--server", srv.Addr, "--site", "lax", "--new-instance", "--codec", "none",
		"--spool", filepath.Join(dir, "spool"), "--block-size", block, capture).CombinedOutput(); err != nil {
		return result{}, fmt.Errorf("import: %v\n%s", err, out)
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
	fi, err := os.Stat(capture)
	if err != nil {
		return result{}, err
	}
	f := strings.Fields(string(load))
	return result{blocks: int64(len(blocks)), bytes: fi.Size(), secs: secs, cpu: (cpu1 - cpu0).Seconds(),
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

// Command pipeline measures the engine against its baselines, each pair
// in the same run on the same generated input:
//
//   - de-duplication: the thesis's case (decode → a DNS-ish stage → two
//     statistics consumers per user; 3 users, then 5, sharing the first
//     two stages) with merging and with --no-dedup: CPU seconds, bytes
//     written to the store and wall time, and their ratios beside the
//     ratio of stage runs;
//   - skew: a two-stage pipeline where 0%, 50% or 100% of blocks make the
//     second stage 6× slower, backlog-proportional slots against a static
//     equal split: per-block latency (mean, p50, p99) and total time;
//   - chains: decode→encode as two stages against one chained stage.
//
// Every stage costs real CPU (builtin:cpuwork hashes its block), never a
// sleep.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/codecs"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	blocks := flag.Int("blocks", 16, "input blocks per scenario")
	size := flag.Int("block-size", 2<<20, "uncompressed bytes per block")
	rounds := flag.Int("rounds", 16, "cpuwork rounds per stage (CPU cost per byte)")
	skewRounds := flag.Int("skew-rounds", 64, "cpuwork rounds of a light run in the skew scenario (high, so hashing outweighs storing)")
	slots := flag.Int("slots", runtime.NumCPU(), "worker slots of the server")
	only := flag.String("only", "dedup,skew,chains", "scenarios to run")
	flag.Parse()
	b := &bench{plumb: *plumb, blocks: *blocks, size: *size, rounds: *rounds, skewRounds: *skewRounds, slots: *slots}
	for _, s := range strings.Split(*only, ",") {
		var err error
		switch s {
		case "dedup":
			err = b.dedup()
		case "skew":
			err = b.skew()
		case "chains":
			err = b.chains()
		default:
			err = fmt.Errorf("unknown scenario %q", s)
		}
		if err != nil {
			log.Fatalf("%s: %v", s, err)
		}
	}
}

type bench struct {
	plumb                       string
	blocks, size, rounds, slots int
	skewRounds                  int
}

// outcome is what one scenario run cost.
type outcome struct {
	wall    time.Duration
	cpu     time.Duration
	written int64 // bytes of stage outputs stored
	runs    int64
	latency []time.Duration // per output block of the last stage, when asked
}

// scenario runs jobs over input blocks on a fresh server and waits until
// every stage has run once per block. With latencyOf set, jobs are
// submitted before the input arrives and the latency of each block to
// that queue is measured from the input's arrival.
type scenario struct {
	flags     []string
	jobs      []string
	input     func(seq int) []byte
	queue     string // the input queue
	latencyOf string
	every     time.Duration // with latencyOf: one input block per interval
	onStats   func([]client.StageStats)
}

func (b *bench) run(sc scenario) (outcome, error) {
	dir, err := os.MkdirTemp("", "plumb-bench-pipeline-")
	if err != nil {
		return outcome{}, err
	}
	defer os.RemoveAll(dir)
	srv, c, err := benchkit.Serve(b.plumb, dir, append([]string{"--slots", fmt.Sprint(b.slots), "--tick", "200ms"}, sc.flags...)...)
	if err != nil {
		return outcome{}, err
	}
	defer srv.Stop()
	ctx := context.Background()

	put := func(seq int) error {
		data := sc.input(seq)
		sum := sha256.Sum256(data)
		name := block.Name{Time: time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC).Add(time.Duration(seq) * time.Second), Seq: uint64(seq), Instance: "bench", Queue: sc.queue}
		_, err := c.Put(ctx, client.Source{Name: name.String(), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }})
		return err
	}
	submit := func() error {
		for i, j := range sc.jobs {
			res, err := c.SubmitJob(ctx, fmt.Sprintf("job%d.yaml", i), []byte(j))
			if err != nil {
				return err
			}
			if res.State != "accepted" {
				return fmt.Errorf("job rejected: %s", res.Reason)
			}
		}
		return nil
	}
	var start time.Time
	var cpu0 time.Duration
	if sc.latencyOf == "" {
		for seq := 1; seq <= b.blocks; seq++ {
			if err := put(seq); err != nil {
				return outcome{}, err
			}
		}
		cpu0, _ = srv.CPU()
		start = time.Now()
		if err := submit(); err != nil {
			return outcome{}, err
		}
	} else {
		if err := put(0); err != nil { // the queue must exist; from: latest skips it
			return outcome{}, err
		}
		if err := submit(); err != nil {
			return outcome{}, err
		}
		cpu0, _ = srv.CPU()
		start = time.Now()
		tick := time.NewTicker(max(sc.every, time.Millisecond))
		for seq := 1; seq <= b.blocks; seq++ {
			if err := put(seq); err != nil {
				return outcome{}, err
			}
			<-tick.C
		}
		tick.Stop()
	}
	var out outcome
	for {
		st, err := c.Stats(ctx)
		if err != nil {
			return outcome{}, err
		}
		out.runs, out.written = 0, 0
		for _, s := range st {
			out.runs += s.Runs
			out.written += s.BytesOut
			if s.Faulty > 0 {
				return outcome{}, fmt.Errorf("stage %s has faulty blocks", s.Stage)
			}
		}
		if out.runs >= int64(len(st)*b.blocks) && len(st) > 0 {
			break
		}
		if time.Since(start) > 30*time.Minute {
			return outcome{}, fmt.Errorf("not drained after 30 minutes: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	out.wall = time.Since(start)
	if sc.onStats != nil {
		st, err := c.Stats(ctx)
		if err != nil {
			return outcome{}, err
		}
		sc.onStats(st)
	}
	cpu1, err := srv.CPU()
	if err != nil {
		return outcome{}, err
	}
	out.cpu = cpu1 - cpu0
	if sc.latencyOf != "" {
		ins, err := c.Blocks(ctx, sc.queue)
		if err != nil {
			return outcome{}, err
		}
		arrived := map[uint64]time.Time{}
		for _, in := range ins {
			arrived[in.Seq] = in.Arrived
		}
		outs, err := c.Blocks(ctx, sc.latencyOf)
		if err != nil {
			return outcome{}, err
		}
		for _, o := range outs {
			out.latency = append(out.latency, o.Arrived.Sub(arrived[o.Seq]))
		}
	}
	return out, nil
}

// capture makes a compressible block, snappy-compressed like an agent's.
func (b *bench) capture(seq int) []byte {
	r := rand.New(rand.NewPCG(uint64(seq), 1))
	raw := make([]byte, b.size)
	words := []string{"example.com.", "root-servers.net.", " A ", " AAAA ", " NXDOMAIN ", "\x00\x01\x00\x00", "192.0.2.", "2001:db8::"}
	for i := 0; i < len(raw); {
		i += copy(raw[i:], words[r.IntN(len(words))])
	}
	var z bytes.Buffer
	w, _ := codecs.Snappy.NewWriter(&z)
	w.Write(raw)
	w.Close()
	return z.Bytes()
}

func (b *bench) work() string { return fmt.Sprintf("builtin:cpuwork?rounds=%d", b.rounds) }

// userJob is one user of the thesis's case. Every stage costs about the
// same CPU per block and writes a block the size of its input.
func (b *bench) userJob(user string) string {
	return fmt.Sprintf(`job: %[1]s
from: earliest
stages:
  - {name: decode, inputs: [pcap.sz], program: [builtin:decode, %[2]q], outputs: [pcap]}
  - {name: dns, inputs: [pcap], program: %[2]q, outputs: [dns]}
  - {name: stats-a, inputs: [dns], program: %[2]q, outputs: [stats-a.%[1]s]}
  - {name: stats-b, inputs: [dns], program: %[2]q, outputs: [stats-b.%[1]s]}
`, user, b.work())
}

func (b *bench) dedup() error {
	fmt.Printf("== de-duplication: %d blocks of %d MiB, %d slots; each stage hashes its block %d times\n", b.blocks, b.size>>20, b.slots, b.rounds)
	fmt.Printf("%-6s %-9s %6s %10s %12s %9s\n", "users", "merging", "runs", "cpu s", "written MB", "wall s")
	for _, users := range []int{3, 5} {
		var jobs []string
		for u := range users {
			jobs = append(jobs, b.userJob(fmt.Sprintf("user%d", u)))
		}
		res := map[bool]outcome{}
		for _, dedup := range []bool{true, false} {
			sc := scenario{jobs: jobs, input: b.capture, queue: "pcap.sz"}
			if !dedup {
				sc.flags = []string{"--no-dedup"}
			}
			o, err := b.run(sc)
			if err != nil {
				return err
			}
			res[dedup] = o
			fmt.Printf("%-6d %-9s %6d %10.2f %12.1f %9.2f\n", users, map[bool]string{true: "on", false: "--no-dedup"}[dedup],
				o.runs, o.cpu.Seconds(), float64(o.written)/1e6, o.wall.Seconds())
		}
		on, off := res[true], res[false]
		want := float64(off.runs) / float64(on.runs)
		ratio := func(name string, x, y float64) {
			r := x / y
			verdict := "within 10%"
			if r < want*0.9 || r > want*1.1 {
				verdict = "OUTSIDE 10%"
			}
			fmt.Printf("       %s ratio no-dedup/dedup = %.2f (stage-run ratio %.2f: %s)\n", name, r, want, verdict)
		}
		ratio("cpu    ", off.cpu.Seconds(), on.cpu.Seconds())
		ratio("written", float64(off.written), float64(on.written))
		ratio("wall   ", off.wall.Seconds(), on.wall.Seconds())
	}
	return nil
}

// runCost measures the mean processing time of one run of the skewed
// stage over a light or a heavy block.
func (b *bench) runCost(heavy bool) (time.Duration, error) {
	saved := b.blocks
	b.blocks = 6
	defer func() { b.blocks = saved }()
	first := byte('L')
	if heavy {
		first = 'H'
	}
	var perRun time.Duration
	_, err := b.run(scenario{
		jobs:  []string{fmt.Sprintf("job: unit\nfrom: earliest\nstages:\n  - {name: w, inputs: [raw], program: %q, outputs: [raw.w]}\n", b.skewed())},
		input: func(seq int) []byte { raw := make([]byte, b.size); raw[0] = first; return raw }, queue: "raw",
		onStats: func(st []client.StageStats) {
			perRun = time.Duration(st[0].ProcessingSeconds / float64(st[0].Runs) * float64(time.Second))
		},
	})
	return perRun, err
}

func (b *bench) skewed() string {
	return fmt.Sprintf("builtin:cpuwork?rounds=%d&heavy=6", b.skewRounds)
}

func (b *bench) skew() error {
	n := b.blocks * 2
	light, err := b.runCost(false)
	if err != nil {
		return err
	}
	heavy, err := b.runCost(true)
	if err != nil {
		return err
	}
	fmt.Printf("== skew: %d blocks of %d MiB through two stages, %d slots; a heavy block costs the second stage %v, a light one %v (%.1fx);\n"+
		"   blocks arrive steadily, loading the slots to 85%% of their capacity for the mix\n",
		n, b.size>>20, b.slots, heavy.Round(time.Millisecond), light.Round(time.Millisecond), heavy.Seconds()/light.Seconds())
	fmt.Printf("%-5s %-8s %9s %9s %9s %9s\n", "heavy", "workers", "mean s", "p50 s", "p99 s", "total s")
	job := fmt.Sprintf(`job: skew
stages:
  - {name: light, inputs: [raw], program: "builtin:cpuwork?rounds=%d", outputs: [raw.a]}
  - {name: skewed, inputs: [raw.a], program: %q, outputs: [raw.b], retention: forever}
`, b.skewRounds, b.skewed())
	saved := b.blocks
	b.blocks = n
	defer func() { b.blocks = saved }()
	for _, pct := range []int{0, 50, 100} {
		// A block costs a light run in the first stage and a light or a
		// heavy one in the second: arrive at 85% of what the slots can do.
		perBlock := 2*light.Seconds() + (heavy-light).Seconds()*float64(pct)/100
		every := time.Duration(perBlock / float64(b.slots) / 0.85 * float64(time.Second))
		input := func(seq int) []byte {
			raw := make([]byte, b.size)
			rand.NewChaCha8([32]byte{byte(seq), byte(seq >> 8)}).Read(raw)
			raw[0] = 'L'
			if seq > 0 && (seq*pct/100 != (seq-1)*pct/100) {
				raw[0] = 'H' // spread pct% of blocks evenly
			}
			return raw
		}
		means := map[string]float64{}
		for _, policy := range []string{"backlog", "static"} {
			o, err := b.run(scenario{flags: []string{"--workers", policy}, jobs: []string{job}, input: input, queue: "raw", latencyOf: "raw.b", every: every})
			if err != nil {
				return err
			}
			slices.Sort(o.latency)
			var sum time.Duration
			for _, l := range o.latency {
				sum += l
			}
			mean := sum.Seconds() / float64(len(o.latency))
			means[policy] = mean
			fmt.Printf("%-5s %-8s %9.2f %9.2f %9.2f %9.2f\n", fmt.Sprintf("%d%%", pct), policy, mean,
				o.latency[len(o.latency)/2].Seconds(), o.latency[len(o.latency)*99/100].Seconds(), o.wall.Seconds())
		}
		verdict := ""
		if pct > 0 {
			verdict = " (aim at most 0.50)"
			if means["backlog"]/means["static"] > 0.5 {
				verdict = " (aim at most 0.50: MISSED)"
			}
		}
		fmt.Printf("      mean latency backlog/static = %.2f%s\n", means["backlog"]/means["static"], verdict)
	}
	return nil
}

func (b *bench) chains() error {
	fmt.Printf("== chains: decode then encode (zstd), %d blocks of %d MiB\n", b.blocks, b.size>>20)
	fmt.Printf("%-22s %6s %12s %10s %9s\n", "pipeline", "runs", "stored MB", "cpu s", "wall s")
	two := `job: two
from: earliest
stages:
  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap]}
  - {name: encode, inputs: [pcap], program: "builtin:encode?codec=zstd", outputs: [pcap.zst], retention: forever}
`
	one := `job: one
from: earliest
stages:
  - {name: recode, inputs: [pcap.sz], program: [builtin:decode, "builtin:encode?codec=zstd"], outputs: [pcap.zst], retention: forever}
`
	var res []outcome
	for _, c := range []struct{ name, job string }{{"two stages", two}, {"one chained stage", one}} {
		o, err := b.run(scenario{jobs: []string{c.job}, input: b.capture, queue: "pcap.sz"})
		if err != nil {
			return err
		}
		res = append(res, o)
		fmt.Printf("%-22s %6d %12.1f %10.2f %9.2f\n", c.name, o.runs, float64(o.written)/1e6, o.cpu.Seconds(), o.wall.Seconds())
	}
	fmt.Printf("      chained/two-stage: stored %.2f, cpu %.2f, wall %.2f\n", float64(res[1].written)/float64(res[0].written),
		res[1].cpu.Seconds()/res[0].cpu.Seconds(), res[1].wall.Seconds()/res[0].wall.Seconds())
	return nil
}

// Command deadlines replays the SDDS LH*RT experiment against plumb serve,
// in three conditions (quiet, a CPU hog on every core, and the server
// running a CPU-heavy stage). In each it first measures what the whole
// path (server, loopback gRPC, this client) moves with the condition on,
// and gives the server half of that as its read capacity (--read-rate):
// what the server promises deadlines against. It then offers loads of
// 0.8, 1.2 and 1.5 times that capacity: block reads of 4 KiB to 1 MiB in
// random order, sent evenly over a few seconds, each with a deadline from
// 20 ms to 2 s in proportion to its size, under --read-policy fifo and
// llf. It reports, per load, the reads refused or completed late, and for
// llf how many accepted reads still missed their deadline, and where.
//
// Its own process stands in for readers on other machines and the feed
// of the busy stage for agents on other machines; they share the
// server's cores here, so the bench collects garbage less often
// (-client-gogc) and runs the feed at a lower priority (-feed-nice).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"io"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
)

type object struct {
	name string
	size int
}

func main() {
	if os.Getenv("PLUMB_BENCH_HOG") != "" {
		hog()
		return
	}
	if addr := os.Getenv("PLUMB_BENCH_FEED"); addr != "" {
		feed(addr)
		return
	}
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	slots := flag.Int("slots", 4, "the server's transfer slots")
	rate := flag.Float64("rate", 0, "the server's --read-rate, bytes per second: its read capacity, which the deadlines are promised against (0: measure in each condition what the path moves and take -share of it)")
	share := flag.Float64("share", 0.5, "the share of the measured path throughput the server promises (its --read-rate), when -rate is 0")
	window := flag.Duration("window", 5*time.Second, "reads are sent evenly over this span")
	loadsFlag := flag.String("loads", "0.8,1.2,1.5", "offered loads, as fractions of the read capacity; those over 1 are scheduling-bound (more is offered than can be served, and the order decides who makes it)")
	serverFlags := flag.String("server-flags", "", "more flags for plumb serve, space-separated (say --read-margin -1)")
	clientGC := flag.Int("client-gogc", 400, "garbage collection target (GOGC) of this bench's own process, which stands in for readers on other machines; the GOGC variable overrides it")
	flag.IntVar(&feedNice, "feed-nice", 10, "nice value of the process feeding the pipeline condition's stage (it stands in for agents on other machines)")
	conds := flag.String("conditions", "quiet,cpu-hog,pipeline", "the conditions to run, of quiet, cpu-hog and pipeline")
	flag.Parse()
	extra = strings.Fields(*serverFlags)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(*clientGC)
	}
	var loads []float64
	for _, f := range strings.Split(*loadsFlag, ",") {
		l, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || l <= 0 {
			log.Fatalf("-loads: %q is not a positive fraction", f)
		}
		loads = append(loads, l)
	}
	fmt.Printf("== deadline reads: 4 KiB-1 MiB reads sent over %v, deadlines 20 ms-2 s by size; %d transfer slots\n", *window, *slots)
	fmt.Printf("   three conditions: quiet; a CPU hog spinning on every core; the server running a CPU-heavy stage (builtin:cpuwork) over a stream of blocks\n")
	if *rate == 0 {
		fmt.Printf("   the read capacity (--read-rate) in each condition is %.0f%% of what %d readers move through the whole path (server, loopback gRPC, client) in that condition, measured first\n", 100**share, *slots)
	}
	fmt.Printf("%-9s %-6s %5s %7s %9s %9s %9s %9s\n", "condition", "policy", "load", "reads", "served", "refused", "late", "missed")
	type result struct{ fifo, llf outcome }
	results := map[string][]result{} // per condition, per load
	conditions := strings.Split(*conds, ",")
	for _, cond := range conditions {
		capacity := *rate
		if capacity == 0 {
			moved := run(*plumb, cond, "", *slots, 0, *window, nil)
			capacity = *share * moved[0].rate
			fmt.Printf("%-9s the path moves %.0f MB/s; read capacity %.0f MB/s\n", cond, moved[0].rate/1e6, capacity/1e6)
		}
		fifo := run(*plumb, cond, "fifo", *slots, capacity, *window, loads)
		llf := run(*plumb, cond, "llf", *slots, capacity, *window, loads)
		for i := range loads {
			results[cond] = append(results[cond], result{fifo[i], llf[i]})
		}
	}
	for i, load := range loads {
		if load <= 1 {
			continue
		}
		fmt.Printf("\n   at load %.1f (scheduling-bound: more is offered than can be served):\n", load)
		fmt.Printf("   %-9s %8s %8s %10s %22s %18s\n", "condition", "fifo", "llf", "fifo/llf", "llf accepted but late", "of them at server")
		for _, cond := range conditions {
			r := results[cond][i]
			ratio := math.Inf(1)
			if r.llf.missed > 0 {
				ratio = r.fifo.missed / r.llf.missed
			}
			late := float64(r.llf.late) / float64(max(r.llf.accepted, 1))
			verdict := "meets"
			if ratio < 7 || late > 0.001 {
				verdict = "MISSES"
			}
			fmt.Printf("   %-9s %7.1f%% %7.1f%% %10.1f %21.2f%% %18d %s the aim (ratio >= 7, late <= 0.1%%)\n", cond, 100*r.fifo.missed, 100*r.llf.missed, ratio, 100*late, r.llf.lateAtServer, verdict)
		}
	}
	fmt.Printf("   (late: reads not refused that the bench had no bytes of by their deadline; at server: of those, the ones\n" +
		"   the server itself let expire waiting or finished past their deadline; the rest were lost on the way in or out.)\n")
}

// extra are more flags for every server.
var extra []string

// outcome is what a run found at a load: the missed fraction, the late
// reads (by the bench's clock, and of them those late at the server) and
// the accepted reads; or, for a calibration, the bytes per second the
// path moved.
type outcome struct {
	missed                       float64
	late, accepted, lateAtServer int
	rate                         float64
}

// run serves the loads (fractions of capacity) under one condition and
// policy. With no policy it calibrates instead: it measures what slots
// readers, each starting a read as its last one ends, move through the
// uncapped server.
func run(plumb, cond, policy string, slots int, capacity float64, window time.Duration, loads []float64) []outcome {
	dir, err := os.MkdirTemp("", "plumb-bench-deadlines-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	args := []string{"--read-slots", fmt.Sprint(slots), "--read-slots-per-user", "-1", "--tick", "200ms"}
	if policy != "" {
		args = append(args, "--read-policy", policy, "--read-rate", fmt.Sprint(capacity))
	}
	srv, c, err := benchkit.Serve(plumb, dir, append(args, extra...)...)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	objs := upload(c)
	ctx, stop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stop()
	switch cond {
	case "cpu-hog":
		child(ctx, &bg, "PLUMB_BENCH_HOG=1", 0)
	case "pipeline":
		busyStage(ctx, c)
		// The feed is a process of its own, as an agent would be: in the
		// bench's, its puts' hashing delayed the readers' receipts.
		child(ctx, &bg, "PLUMB_BENCH_FEED="+srv.Addr, feedNice)
	}
	time.Sleep(time.Second) // the load settles in
	if policy == "" {
		return []outcome{{rate: moved(c, objs, slots, 3*time.Second)}}
	}
	mean := 0.0
	for _, o := range objs {
		mean += float64(o.size) / float64(len(objs))
	}
	var out []outcome
	for _, load := range loads {
		n := int(load * capacity * window.Seconds() / mean)
		before, _ := c.ReadAdmission(context.Background())
		served, refused, lt := burst(c, objs, n, uint64(n), window)
		after, _ := c.ReadAdmission(context.Background())
		m := float64(refused+lt) / float64(n)
		expired, past := after.ExpiredWaiting-before.ExpiredWaiting, after.PastDeadline-before.PastDeadline
		fmt.Printf("%-9s %-6s %5.1f %7d %9d %9d %9d %8.1f%%   at the server: %d refused, %d expired waiting, %d finished past their deadline; margin %.1f ms\n", cond, policy, load, n, served, refused, lt, 100*m,
			after.Refused-before.Refused, expired, past, 1000*after.Margin)
		out = append(out, outcome{missed: m, late: lt, accepted: served + lt, lateAtServer: int(expired + past)})
	}
	return out
}

// moved is the bytes per second that readers, each reading a random
// object as soon as its last one is in, move over span.
func moved(c *client.Client, objs []object, readers int, span time.Duration) float64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(span)
	start := time.Now()
	for i := range readers {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		wg.Go(func() {
			for time.Now().Before(end) {
				o := objs[r.IntN(len(objs))]
				st, err := c.Get(context.Background(), o.name)
				if err != nil {
					log.Fatal(err)
				}
				for st.Next() {
					n, _ := io.Copy(io.Discard, st)
					total.Add(n)
				}
				if err := st.Err(); err != nil {
					log.Fatal(err)
				}
				st.Close()
			}
		})
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(start).Seconds()
}

// hog spins on every core until killed.
func hog() {
	for range runtime.NumCPU() - 1 {
		go func() {
			for x := 0; ; x++ {
				_ = x * x
			}
		}()
	}
	for x := 0; ; x++ {
		_ = x * x
	}
}

// feedNice is the -feed-nice flag.
var feedNice int

// child runs this bench again as a child process with env added, at the
// nice value given, until ctx ends or the bench dies.
func child(ctx context.Context, bg *sync.WaitGroup, env string, nice int) {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	h := exec.CommandContext(ctx, self)
	if nice != 0 {
		h = exec.CommandContext(ctx, "nice", "-n", fmt.Sprint(nice), self)
	}
	h.Env = append(os.Environ(), env)
	h.Stderr = os.Stderr
	h.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.Start(); err != nil {
		log.Fatal(err)
	}
	bg.Go(func() { h.Wait() })
}

// busyStage gives the server a CPU-heavy stage: builtin:cpuwork hashing
// work.in many times over. feed keeps it busy.
func busyStage(ctx context.Context, c *client.Client) {
	putWork(ctx, c, 1)
	job := "job: burn\nfrom: earliest\nstages:\n  - {name: burn, inputs: [work.in], program: \"builtin:cpuwork?rounds=32\", outputs: [work.out], retention: 1h}\n"
	if res, err := c.SubmitJob(ctx, "burn.yaml", []byte(job)); err != nil || res.State != "accepted" {
		log.Fatalf("submit the CPU-heavy stage: %+v %v", res, err)
	}
}

// feed puts a block of 4 MiB into work.in every 100 ms until killed.
func feed(addr string) {
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	for seq := uint64(2); ; seq++ {
		putWork(context.Background(), c, seq)
		time.Sleep(100 * time.Millisecond)
	}
}

var work = func() []byte {
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return data
}()

func putWork(ctx context.Context, c *client.Client, seq uint64) {
	n := block.Name{Time: time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC).Add(time.Duration(seq) * time.Second), Seq: seq, Instance: "burn", Queue: "work.in"}
	src := client.Source{Name: n.String(), Size: int64(len(work)), Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(work)), nil }}
	if _, err := c.Put(ctx, src); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}

// upload stores 64 blocks of sizes spread log-uniformly from 4 KiB to 1 MiB.
func upload(c *client.Client) []object {
	r := rand.New(rand.NewPCG(5, 5))
	var objs []object
	for i := range 64 {
		size := int(4096 * math.Pow(256, float64(i)/63))
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		n := block.Name{Time: time.Date(2025, 5, 5, 0, 0, i, 0, time.UTC), Seq: uint64(i + 1), Instance: "rt", Queue: "objects"}
		src := client.Source{Name: n.String(), Size: int64(size), Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(string(data))), nil }}
		if _, err := c.Put(context.Background(), src); err != nil {
			log.Fatal(err)
		}
		objs = append(objs, object{n.String(), size})
	}
	return objs
}

// burst sends n reads spread evenly over the window, so more reads are
// more load, and sorts their fates.
func burst(c *client.Client, objs []object, n int, seed uint64, window time.Duration) (served, refused, late int) {
	r := rand.New(rand.NewPCG(seed, 9))
	var s, ref, lt atomic.Int64
	var lateOpened, lateBegan atomic.Int64 // late reads whose stream had opened, or whose bytes had begun
	var refShort atomic.Int64              // refused reads due in under 50 ms
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * window / time.Duration(n))))
		o := objs[r.IntN(len(objs))]
		deadline := 20*time.Millisecond + time.Duration(float64(o.size-4096)/float64((1<<20)-4096)*float64(1980*time.Millisecond))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			st, err := c.Get(ctx, o.name)
			opened, began := err == nil, false
			if err == nil {
				if st.Next() {
					began = true
					_, err = io.Copy(io.Discard, st)
				} else {
					err = st.Err()
				}
				st.Close()
			}
			switch {
			case err == nil:
				s.Add(1)
			case status.Code(err) == codes.DeadlineExceeded && strings.Contains(err.Error(), "need about"):
				ref.Add(1) // refused by the server: it could not make it
				if deadline < 50*time.Millisecond {
					refShort.Add(1)
				}
			default:
				lt.Add(1) // the deadline passed while waiting or transferring
				switch {
				case began:
					lateBegan.Add(1)
				case opened:
					lateOpened.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := ref.Load(); n > 0 {
		fmt.Printf("          of the refused: %d were due in under 50 ms\n", refShort.Load())
	}
	if n := lt.Load(); n > 0 {
		fmt.Printf("          of the late: %d had no answer yet, %d had their stream open but no bytes, %d had bytes\n", n-lateOpened.Load()-lateBegan.Load(), lateOpened.Load(), lateBegan.Load())
	}
	return int(s.Load()), int(ref.Load()), int(lt.Load())
}

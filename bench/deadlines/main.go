// Command deadlines replays the SDDS LH*RT experiment against plumb serve,
// in three conditions (quiet, a CPU hog on every core, and the server
// running a CPU-heavy stage):
// 100 to 10,000 block reads of 4 KiB to 1 MiB in random order, sent
// evenly over a few seconds,
// each with a deadline from 20 ms to 2 s in proportion to its size,
// against a server with a fixed number of transfer slots, under
// --read-policy fifo and llf. It reports, per load, the fraction of reads
// refused or completed late, and for llf how many accepted reads still
// missed their deadline.
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
	"strings"
	"sync"
	"sync/atomic"
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
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	slots := flag.Int("slots", 4, "the server's transfer slots")
	rate := flag.Float64("rate", 400e6, "the server's read cap, bytes per second: with the slots, its fixed read capacity")
	window := flag.Duration("window", 5*time.Second, "reads are sent evenly over this span: the top load offers about 0.9 of the capacity")
	flag.Parse()
	loads := []int{1000, 10000}
	fmt.Printf("== deadline reads: 4 KiB-1 MiB reads sent over %v, deadlines 20 ms-2 s by size; %d transfer slots sharing %.0f MB/s\n", *window, *slots, *rate/1e6)
	fmt.Printf("   three conditions: quiet; a CPU hog spinning on every core; the server running a CPU-heavy stage (builtin:cpuwork) over a stream of blocks\n")
	fmt.Printf("%-9s %-6s %7s %9s %9s %9s %9s\n", "condition", "policy", "reads", "served", "refused", "late", "missed")
	type result struct{ fifo, llf, lateShare float64 }
	results := map[string]result{}
	conditions := []string{"quiet", "cpu-hog", "pipeline"}
	for _, cond := range conditions {
		var res result
		for _, policy := range []string{"fifo", "llf"} {
			missed, late, accepted := run(*plumb, cond, policy, *slots, *rate, *window, loads)
			if policy == "fifo" {
				res.fifo = missed
			} else {
				res.llf = missed
				res.lateShare = float64(late) / float64(max(accepted, 1))
			}
		}
		results[cond] = res
	}
	top := loads[len(loads)-1]
	fmt.Printf("\n   at %d reads (the scheduling-bound load):\n", top)
	fmt.Printf("   %-9s %8s %8s %10s %22s %s\n", "condition", "fifo", "llf", "fifo/llf", "llf accepted but late", "")
	for _, cond := range conditions {
		r := results[cond]
		ratio := math.Inf(1)
		if r.llf > 0 {
			ratio = r.fifo / r.llf
		}
		verdict := "meets"
		if ratio < 7 || r.lateShare > 0.001 {
			verdict = "MISSES"
		}
		fmt.Printf("   %-9s %7.1f%% %7.1f%% %10.1f %21.2f%% %s the aim (ratio >= 7, late <= 0.1%%)\n", cond, 100*r.fifo, 100*r.llf, ratio, 100*r.lateShare, verdict)
	}
}

// run serves the loads under one condition and policy, and returns the
// top load's missed fraction, its late reads and its accepted reads.
func run(plumb, cond, policy string, slots int, rate float64, window time.Duration, loads []int) (missed float64, late, accepted int) {
	dir, err := os.MkdirTemp("", "plumb-bench-deadlines-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := benchkit.StartServer(plumb, dir, "--read-policy", policy, "--read-slots", fmt.Sprint(slots), "--read-rate", fmt.Sprint(rate), "--read-slots-per-user", "-1", "--tick", "200ms")
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	c, err := client.Dial(srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	objs := upload(c)
	ctx, stop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	switch cond {
	case "cpu-hog":
		self, err := os.Executable()
		if err != nil {
			log.Fatal(err)
		}
		h := exec.CommandContext(ctx, self)
		h.Env = append(os.Environ(), "PLUMB_BENCH_HOG=1")
		if err := h.Start(); err != nil {
			log.Fatal(err)
		}
		bg.Go(func() { h.Wait() })
	case "pipeline":
		busyStage(ctx, c, &bg)
	}
	time.Sleep(time.Second) // the load settles in
	for _, n := range loads {
		served, refused, lt := burst(c, objs, n, uint64(n), window)
		m := float64(refused+lt) / float64(n)
		fmt.Printf("%-9s %-6s %7d %9d %9d %9d %8.1f%%\n", cond, policy, n, served, refused, lt, 100*m)
		missed, late, accepted = m, lt, served+lt
	}
	stop()
	bg.Wait()
	return missed, late, accepted
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

// busyStage gives the server a CPU-heavy stage to run for as long as ctx
// lasts: a block of 4 MiB every 100 ms into a queue that builtin:cpuwork
// hashes many times over.
func busyStage(ctx context.Context, c *client.Client, bg *sync.WaitGroup) {
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	put := func(seq uint64) {
		n := block.Name{Time: time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC).Add(time.Duration(seq) * time.Second), Seq: seq, Instance: "burn", Queue: "work.in"}
		src := client.Source{Name: n.String(), Size: int64(len(data)), Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
		if _, err := c.Put(ctx, src); err != nil && ctx.Err() == nil {
			log.Fatal(err)
		}
	}
	put(1)
	job := "job: burn\nfrom: earliest\nstages:\n  - {name: burn, inputs: [work.in], program: \"builtin:cpuwork?rounds=32\", outputs: [work.out], retention: 1h}\n"
	if res, err := c.SubmitJob(ctx, "burn.yaml", []byte(job)); err != nil || res.State != "accepted" {
		log.Fatalf("submit the CPU-heavy stage: %+v %v", res, err)
	}
	bg.Go(func() {
		for seq := uint64(2); ctx.Err() == nil; seq++ {
			put(seq)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
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
			if err == nil {
				if st.Next() {
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
			default:
				lt.Add(1) // the deadline passed while waiting or transferring
			}
		})
	}
	wg.Wait()
	return int(s.Load()), int(ref.Load()), int(lt.Load())
}

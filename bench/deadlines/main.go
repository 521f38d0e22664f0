// Command deadlines replays the SDDS LH*RT experiment against plumb serve:
// 100 to 10,000 block reads of 4 KiB to 1 MiB in random order, sent
// evenly over a few seconds,
// each with a deadline from 20 ms to 2 s in proportion to its size,
// against a server with a fixed number of transfer slots, under
// --read-policy fifo and llf. It reports, per load, the fraction of reads
// refused or completed late, and for llf how many accepted reads still
// missed their deadline.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
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
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	slots := flag.Int("slots", 4, "the server's transfer slots")
	rate := flag.Float64("rate", 400e6, "the server's read cap, bytes per second: with the slots, its fixed read capacity")
	window := flag.Duration("window", 5*time.Second, "reads are sent evenly over this span: the top load offers about 0.9 of the capacity")
	flag.Parse()
	loads := []int{100, 1000, 3000, 10000}
	fmt.Printf("== deadline reads: 4 KiB-1 MiB reads sent over %v, deadlines 20 ms-2 s by size; %d transfer slots sharing %.0f MB/s\n", *window, *slots, *rate/1e6)
	fmt.Printf("%-6s %7s %9s %9s %9s %14s\n", "policy", "reads", "served", "refused", "late", "missed")
	missed := map[string]map[int]float64{"fifo": {}, "llf": {}}
	lateAccepted := 0
	for _, policy := range []string{"fifo", "llf"} {
		dir, err := os.MkdirTemp("", "plumb-bench-deadlines-")
		if err != nil {
			log.Fatal(err)
		}
		srv, err := benchkit.StartServer(*plumb, dir, "--read-policy", policy, "--read-slots", fmt.Sprint(*slots), "--read-rate", fmt.Sprint(*rate))
		if err != nil {
			log.Fatal(err)
		}
		c, err := client.Dial(srv.Addr)
		if err != nil {
			log.Fatal(err)
		}
		objs := upload(c)
		for _, n := range loads {
			served, refused, late := burst(c, objs, n, uint64(n), *window)
			m := float64(refused+late) / float64(n)
			missed[policy][n] = m
			if policy == "llf" {
				lateAccepted += late
			}
			fmt.Printf("%-6s %7d %9d %9d %9d %13.1f%%\n", policy, n, served, refused, late, 100*m)
		}
		c.Close()
		srv.Stop()
		os.RemoveAll(dir)
	}
	top := loads[len(loads)-1]
	ratio := math.Inf(1)
	if missed["llf"][top] > 0 {
		ratio = missed["fifo"][top] / missed["llf"][top]
	}
	fmt.Printf("   at %d reads: fifo misses %.1f%%, llf %.1f%% (fifo/llf = %.1f; aim at least 7); llf reads accepted but late: %d (aim 0)\n",
		top, 100*missed["fifo"][top], 100*missed["llf"][top], ratio, lateAccepted)
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

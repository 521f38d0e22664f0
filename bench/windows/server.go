package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
)

// serverMonth replays the trace's first month through a real server with
// a daily window stage, uploading blocks in arrival order as fast as the
// server takes them, and measures how long after the decisive block's
// acknowledgement each complete day fired.
func serverMonth(plumb string, tr *trace) error {
	const days = 30
	dir, err := os.MkdirTemp("", "plumb-bench-windows-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, c, err := benchkit.Serve(plumb, dir, "--tick", "100ms")
	if err != nil {
		return err
	}
	defer srv.Stop()
	ctx := context.Background()
	end := tr.start.Add((days + 1) * 24 * time.Hour)
	var month []arrival
	for _, a := range tr.arrivals {
		if a.t.Before(end) {
			month = append(month, a)
		}
	}
	source := func(a arrival) client.Source {
		n := block.Name{Time: a.t, Seq: a.seq, Instance: a.site, Queue: "trace"}
		data := []byte(fmt.Sprintf("%s %d\n", a.site, a.seq))
		sum := sha256.Sum256(data)
		return client.Source{Name: n.String(), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
	}
	// The queue must hold a block before a job names it.
	if _, err := c.Put(ctx, source(month[0])); err != nil {
		return err
	}
	res, err := c.SubmitJob(ctx, "month.yaml", []byte(fmt.Sprintf(`
job: month
from: earliest
stages:
  - name: daily
    abstraction: window
    window: {size: 24h, start: %q}
    inputs: [trace]
    program: [cat]
    outputs: [trace.days]
    retention: forever
`, tr.start.Format(time.RFC3339))))
	if err != nil || res.State != "accepted" {
		return fmt.Errorf("submit: %v %s", err, res.Reason)
	}
	truths := tr.oracle()
	// The decisive arrival of each day is the one at its decidable moment.
	decisive := map[string]map[int]time.Time{} // site → day → wall time of its ack
	type key struct {
		site string
		at   time.Time
	}
	wanted := map[key][]int{}
	for site, byDay := range truths {
		decisive[site] = map[int]time.Time{}
		for d, tt := range byDay {
			if d < days && !tt.decidable.IsZero() {
				wanted[key{site, tt.decidable}] = append(wanted[key{site, tt.decidable}], d)
			}
		}
	}
	t0 := time.Now()
	// Each site uploads its own blocks in arrival order, in DoPuts of up
	// to 64 consecutive ones, all sites at once, as agents would.
	bySite := map[string][]arrival{}
	for _, a := range month[1:] {
		bySite[a.site] = append(bySite[a.site], a)
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make(chan error, len(bySite))
	)
	for _, as := range bySite {
		wg.Go(func() {
			for i := 0; i < len(as); i += 64 {
				part := as[i:min(i+64, len(as))]
				var srcs []client.Source
				for _, a := range part {
					srcs = append(srcs, source(a))
				}
				if _, err := c.Put(ctx, srcs...); err != nil {
					errs <- err
					return
				}
				now := time.Now()
				mu.Lock()
				for _, a := range part {
					for _, d := range wanted[key{a.site, a.at}] {
						decisive[a.site][d] = now
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	upload := time.Since(t0)
	// Wait for the days to fire, then read when each did.
	want := 0
	for _, byDay := range decisive {
		want += len(byDay)
	}
	var ws []struct {
		site string
		day  int
		at   time.Time
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		views, err := c.Windows(ctx, "month/daily")
		if err != nil {
			return err
		}
		ws = ws[:0]
		for _, v := range views {
			if v.State != "fired" || v.Revision != 1 {
				continue
			}
			site, _, _ := strings.Cut(v.ID, "/")
			ws = append(ws, struct {
				site string
				day  int
				at   time.Time
			}{site, int(v.From.Sub(tr.start) / (24 * time.Hour)), v.Fired})
		}
		if len(ws) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var lat []time.Duration
	stalls := 0
	for _, w := range ws {
		if at, ok := decisive[w.site][w.day]; ok {
			lat = append(lat, max(w.at.Sub(at), 0))
		}
	}
	for site, byDay := range decisive {
		for d := range byDay {
			if !slices.ContainsFunc(ws, func(w struct {
				site string
				day  int
				at   time.Time
			}) bool {
				return w.site == site && w.day == d
			}) {
				stalls++
			}
		}
	}
	slices.Sort(lat)
	p50, p99 := time.Duration(0), time.Duration(0)
	if len(lat) > 0 {
		p50, p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	fmt.Printf("== one month through a real server: %d blocks uploaded in %v (%.0f/s); %d of %d decidable days fired, %d never\n",
		len(month), upload.Round(time.Millisecond), float64(len(month))/upload.Seconds(), len(lat), want, stalls)
	fmt.Printf("   trigger latency after the decisive block's ack: p50 %v, p99 %v (aim: p99 under 1 s)\n", p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	return nil
}

// Command windows replays an arrival trace of six capture sites over more
// than a year through three ways of deciding that a site's UTC day is
// complete, and scores each against the trace's oracle:
//
//   - Plumb: the windowing package (sequence-number brackets, max_wait);
//   - count-and-cron: checked hourly, a day is complete when its block
//     count reaches 95% of the trailing 7-day average;
//   - watermark: a day closes when the site's watermark (latest event
//     time minus a bounded out-of-orderness) passes its end, or when the
//     site has been idle long enough.
//
// It reports false stalls (a decidable day fired more than an hour late,
// or never), missed losses (fired while a block was lost, without saying
// so), premature closes (fired before a block that then arrived, without
// saying so), and trigger latency after the decidable moment.
package main

import (
	"flag"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/windowing"
)

// fire is one approach closing one site-day.
type fire struct {
	site     string
	day      int
	at       time.Time
	reported map[uint64]bool // sequence numbers said to be missing
}

// approach decides site-days from arrivals.
type approach interface {
	name() string
	arrive(a arrival) []fire
	// tick fires what the clock alone decides by now.
	tick(now time.Time) []fire
}

func main() {
	days := flag.Int("days", 420, "days of trace")
	seed := flag.Uint64("seed", 1, "trace seed")
	plumb := flag.String("plumb", "bin/plumb", "plumb binary, for the real-server month")
	month := flag.Bool("server-month", true, "also replay one month through a real server")
	flag.Parse()
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	t0 := time.Now()
	tr := generate(traceConfig{seed: *seed, days: *days, start: start})
	truths := tr.oracle()
	fmt.Printf("== windows: %s (generated in %v)\n", tr, time.Since(t0).Round(time.Millisecond))
	lossy, decidable := 0, 0
	for _, byDay := range truths {
		for _, tt := range byDay {
			if tt.lost > 0 {
				lossy++
			}
			if !tt.decidable.IsZero() {
				decidable++
			}
		}
	}
	fmt.Printf("   site-days: %d decidable, %d with a lost block\n", decidable, lossy)
	fmt.Printf("%-16s %8s %12s %12s %10s %12s %12s %9s\n", "approach", "fired", "false stall", "missed loss", "premature", "latency p50", "latency p99", "replay")
	for _, a := range []approach{newPlumb(start), newCountCron(start), newWatermark(start)} {
		t1 := time.Now()
		fires := replay(tr, a)
		s := score(tr, truths, fires)
		fmt.Printf("%-16s %8d %12d %12d %10d %12s %12s %9s\n", a.name(), s.fired, s.falseStalls, s.missedLosses, s.premature,
			s.p50.Round(time.Millisecond), s.p99.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	fmt.Println("aim for Plumb: 0 false stalls, 0 missed losses")
	if *month {
		if err := serverMonth(*plumb, tr); err != nil {
			log.Fatalf("server month: %v", err)
		}
	}
}

// replay feeds arrivals in order and the clock in steps of a minute
// between them.
func replay(tr *trace, a approach) []fire {
	var out []fire
	var now time.Time
	for _, ar := range tr.arrivals {
		for now.IsZero() || now.Add(time.Minute).Before(ar.at) {
			if now.IsZero() {
				now = ar.at.Truncate(time.Minute)
				break
			}
			now = now.Add(time.Minute)
			out = append(out, a.tick(now)...)
		}
		out = append(out, a.arrive(ar)...)
	}
	end := tr.arrivals[len(tr.arrivals)-1].at
	for now = now.Add(time.Minute); now.Before(end.Add(48 * time.Hour)); now = now.Add(time.Minute) {
		out = append(out, a.tick(now)...)
	}
	return out
}

type scores struct {
	fired, falseStalls, missedLosses, premature int
	p50, p99                                    time.Duration
}

func score(tr *trace, truths map[string]map[int]*truth, fires []fire) scores {
	var s scores
	first := map[string]map[int]fire{}
	for _, f := range fires {
		if first[f.site] == nil {
			first[f.site] = map[int]fire{}
		}
		if _, ok := first[f.site][f.day]; !ok {
			first[f.site][f.day] = f
			s.fired++
		}
	}
	var lat []time.Duration
	for site, byDay := range truths {
		for day, tt := range byDay {
			f, fired := first[site][day]
			if !tt.decidable.IsZero() && (!fired || f.at.After(tt.decidable.Add(time.Hour))) {
				s.falseStalls++
			}
			if !fired {
				continue
			}
			missedLoss, early := false, false
			for _, m := range tt.members {
				if !m.lost && !m.arrives.After(f.at) {
					continue // there when the day fired
				}
				if f.reported[m.seq] {
					continue // said to be missing
				}
				if m.lost {
					missedLoss = true
				} else {
					early = true
				}
			}
			if missedLoss {
				s.missedLosses++
			}
			if early {
				s.premature++
			}
			if !tt.decidable.IsZero() && !missedLoss && !early {
				lat = append(lat, max(f.at.Sub(tt.decidable), 0))
			}
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		s.p50, s.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return s
}

// plumbApproach is the windowing package with a daily spec.
type plumbApproach struct {
	start time.Time
	tr    *windowing.Tracker
}

func newPlumb(start time.Time) *plumbApproach {
	tr, err := windowing.New(windowing.Spec{Size: 24 * time.Hour, Phase: start, MaxWait: 6 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	return &plumbApproach{start: start, tr: tr}
}

func (p *plumbApproach) name() string { return "plumb" }

func (p *plumbApproach) arrive(a arrival) []fire {
	p.tr.Add(windowing.Block{Instance: a.site, Seq: a.seq, Time: a.t, Arrived: a.at})
	return p.fires(p.tr.Due(a.at))
}

func (p *plumbApproach) tick(now time.Time) []fire {
	if next := p.tr.NextCheck(now); next.IsZero() || now.Before(next) {
		return nil
	}
	return p.fires(p.tr.Due(now))
}

func (p *plumbApproach) fires(fs []windowing.Firing) []fire {
	var out []fire
	for _, f := range fs {
		rep := map[uint64]bool{}
		for _, m := range f.Missing {
			rep[m.Seq] = true
		}
		out = append(out, fire{site: f.ID.Instance, day: int(f.From.Sub(p.start) / (24 * time.Hour)), at: f.At, reported: rep})
	}
	return out
}

// countCron is the count-estimate-and-cron baseline.
type countCron struct {
	start    time.Time
	counts   map[string]map[int]int // arrived blocks per site-day
	finals   map[string]map[int]int // counts when each day fired
	fired    map[string]map[int]bool
	seen     map[string]map[uint64]bool
	lastHour time.Time
}

func newCountCron(start time.Time) *countCron {
	return &countCron{start: start, counts: map[string]map[int]int{}, finals: map[string]map[int]int{},
		fired: map[string]map[int]bool{}, seen: map[string]map[uint64]bool{}}
}

func (c *countCron) name() string { return "count-and-cron" }

func (c *countCron) arrive(a arrival) []fire {
	if c.seen[a.site] == nil {
		c.seen[a.site], c.counts[a.site], c.finals[a.site], c.fired[a.site] = map[uint64]bool{}, map[int]int{}, map[int]int{}, map[int]bool{}
	}
	if c.seen[a.site][a.seq] {
		return nil // a duplicate: a careful cron job dedups
	}
	c.seen[a.site][a.seq] = true
	c.counts[a.site][int(a.t.Sub(c.start)/(24*time.Hour))]++
	return nil
}

func (c *countCron) tick(now time.Time) []fire {
	if now.Minute() != 0 {
		return nil // hourly
	}
	var out []fire
	today := int(now.Sub(c.start) / (24 * time.Hour))
	for site, byDay := range c.counts {
		for d := today - 14; d < today; d++ {
			if d < 0 || c.fired[site][d] {
				continue
			}
			sum, n := 0, 0
			for p := d - 7; p < d; p++ {
				if v, ok := c.finals[site][p]; ok {
					sum += v
					n++
				}
			}
			if n == 0 {
				// No history yet: a day with any block counts as complete.
				if byDay[d] == 0 {
					continue
				}
			} else if float64(byDay[d]) < 0.95*float64(sum)/float64(n) {
				continue
			}
			c.fired[site][d] = true
			c.finals[site][d] = byDay[d]
			out = append(out, fire{site: site, day: d, at: now})
		}
	}
	return out
}

// watermark is the stream-engine baseline: bounded out-of-orderness and
// an idle-source timeout.
type watermark struct {
	start     time.Time
	bound     time.Duration
	idle      time.Duration
	maxEvent  map[string]time.Time
	lastSeen  map[string]time.Time
	nextClose map[string]int // the next day to close per site
}

func newWatermark(start time.Time) *watermark {
	return &watermark{start: start, bound: 30 * time.Minute, idle: 2 * time.Hour, maxEvent: map[string]time.Time{},
		lastSeen: map[string]time.Time{}, nextClose: map[string]int{}}
}

func (w *watermark) name() string { return "watermark" }

func (w *watermark) arrive(a arrival) []fire {
	if _, ok := w.nextClose[a.site]; !ok {
		w.nextClose[a.site] = int(a.t.Sub(w.start) / (24 * time.Hour))
	}
	if a.t.After(w.maxEvent[a.site]) {
		w.maxEvent[a.site] = a.t
	}
	w.lastSeen[a.site] = a.at
	return w.close(a.site, w.maxEvent[a.site].Add(-w.bound), a.at)
}

func (w *watermark) tick(now time.Time) []fire {
	var out []fire
	for site, last := range w.lastSeen {
		if now.Sub(last) >= w.idle {
			// An idle source no longer holds time back: its watermark
			// follows the clock.
			out = append(out, w.close(site, now.Add(-w.bound), now)...)
		}
	}
	return out
}

func (w *watermark) close(site string, mark, now time.Time) []fire {
	var out []fire
	for {
		d := w.nextClose[site]
		end := w.start.Add(time.Duration(d+1) * 24 * time.Hour)
		if mark.Before(end) {
			return out
		}
		out = append(out, fire{site: site, day: d, at: now})
		w.nextClose[site] = d + 1
	}
}

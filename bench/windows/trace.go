package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// A trace is what six capture sites send over many days: 5-minute blocks
// (more of them at the daily peak), with the troubles of real links.
type trace struct {
	start    time.Time
	days     int
	sites    []string
	blocks   map[string][]genBlock // per site, in sequence order
	arrivals []arrival             // every arrival, in arrival order
}

type genBlock struct {
	seq     uint64
	t       time.Time // event time
	lost    bool      // never arrives
	arrives time.Time // first arrival
}

type arrival struct {
	site string
	seq  uint64
	t    time.Time // event time
	at   time.Time
	dup  bool
}

// traceConfig says which troubles happen where.
type traceConfig struct {
	seed  uint64
	days  int
	start time.Time
}

// generate makes the trace: diurnal rates, outages (blocks held and sent
// when the link returns), stalls (minutes of delay), single lost blocks,
// heavy-tailed delays, duplicates, a site added midway and one silent for
// days.
func generate(cfg traceConfig) *trace {
	r := rand.New(rand.NewPCG(cfg.seed, 77))
	tr := &trace{start: cfg.start, days: cfg.days, sites: []string{"ams", "iad", "lax", "nrt", "syd", "gru"}, blocks: map[string][]genBlock{}}
	end := cfg.start.Add(time.Duration(cfg.days) * 24 * time.Hour)
	for si, site := range tr.sites {
		first := cfg.start
		if site == "gru" {
			first = cfg.start.Add(time.Duration(cfg.days/2) * 24 * time.Hour) // added midway
		}
		// Outages of 2 to 12 hours, a few a year; stalls of 10 to 60
		// minutes, a few a week.
		type span struct{ from, to time.Time }
		var outages, stalls []span
		for d := 0; d < cfg.days; d++ {
			day := cfg.start.Add(time.Duration(d) * 24 * time.Hour)
			if r.Float64() < 0.01 {
				from := day.Add(time.Duration(r.IntN(24*60)) * time.Minute)
				outages = append(outages, span{from, from.Add(time.Duration(2+r.IntN(11)) * time.Hour)})
			}
			if r.Float64() < 0.4 {
				from := day.Add(time.Duration(r.IntN(24*60)) * time.Minute)
				stalls = append(stalls, span{from, from.Add(time.Duration(10+r.IntN(51)) * time.Minute)})
			}
		}
		heldUntil := func(t time.Time) time.Time {
			for _, o := range outages {
				if !t.Before(o.from) && t.Before(o.to) {
					return o.to
				}
			}
			for _, s := range stalls {
				if !t.Before(s.from) && t.Before(s.to) {
					return s.to
				}
			}
			return time.Time{}
		}
		var seq uint64
		for t := first; t.Before(end); t = t.Add(5 * time.Minute) {
			day := int(t.Sub(cfg.start) / (24 * time.Hour))
			if site == "syd" && day >= cfg.days/4 && day < cfg.days/4+5 {
				continue // no traffic at all for five days
			}
			// Diurnal rate: one block per 5 minutes at night, up to three at
			// the peak; each site at its own local hour.
			hour := float64(t.Hour()+3*si) + float64(t.Minute())/60
			rate := 2 + 1.2*math.Sin(2*math.Pi*(hour-8)/24)
			n := max(1, int(rate+r.Float64()-0.5))
			for i := range n {
				seq++
				et := t.Add(time.Duration(i) * 5 * time.Minute / time.Duration(n))
				b := genBlock{seq: seq, t: et}
				// The block is cut when its interval ends, then shipped.
				ready := t.Add(5 * time.Minute)
				delay := time.Duration(1+r.IntN(10)) * time.Second
				if r.Float64() < 0.05 { // heavy tail: Pareto, capped at 6 h
					p := 2 * time.Second.Seconds() / math.Pow(r.Float64(), 1/1.2)
					delay += time.Duration(min(p, 6*3600) * float64(time.Second))
				}
				at := ready.Add(delay)
				if h := heldUntil(ready); !h.IsZero() {
					at = h.Add(delay + time.Duration(r.IntN(600))*time.Second)
				}
				b.arrives = at
				if r.Float64() < 1e-4 {
					b.lost = true
				}
				tr.blocks[site] = append(tr.blocks[site], b)
				if !b.lost {
					tr.arrivals = append(tr.arrivals, arrival{site, seq, et, at, false})
					if r.Float64() < 5e-4 {
						tr.arrivals = append(tr.arrivals, arrival{site, seq, et, at.Add(time.Duration(1+r.IntN(3600)) * time.Second), true})
					}
				}
			}
		}
	}
	sort.SliceStable(tr.arrivals, func(i, j int) bool { return tr.arrivals[i].at.Before(tr.arrivals[j].at) })
	return tr
}

// truth is a site's UTC day as it really was.
type truth struct {
	site string
	day  int
	// members are the blocks of the day; lost ones never arrive.
	members []genBlock
	lost    int
	// decidable is the earliest moment the day's completeness can be
	// known: every member, the block before and the first block after
	// have arrived. Zero when a member is lost or the after block never
	// comes within the trace.
	decidable time.Time
}

// oracle computes every site-day's truth.
func (tr *trace) oracle() map[string]map[int]*truth {
	out := map[string]map[int]*truth{}
	for _, site := range tr.sites {
		out[site] = map[int]*truth{}
		bs := tr.blocks[site]
		for i, b := range bs {
			d := int(b.t.Sub(tr.start) / (24 * time.Hour))
			tt := out[site][d]
			if tt == nil {
				tt = &truth{site: site, day: d}
				out[site][d] = tt
			}
			tt.members = append(tt.members, b)
			if b.lost {
				tt.lost++
			}
			_ = i
		}
		// Days without any block between days with blocks are windows too:
		// complete and empty once bracketed.
		for d := 0; d < tr.days; d++ {
			if out[site][d] == nil {
				out[site][d] = &truth{site: site, day: d}
			}
		}
		for d, tt := range out[site] {
			from := tr.start.Add(time.Duration(d) * 24 * time.Hour)
			to := from.Add(24 * time.Hour)
			// Brackets: the last block before from, the first at or after to.
			li := sort.Search(len(bs), func(i int) bool { return !bs[i].t.Before(from) })
			ri := sort.Search(len(bs), func(i int) bool { return !bs[i].t.Before(to) })
			if li == 0 && len(tt.members) == 0 {
				delete(out[site], d) // before the site's stream began: no window
				continue
			}
			if ri >= len(bs) || tt.lost > 0 {
				continue // never decidable within the trace, or lossy
			}
			dec := bs[ri].arrives
			if bs[ri].lost {
				continue
			}
			if li > 0 {
				if bs[li-1].lost {
					continue
				}
				dec = later(dec, bs[li-1].arrives)
			} else if bs[0].seq != 1 {
				continue
			}
			for _, m := range tt.members {
				dec = later(dec, m.arrives)
			}
			tt.decidable = dec
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (tr *trace) String() string {
	n := 0
	for _, bs := range tr.blocks {
		n += len(bs)
	}
	return fmt.Sprintf("%d sites, %d days, %d blocks, %d arrivals", len(tr.sites), tr.days, n, len(tr.arrivals))
}

package dnstop

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Bounds of what a Collector holds and exports.
const (
	// MaxSites bounds the sites ranked apart; tallies of sites past it
	// are not ranked (their rows still are).
	MaxSites = 1024
	// collectorCounters is how many values a Collector follows per site
	// and dimension: twice the most it exports.
	collectorCounters = 2 * MaxN
)

// A Collector ranks the tallies of committed dnstop runs per site and
// dimension over the newest window of event time each site has
// reached, and exports the top n of each as Prometheus gauges. A site's
// series go when a newer window starts (a block of an older window adds
// nothing) and when nothing was added for two windows' time. So at any
// time a site and dimension have at most n series. It is a
// stage.Tallier and a prometheus.Collector.
type Collector struct {
	now   func() time.Time
	mu    sync.Mutex
	sites map[string]*siteRanks
}

type siteRanks struct {
	window Window
	added  time.Time // by the clock: when a tally was last added
	dims   map[string]*dimRanks
}

type dimRanks struct {
	sum *Summary
	n   int
}

// NewCollector returns an empty Collector whose series expire by the
// clock now (time.Now when nil).
func NewCollector(now func() time.Time) *Collector {
	if now == nil {
		now = time.Now
	}
	return &Collector{now: now, sites: map[string]*siteRanks{}}
}

// Check implements stage.Tallier.
func (c *Collector) Check(t map[string]int64) error { return CheckTally(t) }

// part is a run's ranks of one site, dimension and window.
type part struct {
	key          tallyKey
	items        map[string]*Item
	total, bound int64
	n            int
}

// Add implements stage.Tallier: it ranks a committed run's tally. Keys
// that do not read (Check refuses them from workers) are skipped.
func (c *Collector) Add(t map[string]int64) {
	parts := map[[3]string]*part{}
	for k, v := range t {
		tk, err := parseTallyKey(k)
		if err != nil || v < 0 {
			continue
		}
		id := [3]string{tk.site, tk.dim, tk.window.String()}
		p := parts[id]
		if p == nil {
			p = &part{key: tk, items: map[string]*Item{}, n: 10}
			parts[id] = p
		}
		item := func() *Item {
			it := p.items[tk.value]
			if it == nil {
				it = &Item{Value: tk.value}
				p.items[tk.value] = it
			}
			return it
		}
		switch tk.kind {
		case keyCount:
			item().Count = v
		case keyErr:
			item().Err = v
		case keyTotal:
			p.total = v
		case keyBound:
			p.bound = v
		case keyN:
			p.n = int(min(max(v, 1), MaxN))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, p := range parts {
		c.add(p, now)
	}
}

func (c *Collector) add(p *part, now time.Time) {
	site, w := p.key.site, p.key.window
	s := c.sites[site]
	switch {
	case s == nil:
		if len(c.sites) >= MaxSites {
			c.expire(now)
			if len(c.sites) >= MaxSites {
				return
			}
		}
		s = &siteRanks{window: w, dims: map[string]*dimRanks{}}
		c.sites[site] = s
	case w.Start.Before(s.window.Start):
		return // a late block of a window the site has left
	case w.Start.After(s.window.Start):
		s.window, s.dims = w, map[string]*dimRanks{}
	}
	s.added = now
	d := s.dims[p.key.dim]
	if d == nil {
		d = &dimRanks{sum: NewSummary(collectorCounters)}
		s.dims[p.key.dim] = d
	}
	d.n = max(d.n, p.n)
	d.sum.Merge(p.summary())
}

// summary is the part as a Summary: a value it does not list may have
// been seen up to its bound.
func (p *part) summary() *Summary {
	s := NewSummary(len(p.items) + 1)
	var counted int64
	for _, it := range p.items {
		if it.Count <= 0 {
			continue
		}
		s.Add(it.Value, it.Count)
		s.h.c[s.pos[it.Value]].Err = min(it.Err, it.Count)
		counted += it.Count
	}
	s.floor = p.bound
	// The total is what the run counted, values kept or not.
	s.total = max(p.total, counted)
	return s
}

// expire lets go of the sites nothing was added to for two windows.
func (c *Collector) expire(now time.Time) {
	for name, s := range c.sites {
		if now.Sub(s.added) > 2*s.window.Size {
			delete(c.sites, name)
		}
	}
}

var (
	descTop = prometheus.NewDesc("plumb_dns_top_queries",
		"Queries (responses for dimension=\"rcode\") of the most counted values of each site and dimension in the site's newest window of event time (builtin:dnstop); a count is over by at most plumb_dns_top_bound.",
		[]string{"site", "dimension", "value"}, nil)
	descBound = prometheus.NewDesc("plumb_dns_top_bound",
		"By how much a plumb_dns_top_queries count may be over, and the most a value not listed was seen, in the site's newest window.",
		[]string{"site", "dimension"}, nil)
	descTotal = prometheus.NewDesc("plumb_dns_top_total",
		"Queries (responses for rcode) each site's dimension counted in its newest window; the share of a value is its count over this.",
		[]string{"site", "dimension"}, nil)
	descWindow = prometheus.NewDesc("plumb_dns_top_window_start_seconds",
		"The start of each site's newest window of event time, in Unix seconds.",
		[]string{"site"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTop, descBound, descTotal, descWindow} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(c.now())
	for name, s := range c.sites {
		ch <- prometheus.MustNewConstMetric(descWindow, prometheus.GaugeValue, float64(s.window.Start.Unix()), name)
		for dim, d := range s.dims {
			ch <- prometheus.MustNewConstMetric(descBound, prometheus.GaugeValue, float64(d.sum.Bound()), name, dim)
			ch <- prometheus.MustNewConstMetric(descTotal, prometheus.GaugeValue, float64(d.sum.Total()), name, dim)
			for _, it := range d.sum.Top(d.n) {
				ch <- prometheus.MustNewConstMetric(descTop, prometheus.GaugeValue, float64(it.Count), name, dim, it.Value)
			}
		}
	}
}

package dnsmetrics

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxSites bounds the sites counted apart; the tallies of sites past it
// are counted under OtherSite.
const MaxSites = 1024

// OtherSite labels the sites past MaxSites.
const OtherSite = "_other"

// TopTracked is how many registered domains a site's table follows (the
// space-saving algorithm: a domain new to a full table takes the place
// of the least counted, inheriting its count, so a domain's count is
// over by at most that); TopExported of them are exported.
const (
	TopTracked  = 100
	TopExported = 10
)

// Collector sums the tallies of committed runs and exports them. It is
// an stage.Tallier and a prometheus.Collector.
type Collector struct {
	mu    sync.Mutex
	sites map[string]*siteCounts
}

type siteCounts struct {
	queries   map[[2]string]float64 // transport, qtype
	responses map[string]float64    // rcode
	sizes     []uint64              // by SizeBuckets index, the last above all
	sizeSum   float64
	lat       []uint64
	latSum    float64 // seconds
	malformed float64
	top       map[string]int64
	rate      float64 // the sample rate of the last block counted
}

// NewCollector returns an empty Collector.
func NewCollector() *Collector { return &Collector{sites: map[string]*siteCounts{}} }

// Check implements stage.Tallier.
func (c *Collector) Check(t map[string]int64) error { return Check(t) }

// Add implements stage.Tallier: it counts a committed run's tally. Keys
// that do not read (Check refuses them from workers) are skipped.
func (c *Collector) Add(t map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range t {
		kk, err := parseKey(k)
		if err != nil || n < 0 {
			continue
		}
		s := c.site(kk.site)
		switch kk.kind {
		case kindQuery:
			s.queries[[2]string{kk.label, kk.label2}] += float64(n)
		case kindResponse:
			s.responses[kk.label] += float64(n)
		case kindSize:
			s.sizes[kk.bucket] += uint64(n)
		case kindSizeSum:
			s.sizeSum += float64(n)
		case kindLatency:
			s.lat[kk.bucket] += uint64(n)
		case kindLatencySum:
			s.latSum += float64(n) / 1e6
		case kindMalformed:
			s.malformed += float64(n)
		case kindTop:
			s.count(kk.label, n)
		case kindSampleRate:
			s.rate = float64(n)
		}
	}
}

func (c *Collector) site(name string) *siteCounts {
	s := c.sites[name]
	if s == nil {
		if len(c.sites) >= MaxSites {
			name = OtherSite
			if s = c.sites[name]; s != nil {
				return s
			}
		}
		s = &siteCounts{queries: map[[2]string]float64{}, responses: map[string]float64{},
			sizes: make([]uint64, len(SizeBuckets)+1), lat: make([]uint64, len(LatencyBuckets)+1), top: map[string]int64{}}
		c.sites[name] = s
	}
	return s
}

// count adds n queries for a domain to the site's table.
func (s *siteCounts) count(domain string, n int64) {
	if _, ok := s.top[domain]; ok || len(s.top) < TopTracked {
		s.top[domain] += n
		return
	}
	least, min := "", int64(-1)
	for d, c := range s.top {
		if min < 0 || c < min || (c == min && d > least) {
			least, min = d, c
		}
	}
	delete(s.top, least)
	s.top[domain] = min + n
}

var (
	descQueries   = prometheus.NewDesc("plumb_dns_queries_total", "DNS queries in committed blocks, by site, transport and query type (types outside a fixed set are \"other\"); of a sampled capture, scaled by its rate to a total.", []string{"site", "transport", "qtype"}, nil)
	descResponses = prometheus.NewDesc("plumb_dns_responses_total", "DNS responses in committed blocks, by site and rcode; of a sampled capture, scaled by its rate to a total.", []string{"site", "rcode"}, nil)
	descSize      = prometheus.NewDesc("plumb_dns_response_size_bytes", "Sizes of DNS responses in committed blocks.", []string{"site"}, nil)
	descLatency   = prometheus.NewDesc("plumb_dns_latency_seconds", "Time from query to response of answered queries in committed blocks of transactions (builtin:dnspairs).", []string{"site"}, nil)
	descMalformed = prometheus.NewDesc("plumb_dns_malformed_total", "Malformed DNS messages in committed blocks.", []string{"site"}, nil)
	descRate      = prometheus.NewDesc("plumb_dns_sample_rate", "The N of --sample 1/N the site's last counted block was captured with (1: every packet); every plumb_dns_ count is scaled by it to a total.", []string{"site"}, nil)
	descTop       = prometheus.NewDesc("plumb_dns_top_domain_queries", "Queries for the most asked registered domains of each site since the server started (the top 10 of 100 followed; a count is over by at most the least followed count).", []string{"site", "domain"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueries, descResponses, descSize, descLatency, descMalformed, descTop, descRate} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, s := range c.sites {
		for k, n := range s.queries {
			ch <- prometheus.MustNewConstMetric(descQueries, prometheus.CounterValue, n, name, k[0], k[1])
		}
		for rcode, n := range s.responses {
			ch <- prometheus.MustNewConstMetric(descResponses, prometheus.CounterValue, n, name, rcode)
		}
		ch <- histogram(descSize, SizeBuckets, s.sizes, s.sizeSum, name)
		ch <- histogram(descLatency, LatencyBuckets, s.lat, s.latSum, name)
		ch <- prometheus.MustNewConstMetric(descMalformed, prometheus.CounterValue, s.malformed, name)
		if s.rate > 0 {
			ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, s.rate, name)
		}
		domains := make([]string, 0, len(s.top))
		for d := range s.top {
			domains = append(domains, d)
		}
		slices.SortFunc(domains, func(a, b string) int {
			if s.top[a] != s.top[b] {
				return int(s.top[b] - s.top[a])
			}
			return strings.Compare(a, b)
		})
		for _, d := range domains[:min(TopExported, len(domains))] {
			ch <- prometheus.MustNewConstMetric(descTop, prometheus.GaugeValue, float64(s.top[d]), name, d)
		}
	}
}

// histogram makes a histogram of counts per bucket (the last above every
// bound).
func histogram(desc *prometheus.Desc, bounds []float64, counts []uint64, sum float64, site string) prometheus.Metric {
	cum := map[float64]uint64{}
	var total uint64
	for i, b := range bounds {
		total += counts[i]
		cum[b] = total
	}
	total += counts[len(bounds)]
	return prometheus.MustNewConstHistogram(desc, total, sum, cum, site)
}

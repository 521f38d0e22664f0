// Package rssac computes the daily RSSAC002 metrics a root server
// operator publishes (RSSAC002 version 4): traffic-volume, traffic-sizes,
// rcode-volume and unique-sources, from DNS messages, and writes them as
// the RSSAC002 YAML documents.
//
// Counting rules, the same for every input: a message counts when its
// header could be read; the QR bit tells queries (received) from
// responses (sent); sizes are DNS message sizes without the TCP length
// prefix; rcodes include EDNS extended bits; unique sources are the
// distinct source addresses of queries, IPv6 also aggregated to /64.
package rssac

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"time"
)

// Version is the RSSAC002 version written.
const Version = "rssac002v4"

// The size histograms' bins are 16 bytes wide; the last bin of each is
// open-ended.
const (
	binWidth      = 16
	requestLimit  = 288  // "288-"
	responseLimit = 4096 // "4096-"
)

// Message is what the metrics need of one DNS message.
type Message struct {
	Time     time.Time
	Src      netip.Addr
	TCP      bool
	IPv6     bool
	Response bool
	Size     int
	Rcode    uint16
	// Weight is how many messages this one stands for: the sample rate
	// of a sampled capture (the agent's --sample 1/N); 0 is 1.
	Weight int64
}

// Day accumulates one day's metrics.
type Day struct {
	queries, responses [2][2]int64 // [tcp][ipv6]
	reqSizes           [2]map[int]int64
	respSizes          [2]map[int]int64
	rcodes             map[uint16]int64
	// Each source with the most any of its messages stood for: a
	// sampled capture keeps whole address pairs, so a source kept
	// stands for its rate's worth of sources.
	v4, v6  map[netip.Addr]int64
	v6agg   map[netip.Prefix]int64
	maxRate int64
}

// NewDay returns an empty day.
func NewDay() *Day {
	d := &Day{rcodes: map[uint16]int64{}, v4: map[netip.Addr]int64{}, v6: map[netip.Addr]int64{}, v6agg: map[netip.Prefix]int64{}, maxRate: 1}
	for i := range 2 {
		d.reqSizes[i], d.respSizes[i] = map[int]int64{}, map[int]int64{}
	}
	return d
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func bin(size, limit int) int {
	return min(size, limit) / binWidth * binWidth
}

// Add counts one message.
func (d *Day) Add(m Message) {
	t, v6 := b2i(m.TCP), b2i(m.IPv6)
	w := max(m.Weight, 1)
	d.maxRate = max(d.maxRate, w)
	if m.Response {
		d.responses[t][v6] += w
		d.respSizes[t][bin(m.Size, responseLimit)] += w
		d.rcodes[m.Rcode] += w
		return
	}
	d.queries[t][v6] += w
	d.reqSizes[t][bin(m.Size, requestLimit)] += w
	src := m.Src.Unmap()
	switch {
	case src.Is4():
		d.v4[src] = max(d.v4[src], w)
	case src.Is6():
		d.v6[src] = max(d.v6[src], w)
		p, _ := src.Prefix(64)
		d.v6agg[p] = max(d.v6agg[p], w)
	}
}

// Write renders the four metrics for service and the day starting at
// start (UTC midnight), one YAML document each, as RSSAC002 asks.
func (d *Day) Write(w io.Writer, service string, start time.Time) error {
	header := func(metric string) string {
		h := fmt.Sprintf("---\nversion: %s\nservice: %s\nstart-period: %s\nmetric: %s\n",
			Version, service, start.UTC().Format("2006-01-02T15:04:05Z"), metric)
		if d.maxRate > 1 {
			// RSSAC002 has no field for it; a comment keeps the document
			// valid and the reader told.
			h += fmt.Sprintf("# sampled: one address pair in up to %d kept; counts are scaled to totals (estimates)\n", d.maxRate)
		}
		return h
	}
	var out []byte
	out = fmt.Appendf(out, "%s", header("traffic-volume"))
	for _, kind := range []struct {
		name string
		n    *[2][2]int64
		verb string
	}{{"queries", &d.queries, "received"}, {"responses", &d.responses, "sent"}} {
		for t, tr := range []string{"udp", "tcp"} {
			for v, ipv := range []string{"ipv4", "ipv6"} {
				out = fmt.Appendf(out, "dns-%s-%s-%s-%s: %d\n", tr, kind.name, kind.verb, ipv, kind.n[t][v])
			}
		}
	}
	out = fmt.Appendf(out, "%s", header("traffic-sizes"))
	for t, tr := range []string{"udp", "tcp"} {
		out = appendSizes(out, tr+"-request-sizes", d.reqSizes[t], requestLimit)
		out = appendSizes(out, tr+"-response-sizes", d.respSizes[t], responseLimit)
	}
	out = fmt.Appendf(out, "%s", header("rcode-volume"))
	codes := make([]int, 0, len(d.rcodes))
	for c := range d.rcodes {
		codes = append(codes, int(c))
	}
	sort.Ints(codes)
	for _, c := range codes {
		out = fmt.Appendf(out, "%d: %d\n", c, d.rcodes[uint16(c)])
	}
	out = fmt.Appendf(out, "%s", header("unique-sources"))
	out = fmt.Appendf(out, "num-sources-ipv4: %d\nnum-sources-ipv6: %d\nnum-sources-ipv6-aggregate: %d\n", sum(d.v4), sum(d.v6), sum(d.v6agg))
	_, err := w.Write(out)
	return err
}

// sum is the sources of a set, each as many as it stands for.
func sum[K comparable](m map[K]int64) int64 {
	var n int64
	for _, w := range m {
		n += w
	}
	return n
}

// appendSizes writes a histogram's non-empty bins in order; RSSAC002
// leaves empty bins out.
func appendSizes(out []byte, name string, h map[int]int64, limit int) []byte {
	out = fmt.Appendf(out, "%s:\n", name)
	if len(h) == 0 {
		return append(out[:len(out)-1], " {}\n"...)
	}
	bins := make([]int, 0, len(h))
	for b := range h {
		bins = append(bins, b)
	}
	sort.Ints(bins)
	for _, b := range bins {
		if b >= limit {
			out = fmt.Appendf(out, "  %d-: %d\n", limit, h[b])
		} else {
			out = fmt.Appendf(out, "  %d-%d: %d\n", b, b+binWidth-1, h[b])
		}
	}
	return out
}

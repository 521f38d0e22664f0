package dnstop_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plumb-dev/plumb/dns/dnstop"
)

// msg is a DNS message as a records row holds it.
type msg struct {
	at       time.Time
	src      string
	response bool
	qname    string
	rcode    uint16
}

var minimalRecords = arrow.NewSchema([]arrow.Field{
	{Name: "time", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
	{Name: "src", Type: arrow.BinaryTypes.String},
	{Name: "qr", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "rcode", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "qname", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "registered_domain", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// records makes a batch of the columns dnstop reads of DNS records.
func records(msgs []msg) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, minimalRecords)
	defer b.Release()
	for _, m := range msgs {
		b.Field(0).(*array.TimestampBuilder).Append(arrow.Timestamp(m.at.UnixNano()))
		b.Field(1).(*array.StringBuilder).Append(m.src)
		b.Field(2).(*array.BooleanBuilder).Append(m.response)
		b.Field(3).(*array.Uint16Builder).Append(m.rcode)
		b.Field(4).(*array.StringBuilder).Append(m.qname)
		labels := strings.Split(m.qname, ".")
		b.Field(5).(*array.StringBuilder).Append(strings.Join(labels[max(0, len(labels)-2):], "."))
	}
	return b.NewRecordBatch()
}

// blockTally counts msgs as one block's run does and returns its tally.
func blockTally(t *testing.T, site string, msgs []msg, n, counters int) map[string]int64 {
	t.Helper()
	c := dnstop.NewCounter(dnstop.Dimensions, counters)
	rec := records(msgs)
	defer rec.Release()
	if err := c.Add(rec); err != nil {
		t.Fatal(err)
	}
	tally := map[string]int64{}
	dnstop.Tally(c, site, dnstop.WindowOf(msgs[0].at, time.Hour), n, func(k string, v int64) { tally[k] += v })
	if err := dnstop.CheckTally(tally); err != nil {
		t.Fatalf("a run's own tally is refused: %v", err)
	}
	return tally
}

// series reads the collector's series of one metric as "site dim value" → value.
func series(t *testing.T, c prometheus.Collector, metric string) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			key := strings.TrimSpace(l["site"] + " " + l["dimension"] + " " + l["value"])
			out[key] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestCollectorRanksCommittedBlocks: blocks' tallies added as their runs
// commit give each site's top values of the window, the same as ranking
// the blocks' rows at once; at most n series per site and dimension.
func TestCollectorRanksCommittedBlocks(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 5, 0, 0, time.UTC)
	var blocks [][]msg
	for b := range 4 {
		var msgs []msg
		for i := range 50 {
			// client 10.0.0.1 asks 1 time in 2, .2 1 in 5, the rest once.
			src := fmt.Sprintf("10.0.%d.%d", b, 100+i)
			switch {
			case i%2 == 0:
				src = "10.0.0.1"
			case i%5 == 1:
				src = "10.0.0.2"
			}
			msgs = append(msgs, msg{at: at.Add(time.Duration(b*50+i) * time.Second), src: src, qname: fmt.Sprintf("h%d.example.com", i%3)})
			msgs = append(msgs, msg{at: at.Add(time.Duration(b*50+i) * time.Second), src: "192.0.2.53", response: true, rcode: uint16(i % 4 / 3 * 3)})
		}
		blocks = append(blocks, msgs)
	}
	c := dnstop.NewCollector(nil)
	for _, msgs := range blocks {
		c.Add(blockTally(t, "lax", msgs, 2, 20))
	}
	got := series(t, c, "plumb_dns_top_queries")
	want := map[string]float64{
		"lax client 10.0.0.1": 100, "lax client 10.0.0.2": 20,
		"lax client_prefix 10.0.0.0/24": 140, "lax client_prefix 10.0.1.0/24": 20,
		"lax qname h0.example.com": 68, "lax qname h1.example.com": 68,
		"lax registered_domain example.com": 200,
		"lax rcode NOERROR":                 152, "lax rcode NXDOMAIN": 48,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("top series:\n got %v\nwant %v", got, want)
	}
	totals := series(t, c, "plumb_dns_top_total")
	if totals["lax client"] != 200 || totals["lax rcode"] != 200 {
		t.Errorf("totals %v, want 200 queries and 200 responses", totals)
	}
	if start := series(t, c, "plumb_dns_top_window_start_seconds")["lax"]; start != float64(at.Truncate(time.Hour).Unix()) {
		t.Errorf("window start %v, want %d", start, at.Truncate(time.Hour).Unix())
	}
}

// TestCollectorWindowsAndExpiry: a block of a newer window replaces the
// site's series; a late block of an older one adds nothing; a site that
// sends nothing for two windows' time has no series left; another site
// is ranked apart.
func TestCollectorWindowsAndExpiry(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	c := dnstop.NewCollector(func() time.Time { return now })
	ten := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	q := func(at time.Time, src string) []msg { return []msg{{at: at, src: src, qname: "a.example"}} }
	c.Add(blockTally(t, "lax", q(ten, "10.0.0.1"), 5, 10))
	c.Add(blockTally(t, "lax", q(ten.Add(time.Hour), "10.0.0.2"), 5, 10))
	c.Add(blockTally(t, "lax", q(ten.Add(time.Minute), "10.0.0.3"), 5, 10)) // late
	c.Add(blockTally(t, "ams", q(ten, "10.9.9.9"), 5, 10))
	got := series(t, c, "plumb_dns_top_queries")
	if got["lax client 10.0.0.2"] != 1 || got["lax client 10.0.0.1"] != 0 || got["lax client 10.0.0.3"] != 0 || got["ams client 10.9.9.9"] != 1 {
		t.Errorf("series after a newer window and a late block: %v", got)
	}
	now = now.Add(2*time.Hour + time.Second)
	if got := series(t, c, "plumb_dns_top_queries"); len(got) != 0 {
		t.Errorf("series two hours after the last block: %v", got)
	}
}

// TestCheckTallyRefuses: a worker's tally naming what no run counts is
// refused with the key named.
func TestCheckTallyRefuses(t *testing.T) {
	w := "1765101600+3600"
	for _, bad := range []map[string]int64{
		{"top.k|lax|client|" + w + "|a b": 1},      // a space in a label value
		{"top.k|lax|client|" + w: 1},               // no value
		{"top.w|lax|client|" + w + "|x": 1},        // a value where none goes
		{"top.z|lax|client|" + w: 1},               // no such figure
		{"top.k|la/x|client|" + w + "|x": 1},       // no such site name
		{"top.k|lax|src|" + w + "|x": 1},           // no such dimension
		{"top.k|lax|client|1765101600|x": 1},       // no window size
		{"top.k|lax|client|1765101600+0|x": 1},     // an empty window
		{"top.k|lax|client|" + w + "|x": -1},       // below 0
		{"top.n|lax|client|" + w: dnstop.MaxN + 1}, // more than a stage may export
		{"top.k|lax|client|" + w + "|" + strings.Repeat("a", 254): 1},
	} {
		if err := dnstop.CheckTally(bad); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// FuzzCheckTally: whatever a worker sends, a tally the check accepts is
// added without panicking, and the collector exports at most MaxN
// values per site and dimension.
func FuzzCheckTally(f *testing.F) {
	f.Add("top.k|lax|client|1765101600+3600|10.0.0.1", int64(3), "top.n|lax|client|1765101600+3600", int64(1))
	f.Add("top.b|lax|qname|0+60", int64(2), "top.e|lax|qname|0+60|a.", int64(9))
	f.Fuzz(func(t *testing.T, k1 string, v1 int64, k2 string, v2 int64) {
		tally := map[string]int64{k1: v1, k2: v2}
		if dnstop.CheckTally(tally) != nil {
			return
		}
		c := dnstop.NewCollector(nil)
		c.Add(tally)
		c.Add(tally)
		if n := testutil.CollectAndCount(c, "plumb_dns_top_queries"); n > 2 {
			t.Fatalf("%d series from a tally of two keys", n)
		}
	})
}

package dnsmetrics_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/dns/dnsmetrics"
	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
	"github.com/plumb-dev/plumb/synth"
)

// rows runs a DNS built-in on a generated capture and returns its
// Arrow batches.
func rows(t *testing.T, program string) []arrow.RecordBatch {
	t.Helper()
	var capture bytes.Buffer
	w, _ := pcap.NewWriter(&capture, layers.LinkTypeEthernet, 65535, false)
	if _, err := synth.Generate(context.Background(), w, synth.Config{Seed: 9, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	b, err := reg.New(program, nil)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := block.Parse("20261201-100000-00000001.lax.pcap")
	var out bytes.Buffer
	if err := b.Run(context.Background(), stage.Input{Block: name}, &capture, &out); err != nil {
		t.Fatal(err)
	}
	f, err := ipc.NewFileReader(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var recs []arrow.RecordBatch
	for i := 0; i < f.NumRecords(); i++ {
		rec, err := f.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		rec.Retain()
		recs = append(recs, rec)
	}
	return recs
}

// col reads a column of every batch as text ("" for null).
func col(recs []arrow.RecordBatch, name string) []string {
	var out []string
	for _, rec := range recs {
		c := rec.Column(rec.Schema().FieldIndices(name)[0])
		for i := 0; i < c.Len(); i++ {
			if c.IsNull(i) {
				out = append(out, "")
			} else {
				out = append(out, c.ValueStr(i))
			}
		}
	}
	return out
}

// TestCountsEqualTheRows: what a block of records or transactions
// tallies, summed by a Collector and scraped, equals the rows counted
// one by one: queries by transport and type, responses by rcode, the
// response sizes' count and sum, latencies (transactions), malformed
// messages and the most asked domains.
func TestCountsEqualTheRows(t *testing.T) {
	for _, program := range []string{"dns", "dnspairs"} {
		t.Run(program, func(t *testing.T) {
			recs := rows(t, program)
			tally := map[string]int64{}
			if err := dnsmetrics.Count("lax", recs, func(k string, n int64) { tally[k] += n }); err != nil {
				t.Fatal(err)
			}
			if err := dnsmetrics.Check(tally); err != nil {
				t.Fatalf("Check refuses what Count made: %v", err)
			}
			c := dnsmetrics.NewCollector()
			c.Add(tally)
			c.Add(tally) // a second committed block, the same
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(c)

			qtype, transport, rcode := col(recs, "qtype"), col(recs, "transport"), col(recs, "rcode")
			var isQuery, isResponse []bool
			var sizes []string
			if program == "dns" {
				for _, qr := range col(recs, "qr") {
					isQuery, isResponse = append(isQuery, qr == "false"), append(isResponse, qr == "true")
				}
				sizes = col(recs, "size")
			} else {
				for i, o := range col(recs, "orphan_response") {
					isQuery, isResponse = append(isQuery, o == "false"), append(isResponse, col(recs, "response_time")[i] != "")
				}
				sizes = col(recs, "response_size")
			}
			queries, responses := map[string]float64{}, map[string]float64{}
			var sized, sizeSum float64
			for i := range qtype {
				if isQuery[i] {
					qt := "other"
					if qtype[i] != "" {
						var n uint16
						fmt.Sscan(qtype[i], &n)
						if s := dnsmsg.TypeString(n); strings.Contains(" "+strings.Join(dnsmetrics.QTypes, " ")+" ", " "+s+" ") {
							qt = s
						}
					}
					queries[transport[i]+" "+qt] += 2
				}
				if isResponse[i] {
					var r, n int
					fmt.Sscan(rcode[i], &r)
					responses[dnsmetrics.Rcodes[r]] += 2
					if sizes[i] != "" {
						fmt.Sscan(sizes[i], &n)
						sized += 2
						sizeSum += 2 * float64(n)
					}
				}
			}
			if len(queries) < 3 || len(responses) < 2 {
				t.Fatalf("the capture has too little variety: %v %v", queries, responses)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range queries {
				tr, qt, _ := strings.Cut(k, " ")
				if got := value(mfs, "plumb_dns_queries_total", "site", "lax", "transport", tr, "qtype", qt); got != want {
					t.Errorf("queries %s: %v, want %v", k, got, want)
				}
			}
			for rc, want := range responses {
				if got := value(mfs, "plumb_dns_responses_total", "site", "lax", "rcode", rc); got != want {
					t.Errorf("responses %s: %v, want %v", rc, got, want)
				}
			}
			series := 0
			for _, mf := range mfs {
				series += len(mf.GetMetric())
				for _, m := range mf.GetMetric() {
					if h := m.GetHistogram(); h != nil && mf.GetName() == "plumb_dns_response_size_bytes" {
						if float64(h.GetSampleCount()) != sized || h.GetSampleSum() != sizeSum {
							t.Errorf("response sizes: %d, sum %v; want %v, %v", h.GetSampleCount(), h.GetSampleSum(), sized, sizeSum)
						}
					}
					if h := m.GetHistogram(); h != nil && mf.GetName() == "plumb_dns_latency_seconds" && program == "dnspairs" {
						if h.GetSampleCount() == 0 || h.GetSampleSum() <= 0 {
							t.Errorf("no latencies: %v", h)
						}
					}
				}
			}
			if got := testutil.CollectAndCount(c, "plumb_dns_top_domain_queries"); got == 0 || got > dnsmetrics.TopExported {
				t.Errorf("%d top domains exported", got)
			}
			t.Logf("%d series for one site", series)
		})
	}
}

// value is the value of the counter or gauge name whose labels include
// every pair of labels ("site", "lax", ...); -1 when there is none.
func value(mfs []*dto.MetricFamily, name string, labels ...string) float64 {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestCheckRefusesWhatCountDoesNot: a tally from a worker with a key no
// block makes (an unknown kind, site, type, rcode or bucket, a domain
// with the separator) or a count out of range is refused, naming it.
func TestCheckRefusesWhatCountDoesNot(t *testing.T) {
	for _, k := range []string{"x|lax", "q|lax|udp", "q|lax|udp|BOGUS", "q|lax|sctp|A", "q|la x|udp|A", "r|lax|WEIRD",
		"s|lax|10", "s|lax|-1", "l|lax|14", "t|lax|", "t|lax|a b", "m|lax|extra", strings.Repeat("m", 70) + "|lax"} {
		if err := dnsmetrics.Check(map[string]int64{k: 1}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", k)) {
			t.Errorf("%q: %v", k, err)
		}
	}
	if err := dnsmetrics.Check(map[string]int64{"m|lax": -1}); err == nil {
		t.Error("a negative count was taken")
	}
	if err := dnsmetrics.Check(map[string]int64{"q|lax|tcp|other": 1, "s|lax|9": 2, "l|lax|13": 3, "t|lax|example.com": 4, "r|lax|BADVERS": 1}); err != nil {
		t.Errorf("a tally Count makes: %v", err)
	}
}

// TestSeriesAreBounded: sites past MaxSites are counted together, and a
// site's domain table exports its most asked domains only, counts exact
// while the table has room.
func TestSeriesAreBounded(t *testing.T) {
	c := dnsmetrics.NewCollector()
	for i := range dnsmetrics.MaxSites + 50 {
		c.Add(map[string]int64{fmt.Sprintf("m|site%d", i): 1})
	}
	for i := range 500 {
		c.Add(map[string]int64{fmt.Sprintf("t|site0|d%03d.example", i): int64(i%7 + 1), "t|site0|big.example": 100})
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.CollectAndCount(c, "plumb_dns_malformed_total"); got != dnsmetrics.MaxSites+1 {
		t.Errorf("%d malformed series for %d sites", got, dnsmetrics.MaxSites+50)
	}
	if got := value(mfs, "plumb_dns_malformed_total", "site", dnsmetrics.OtherSite); got != 50 {
		t.Errorf("the sites past the bound: %v", got)
	}
	if got := testutil.CollectAndCount(c, "plumb_dns_top_domain_queries"); got != dnsmetrics.TopExported {
		t.Errorf("%d top domains", got)
	}
	if got := value(mfs, "plumb_dns_top_domain_queries", "site", "site0", "domain", "big.example"); got != 50000 {
		t.Errorf("the most asked domain: %v queries, want 50000", got)
	}
}

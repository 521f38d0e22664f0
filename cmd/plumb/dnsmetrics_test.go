package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/dns/dnsmetrics"
	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestDNSMetricsEqualTheRecords: through a real server, a job counts a
// site's DNS records into the server's metrics; what /metrics says of
// queries by type, responses by rcode and response sizes equals the
// records of the same blocks read back, and a block counted is counted
// once: run by the server, and by a remote worker whose commits carry
// the counts.
func TestDNSMetricsEqualTheRecords(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(map[bool]string{false: "server", true: "worker"}[remote], func(t *testing.T) { dnsMetricsEqualTheRecords(t, remote) })
	}
}

func dnsMetricsEqualTheRecords(t *testing.T, remote bool) {
	data := t.TempDir()
	maddr := testenv.FreeAddr(t)
	args := []string{"--metrics", maddr}
	if remote {
		args = append(args, "--remote-only")
	}
	addr := servePlumb(t, data, args...)
	if remote {
		startPlumb(t, "worker", "--server", addr, "--slots", "2", "--scratch", t.TempDir())
	}
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	job := `job: counts
queues: [pcap.sz]
stages:
  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: 1d}
  - {name: counts, inputs: [dns.arrow], program: builtin:dnsmetrics}
  - {name: top, inputs: [dns.arrow], program: "builtin:dnstop?dimensions=registered_domain,rcode&n=5", outputs: [top.arrow], retention: 1d}
`
	if res, err := c.SubmitJob(ctx, "counts.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= 3; seq++ {
		if _, err := c.Put(ctx, captureBlock(t, "lax", seq, at.Add(time.Duration(seq)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		runs := map[string]int64{}
		stats, _ := c.Stats(ctx)
		for _, s := range stats {
			runs[s.Stage] = s.Runs
		}
		if runs["counts/counts"] == 3 && runs["counts/top"] == 3 {
			break
		}
		if time.Now().After(deadline) {
			faulty, _ := c.Faulty(ctx, "")
			t.Fatalf("the counting stages ran %v times in 60 s; faulty %+v", runs, faulty)
		}
	}
	tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"qr", "transport", "qtype", "rcode", "size", "registered_domain"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	qr, transport, qtype := testenv.ColumnStrings(t, tbl, "qr"), testenv.ColumnStrings(t, tbl, "transport"), testenv.ColumnStrings(t, tbl, "qtype")
	rcode, size, domain := testenv.ColumnStrings(t, tbl, "rcode"), testenv.ColumnStrings(t, tbl, "size"), testenv.ColumnStrings(t, tbl, "registered_domain")
	queries, responses := map[[2]string]float64{}, map[string]float64{}
	domains := map[string]float64{}
	var sized, sizeSum float64
	for i := range qr {
		if qr[i] == "false" {
			n, _ := strconv.Atoi(qtype[i])
			queries[[2]string{transport[i], dnsmsg.TypeString(uint16(n))}]++
			if domain[i] != "" {
				domains[domain[i]]++
			}
			continue
		}
		r, _ := strconv.Atoi(rcode[i])
		responses[dnsmetrics.Rcodes[r]]++
		n, _ := strconv.Atoi(size[i])
		sized++
		sizeSum += float64(n)
	}
	fams := scrapeFamilies(t, maddr)
	got := map[[2]string]float64{}
	for _, m := range fams["plumb_dns_queries_total"].GetMetric() {
		l := labels(m)
		if l["site"] != "lax" {
			t.Errorf("a series of site %q", l["site"])
		}
		got[[2]string{l["transport"], l["qtype"]}] = m.GetCounter().GetValue()
	}
	if len(queries) < 3 || len(got) != len(queries) {
		t.Fatalf("query series %v, want %v", got, queries)
	}
	for k, want := range queries {
		if got[k] != want {
			t.Errorf("queries %v: %v in /metrics, %v in the records", k, got[k], want)
		}
	}
	for _, m := range fams["plumb_dns_responses_total"].GetMetric() {
		if rc := labels(m)["rcode"]; m.GetCounter().GetValue() != responses[rc] {
			t.Errorf("responses %s: %v in /metrics, %v in the records", rc, m.GetCounter().GetValue(), responses[rc])
		}
	}
	h := fams["plumb_dns_response_size_bytes"].GetMetric()[0].GetHistogram()
	if float64(h.GetSampleCount()) != sized || h.GetSampleSum() != sizeSum {
		t.Errorf("response sizes: %d, sum %v in /metrics; %v, %v in the records", h.GetSampleCount(), h.GetSampleSum(), sized, sizeSum)
	}
	// builtin:dnstop: the rcodes (few) are the records' exactly; each
	// registered domain's count holds its true count within the bound,
	// and none was seen more than the first one listed (the generated
	// names are all rare, so their order is within the bound).
	bound := map[string]float64{}
	for _, m := range fams["plumb_dns_top_bound"].GetMetric() {
		bound[labels(m)["dimension"]] = m.GetGauge().GetValue()
	}
	tops := map[string]int{}
	var first string
	var firstCount float64
	for _, m := range fams["plumb_dns_top_queries"].GetMetric() {
		l, v := labels(m), m.GetGauge().GetValue()
		tops[l["dimension"]]++
		switch l["dimension"] {
		case "rcode":
			if v != responses[l["value"]] {
				t.Errorf("top rcode %s: %v in /metrics, %v in the records", l["value"], v, responses[l["value"]])
			}
		case "registered_domain":
			if tv := domains[l["value"]]; v < tv || v-bound["registered_domain"] > tv {
				t.Errorf("top domain %s: %v in /metrics (bound %v), %v in the records", l["value"], v, bound["registered_domain"], tv)
			}
			if v > firstCount {
				first, firstCount = l["value"], v
			}
		default:
			t.Errorf("a top series of dimension %q, not asked for", l["dimension"])
		}
	}
	var want string
	for d, n := range domains {
		if n > domains[want] || (n == domains[want] && d < want) {
			want = d
		}
	}
	if tops["registered_domain"] != min(5, len(domains)) || tops["rcode"] != min(5, len(responses)) || domains[want] > firstCount {
		t.Errorf("top series %v, the first domain %s (%v); want %d domains, %d rcodes, the most seen %s (%v)", tops, first, firstCount,
			min(5, len(domains)), min(5, len(responses)), want, domains[want])
	}
}

// labels are a series' labels by name.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

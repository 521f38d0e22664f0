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
		runs := int64(0)
		stats, _ := c.Stats(ctx)
		for _, s := range stats {
			if s.Stage == "counts/counts" {
				runs = s.Runs
			}
		}
		if runs == 3 {
			break
		}
		if time.Now().After(deadline) {
			faulty, _ := c.Faulty(ctx, "")
			t.Fatalf("the counting stage ran %d times in 60 s; faulty %+v", runs, faulty)
		}
	}
	tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"qr", "transport", "qtype", "rcode", "size"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	qr, transport, qtype := testenv.ColumnStrings(t, tbl, "qr"), testenv.ColumnStrings(t, tbl, "transport"), testenv.ColumnStrings(t, tbl, "qtype")
	rcode, size := testenv.ColumnStrings(t, tbl, "rcode"), testenv.ColumnStrings(t, tbl, "size")
	queries, responses := map[[2]string]float64{}, map[string]float64{}
	var sized, sizeSum float64
	for i := range qr {
		if qr[i] == "false" {
			n, _ := strconv.Atoi(qtype[i])
			queries[[2]string{transport[i], dnsmsg.TypeString(uint16(n))}]++
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
}

// labels are a series' labels by name.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

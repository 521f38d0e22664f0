package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// TestImportSampled: `plumb import --sample 1/4` ships a quarter of a
// capture's address pairs, whole: every response kept has its query,
// and back. Its blocks say the rate in their names, the DNS records made
// of them carry it in every row, and the server's DNS metrics are the
// records' counts scaled by it, with the rate exported beside them.
func TestImportSampled(t *testing.T) {
	data := t.TempDir()
	maddr := testenv.FreeAddr(t)
	addr := servePlumb(t, data, "--metrics", maddr)
	c := dialPlumb(t, addr)
	ctx := context.Background()
	job := `job: sampled
queues: [pcap.sz]
stages:
  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: 1d}
  - {name: counts, inputs: [dns.arrow], program: builtin:dnsmetrics}
`
	if res, err := c.SubmitJob(ctx, "sampled.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	input := filepath.Join(t.TempDir(), "in.pcap")
	var raw bytes.Buffer
	w, _ := pcap.NewWriter(&raw, layers.LinkTypeEthernet, 65535, false)
	if _, err := synth.Generate(ctx, w, synth.Config{Seed: 3, Start: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC), MaxBytes: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if err := os.WriteFile(input, raw.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := plumbExec(t, "import", "--server", addr, "--site", "lax", "--new-instance", "--spool", t.TempDir(),
		"--block-size", "512KiB", "--sample", "1/4", input)
	if code != 0 || !strings.Contains(out, "packets not kept by --sample 1/4") {
		t.Fatalf("import exited %d:\n%s%s", code, out, errOut)
	}
	blocks, err := c.Blocks(ctx, "pcap.sz")
	if err != nil || len(blocks) < 2 {
		t.Fatalf("%d blocks: %v", len(blocks), err)
	}
	for _, b := range blocks {
		if n, err := block.Parse(b.Name); err != nil || n.SampleRate() != 4 {
			t.Errorf("block %s: rate %d (%v)", b.Name, n.SampleRate(), err)
		}
	}
	testenv.Eventually(t, time.Minute, "every block counted", func() (string, bool) {
		stats, _ := c.Stats(ctx)
		for _, s := range stats {
			if s.Stage == "sampled/counts" && s.Runs == int64(len(blocks)) {
				return "", true
			}
		}
		return "runs short", false
	})
	tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"src", "dst", "qr", "sample_rate"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	src, dst, qr, rate := testenv.ColumnStrings(t, tbl, "src"), testenv.ColumnStrings(t, tbl, "dst"), testenv.ColumnStrings(t, tbl, "qr"), testenv.ColumnStrings(t, tbl, "sample_rate")
	queries := 0.0
	asked, answered := map[string]bool{}, map[string]bool{}
	for i := range qr {
		if rate[i] != "4" {
			t.Fatalf("row %d: sample_rate %s", i, rate[i])
		}
		if qr[i] == "false" {
			queries++
			asked[src[i]+" "+dst[i]] = true
		} else {
			answered[dst[i]+" "+src[i]] = true
		}
	}
	for pair := range answered {
		if !asked[pair] {
			t.Errorf("a response to %s kept without its queries", pair)
		}
	}
	for pair := range asked {
		if !answered[pair] {
			t.Errorf("queries of %s kept without any response", pair)
		}
	}
	fams := scrapeFamilies(t, maddr)
	var counted float64
	for _, m := range fams["plumb_dns_queries_total"].GetMetric() {
		counted += m.GetCounter().GetValue()
	}
	if queries == 0 || counted != 4*queries {
		t.Errorf("plumb_dns_queries_total sums to %v; the records hold %v queries at 1/4", counted, queries)
	}
	if r := fams["plumb_dns_sample_rate"].GetMetric(); len(r) != 1 || r[0].GetGauge().GetValue() != 4 {
		t.Errorf("plumb_dns_sample_rate: %v", r)
	}
}

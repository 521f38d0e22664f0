package builtin

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/dns/dnstop"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/synth"
)

// TestSampledBlocksScaleToTotals: a block the agent cut with --sample
// 1/5 says so in its name; the DNS records and transactions made of it
// carry sample_rate 5 in every row; builtin:dnsmetrics, builtin:dnstop
// and builtin:rssac count each row as five, so their totals are five
// times those of the same rows unsampled, and RSSAC002's documents say
// they are scaled.
func TestSampledBlocksScaleToTotals(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	w, _ := pcap.NewWriter(&buf, layers.LinkTypeEthernet, 65535, false)
	if _, err := synth.Generate(context.Background(), w, synth.Config{Seed: 5, Start: at, MaxBytes: 1 << 18}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	capture := buf.Bytes()
	plain := block.Name{Time: at, Seq: 1, Instance: "lax", Queue: "pcap"}
	sampled := plain
	sampled.Info = block.SampleInfo(5)
	if sampled.SampleRate() != 5 {
		t.Fatalf("%s: rate %d", sampled, sampled.SampleRate())
	}
	runOn := func(name block.Name, program string, in []byte) ([]byte, map[string]int64) {
		t.Helper()
		b, err := registry().New(program, nil)
		if err != nil {
			t.Fatal(err)
		}
		sin := stage.Input{Block: name, Tally: &stage.Tally{}}
		if _, ok := b.(stage.Sequential); ok {
			sin.Carry = &stage.Carry{}
		}
		var out bytes.Buffer
		if err := b.Run(context.Background(), sin, bytes.NewReader(in), &out); err != nil {
			t.Fatalf("%s on %s: %v", program, name, err)
		}
		return out.Bytes(), sin.Tally.Counts()
	}
	for _, program := range []string{"dns", "dnspairs"} {
		rows, _ := runOn(sampled, program, capture)
		tbl := table(t, rows)
		rates := testenv.ColumnStrings(t, tbl, "sample_rate")
		for i, r := range rates {
			if r != "5" {
				t.Fatalf("%s row %d: sample_rate %s", program, i, r)
			}
		}
		plainRows, _ := runOn(plain, program, capture)
		if got := testenv.ColumnStrings(t, table(t, plainRows), "sample_rate"); got[0] != "1" || len(got) != len(rates) {
			t.Fatalf("%s unsampled: %d rows, rate %s; sampled %d rows", program, len(got), got[0], len(rates))
		}
		// dnsmetrics: every count five times the unsampled one.
		_, tp := runOn(plain, "dnsmetrics", plainRows)
		_, ts := runOn(sampled, "dnsmetrics", rows)
		for k, n := range tp {
			if strings.HasPrefix(k, "t|") || strings.HasPrefix(k, "sr|") {
				continue
			}
			if ts[k] != 5*n {
				t.Errorf("%s dnsmetrics %s: %d sampled, %d unsampled", program, k, ts[k], n)
			}
		}
		if ts["sr|lax"] != 5 || tp["sr|lax"] != 1 {
			t.Errorf("%s dnsmetrics sample rate: %d sampled, %d unsampled", program, ts["sr|lax"], tp["sr|lax"])
		}
		// dnstop: totals five times.
		top, _ := runOn(sampled, "dnstop", rows)
		topPlain, _ := runOn(plain, "dnstop", plainRows)
		total := func(out []byte) map[string]int64 {
			m := map[string]int64{}
			for _, r := range topRows(t, out) {
				m[r.dim] = r.total
			}
			return m
		}
		tt, tpl := total(top), total(topPlain)
		for _, d := range []string{dnstop.DimClient, dnstop.DimRcode} {
			if tt[d] != 5*tpl[d] || tpl[d] == 0 {
				t.Errorf("%s dnstop %s total: %d sampled, %d unsampled", program, d, tt[d], tpl[d])
			}
		}
	}
	// RSSAC002 from the capture itself and from its records.
	rs, err := registry().New("rssac", map[string][]string{"service": {"x.example"}})
	if err != nil {
		t.Fatal(err)
	}
	doc := func(name block.Name, in []byte) string {
		var out bytes.Buffer
		if err := rs.Run(context.Background(), stage.Input{Block: name}, bytes.NewReader(in), &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	records, _ := runOn(sampled, "dns", capture)
	for what, got := range map[string]string{"capture": doc(sampled, capture), "records": doc(sampled, records)} {
		want := doc(plain, capture)
		if !strings.Contains(got, "# sampled: one address pair in up to 5 kept") {
			t.Errorf("%s: RSSAC002 does not say it is scaled:\n%s", what, got)
		}
		if a, b := field(got, "dns-udp-queries-received-ipv4"), field(want, "dns-udp-queries-received-ipv4"); a != 5*b || b == 0 {
			t.Errorf("%s: %d udp ipv4 queries sampled, %d unsampled", what, a, b)
		}
		if a, b := field(got, "num-sources-ipv4"), field(want, "num-sources-ipv4"); a != 5*b || b == 0 {
			t.Errorf("%s: %d ipv4 sources sampled, %d unsampled", what, a, b)
		}
	}
}

// field reads a number of a YAML document by its key.
func field(doc, key string) int64 {
	for _, line := range strings.Split(doc, "\n") {
		if v, ok := strings.CutPrefix(line, key+": "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

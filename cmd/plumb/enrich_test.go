package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/proc"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestEnrichedThroughServer: a job enriches a site's DNS records with
// the server's databases (DATA/geoip); an operator renames a new version
// over a database between two blocks and the second block's rows carry
// it, named in enriched_by, with no restart; a job naming a database the
// server lacks is refused, the reason naming it but not the server's
// paths.
func TestEnrichedThroughServer(t *testing.T) {
	data := t.TempDir()
	geo := filepath.Join(data, "geoip")
	write := func(built time.Time, country string) {
		testenv.WriteGeoDB(t, filepath.Join(geo, "City.mmdb"), "GeoLite2-City", built, []testenv.GeoNet{
			{CIDR: "10.0.0.0/8", Country: country}, {CIDR: "198.41.0.0/24", Country: "US"}})
	}
	if err := os.MkdirAll(geo, 0o755); err != nil {
		t.Fatal(err)
	}
	v1, v2 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	write(v1, "SE")
	addr := servePlumb(t, data)
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.SubmitJob(ctx, "bad.yaml", []byte("job: bad\nstages:\n  - {name: geo, inputs: [dns.arrow], program: \"builtin:enrich?db=GeoIP2-Enterprise.mmdb\", outputs: [dns.geo.arrow]}\n"))
	if err != nil || res.State != "rejected" || !strings.Contains(res.Reason, "database GeoIP2-Enterprise.mmdb: no such database") || strings.Contains(res.Reason, data) {
		t.Fatalf("a job naming a missing database: %+v %v", res, err)
	}
	job := `job: geo
queues: [pcap.sz]
stages:
  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow]}
  - {name: geo, inputs: [dns.arrow], program: "builtin:enrich?db=City.mmdb", outputs: [dns.geo.arrow]}
`
	if res, err := c.SubmitJob(ctx, "geo.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if bs, _ := c.Blocks(ctx, "dns.geo.arrow"); len(bs) == n {
				return
			}
			if time.Now().After(deadline) {
				faulty, _ := c.Faulty(ctx, "")
				t.Fatalf("no enriched block %d after 60 s; faulty: %+v", n, faulty)
			}
		}
	}
	if _, err := c.Put(ctx, captureBlock(t, "lax", 1, at)); err != nil {
		t.Fatal(err)
	}
	waitFor(1)
	write(v2, "NO")
	if _, err := c.Put(ctx, captureBlock(t, "lax", 2, at.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	waitFor(2)
	tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.geo.arrow", Columns: []string{"seq", "src", "src_country", "dst_country", "enriched_by"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	want := map[string][2]string{"1": {"SE", "GeoLite2-City 2026-11-28T00:00:00Z; resolvers 2026-12-03"}, "2": {"NO", "GeoLite2-City 2026-12-02T00:00:00Z; resolvers 2026-12-03"}}
	rows := map[string]int{}
	var cols [][]string
	for _, name := range []string{"seq", "src", "src_country", "dst_country", "enriched_by"} {
		cols = append(cols, testenv.ColumnStrings(t, tbl, name))
	}
	for i := range cols[0] {
		seq, src, country, dstCountry, by := cols[0][i], cols[1][i], cols[2][i], cols[3][i], cols[4][i]
		w := want[seq]
		rows[seq]++
		if by != w[1] || (strings.HasPrefix(src, "10.") && (country != w[0] || dstCountry != "US")) {
			t.Fatalf("block %s, row %d: %s in %q (server in %q), enriched by %q; want %v", seq, i, src, country, dstCountry, by, w)
		}
	}
	if rows["1"] == 0 || rows["2"] == 0 {
		t.Fatalf("rows per block: %v", rows)
	}
}

// TestHostileGeoDatabase is issue 61's database: a MaxMind-format file
// whose strings run to megabytes, just under the decoder's 2 MiB bound on
// a record's strings (an organisation of 1.9 MiB, a "country" of 64 KiB,
// a type of 64 KiB), passes every check a database gets, and
// enriching a block of a few hundred rows took the server from 0.78 to
// 2.98 GB. Now each string a row gains is capped, the server stays
// within 256 MiB of its resting memory, and the rows say what they can.
func TestHostileGeoDatabase(t *testing.T) {
	data := t.TempDir()
	geo := filepath.Join(data, "geoip")
	if err := os.MkdirAll(geo, 0o755); err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("Hostile Networks Ltd ", (1<<21-(100<<10))/21)
	testenv.WriteGeoDB(t, filepath.Join(geo, "Evil.mmdb"), "GeoIP2-"+strings.Repeat("X", 64<<10), time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), []testenv.GeoNet{
		{CIDR: "0.0.0.0/1", Country: strings.Repeat("Q", 64<<10), ASN: 64496, Org: huge},
		{CIDR: "128.0.0.0/1", Country: strings.Repeat("R", 64<<10), ASN: 64497, Org: huge + "2"},
		{CIDR: "::/1", ASN: 64498, Org: huge + "3"},
	})
	addr := testenv.FreeAddr(t)
	p := startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn", "--slots", "2")
	waitListening(t, addr)
	c := dialPlumb(t, addr)
	ctx := context.Background()
	job := "job: geo\nqueues: [pcap.sz]\nstages:\n  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow]}\n" +
		"  - {name: geo, inputs: [dns.arrow], program: \"builtin:enrich?db=Evil.mmdb\", outputs: [dns.geo.arrow], retention: forever}\n"
	if res, err := c.SubmitJob(ctx, "geo.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	time.Sleep(500 * time.Millisecond)
	base, err := proc.Status(p.cmd.Process.Pid, "VmRSS:")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, captureBlock(t, "lax", 1, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the enriched block", func() bool {
		bs, _ := c.Blocks(ctx, "dns.geo.arrow")
		return len(bs) == 1
	})
	peak, err := proc.Status(p.cmd.Process.Pid, "VmHWM:")
	if err != nil {
		t.Fatalf("the server is gone: %v\n%s", err, p.log)
	}
	tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.geo.arrow", Columns: []string{"src_as_org", "src_country", "src_asn", "enriched_by"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	t.Logf("%d rows enriched; server RSS %d MiB at rest, peak %d MiB", tbl.NumRows(), base>>20, peak>>20)
	if tbl.NumRows() < 400 {
		t.Fatalf("%d rows; the test wants a block of at least 400", tbl.NumRows())
	}
	if peak-base > 256<<20 {
		t.Errorf("the server's memory rose from %d MiB to %d MiB enriching %d rows, more than 256 MiB", base>>20, peak>>20, tbl.NumRows())
	}
	for _, org := range testenv.ColumnStrings(t, tbl, "src_as_org") {
		if len(org) > 256 || !strings.HasPrefix(org, "Hostile Networks Ltd") {
			t.Fatalf("an organisation of %d bytes (%.40q); want the name cut at 256", len(org), org)
		}
	}
	for _, cc := range testenv.ColumnStrings(t, tbl, "src_country") {
		if cc != "" {
			t.Fatalf("a country of %d bytes; a country that is not a two-letter code is unknown", len(cc))
		}
	}
	for _, by := range testenv.ColumnStrings(t, tbl, "enriched_by") {
		if len(by) > 200 {
			t.Fatalf("enriched_by of %d bytes", len(by))
		}
	}
}

package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/dns/dnstop"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/stage"
)

// exactRanks counts, from tables of DNS records or transactions read
// back, what dnstop ranks, by dimension and value: each query's
// requester, its /24 or /48, AS and country, name and registered domain;
// each response's rcode.
func exactRanks(t *testing.T, tbls []arrow.Table) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	add := func(dim, v string) {
		if v == "" {
			return
		}
		if out[dim] == nil {
			out[dim] = map[string]int64{}
		}
		out[dim][v]++
	}
	for _, tbl := range tbls {
		col := func(name string) []string {
			if !tbl.Schema().HasField(name) {
				return make([]string, tbl.NumRows())
			}
			return testenv.ColumnStrings(t, tbl, name)
		}
		qr, src, qname, reg, rcode := col("qr"), col("src"), col("qname"), col("registered_domain"), col("rcode")
		asn, country := col("src_asn"), col("src_country")
		var answered []string
		if !tbl.Schema().HasField("qr") {
			// Transactions: a query unless an orphan response; answered
			// when it has a response time; the requester is the client.
			qr, answered = col("orphan_response"), col("response_time")
			src, asn, country = col("client"), col("client_asn"), col("client_country")
		}
		for i := range qr {
			if answered != nil && answered[i] != "" && rcode[i] != "" {
				r, _ := strconv.Atoi(rcode[i])
				add(dnstop.DimRcode, dnstop.RcodeName(uint16(r)))
			}
			if qr[i] == "true" {
				if answered == nil {
					r, _ := strconv.Atoi(rcode[i])
					add(dnstop.DimRcode, dnstop.RcodeName(uint16(r)))
				}
				continue
			}
			add(dnstop.DimClient, src[i])
			add(dnstop.DimClientPrefix, dnstop.Prefix(src[i]))
			if asn[i] != "" {
				add(dnstop.DimASN, "AS"+asn[i])
			}
			add(dnstop.DimCountry, country[i])
			add(dnstop.DimQname, qname[i])
			add(dnstop.DimRegisteredDomain, reg[i])
		}
	}
	return out
}

// topRow is a dnstop row.
type topRow struct {
	instance, dim, value     string
	rank                     int
	count, err, total, bound int64
}

func topRows(t *testing.T, out []byte) []topRow {
	t.Helper()
	tbl := table(t, out)
	defer tbl.Release()
	if !tbl.Schema().Equal(dnstop.Schema) {
		t.Fatalf("schema %v", tbl.Schema())
	}
	inst, dim, value := testenv.ColumnStrings(t, tbl, "instance"), testenv.ColumnStrings(t, tbl, "dimension"), testenv.ColumnStrings(t, tbl, "value")
	num := func(name string) []int64 {
		var out []int64
		for _, s := range testenv.ColumnStrings(t, tbl, name) {
			n, _ := strconv.ParseInt(s, 10, 64)
			out = append(out, n)
		}
		return out
	}
	rank, count, errs, total, bound := num("rank"), num("count"), num("error"), num("total"), num("bound")
	rows := make([]topRow, len(inst))
	for i := range rows {
		rows[i] = topRow{inst[i], dim[i], value[i], int(rank[i]), count[i], errs[i], total[i], bound[i]}
	}
	return rows
}

// wantTop is the exact top n of counts, most first, ties by value.
func wantTop(counts map[string]int64, n int) []string {
	vs := make([]string, 0, len(counts))
	for v := range counts {
		vs = append(vs, v)
	}
	slices.SortFunc(vs, func(a, b string) int {
		if counts[a] != counts[b] {
			return int(counts[b] - counts[a])
		}
		return strings.Compare(a, b)
	})
	out := make([]string, 0, n)
	for _, v := range vs[:min(n, len(vs))] {
		out = append(out, fmt.Sprintf("%s=%d", v, counts[v]))
	}
	return out
}

// realRecords runs builtin:dns on each real capture of testdata as a
// block of site lax and returns the records' blocks.
func realRecords(t *testing.T) [][]byte { return realRecordsAt(t, time.Time{}) }

// retime rewrites a capture's packet times to start, a millisecond
// apart, keeping their order.
func retime(t *testing.T, data []byte, start time.Time) []byte {
	t.Helper()
	r, closer, err := pcap.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var out bytes.Buffer
	w, err := pcap.NewWriter(&out, r.LinkType, r.Snaplen, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		frame, ci, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ci.Timestamp = start.Add(time.Duration(i) * time.Millisecond)
		if err := w.WritePacket(ci, frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// realRecordsAt is realRecords with each capture's packets moved to a
// minute of its own from start, in the order of the files, when start
// is not zero (the captures span 2008 to 2026).
func realRecordsAt(t *testing.T, start time.Time) [][]byte {
	t.Helper()
	files, _ := filepath.Glob("../../testdata/pcaps/*.pcap")
	if len(files) < 20 {
		t.Fatalf("%d captures in testdata/pcaps", len(files))
	}
	dns, err := registry().New("dns", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !start.IsZero() {
			data = retime(t, data, start.Add(time.Duration(i)*time.Minute))
		}
		name := block.Name{Instance: "lax", Seq: uint64(i + 1), Queue: "pcap", Time: time.Date(2026, 12, 7, 10, i, 0, 0, time.UTC)}
		var b bytes.Buffer
		if err := dns.Run(context.Background(), stage.Input{Block: name}, bytes.NewReader(data), &b); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, b.Bytes())
	}
	return out
}

// TestDNSTopEqualsExactCounts: on the real captures of testdata, with
// counters to spare, dnstop's rows are the exact top of every dimension
// the records' rows give, block by block and for a window of all the
// blocks; with few counters, every row still holds its value's true
// count within its error and no value left out exceeds the bound.
func TestDNSTopEqualsExactCounts(t *testing.T) {
	blocks := realRecords(t)
	var tbls []arrow.Table
	for _, b := range blocks {
		tbls = append(tbls, table(t, b))
	}
	truth := exactRanks(t, tbls)
	if len(truth[dnstop.DimQname]) < 20 || len(truth[dnstop.DimRcode]) < 2 || len(truth[dnstop.DimClientPrefix]) < 3 {
		t.Fatalf("too little to rank in the captures: %d names, %d rcodes, %d prefixes", len(truth[dnstop.DimQname]), len(truth[dnstop.DimRcode]), len(truth[dnstop.DimClientPrefix]))
	}
	// A window over every block, as the engine hands one to a window stage.
	dir := t.TempDir()
	doc := "window:\n  stage: top/top\n  id: w1\n  instance: all\n  revision: 1\n  reason: complete\nblocks:\n"
	for i, b := range blocks {
		p := filepath.Join(dir, fmt.Sprintf("b%d.arrow", i))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		doc += fmt.Sprintf("  - {name: b%d, instance: lax, seq: %d, path: %q}\n", i, i+1, p)
	}
	for _, c := range []struct{ n, counters int }{{100, 1000}, {3, 3}, {5, 8}} {
		t.Run(fmt.Sprintf("n%d-c%d", c.n, c.counters), func(t *testing.T) {
			top, err := registry().New("dnstop", url.Values{"n": {strconv.Itoa(c.n)}, "counters": {strconv.Itoa(c.counters)}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := run(t, top, []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			rows := topRows(t, out)
			got := map[string][]string{}
			for _, r := range rows {
				if r.instance != "all" {
					t.Fatalf("a window row of instance %q", r.instance)
				}
				want := truth[r.dim][r.value]
				if want < r.count-r.err || want > r.count || r.err > r.bound {
					t.Errorf("%s %s: seen %d times, row says %d (error %d, bound %d)", r.dim, r.value, want, r.count, r.err, r.bound)
				}
				got[r.dim] = append(got[r.dim], fmt.Sprintf("%s=%d", r.value, r.count))
			}
			for dim, counts := range truth {
				var total int64
				for v, n := range counts {
					total += n
					if !slices.ContainsFunc(rows, func(r topRow) bool { return r.dim == dim && r.value == v }) && n > boundOf(rows, dim) && len(got[dim]) < c.n {
						t.Errorf("%s %s seen %d times is neither listed nor under the bound %d", dim, v, n, boundOf(rows, dim))
					}
				}
				if r := rows[slices.IndexFunc(rows, func(r topRow) bool { return r.dim == dim })]; r.total != total {
					t.Errorf("%s: total %d, want %d", dim, r.total, total)
				}
				if c.counters >= 1000 && !slices.Equal(got[dim], wantTop(counts, c.n)) {
					t.Errorf("%s:\n got %v\nwant %v", dim, got[dim], wantTop(counts, c.n))
				}
			}
		})
	}
	// Block by block, each block's rows are its own exact top, and its
	// tally is one the server's check accepts.
	top, _ := registry().New("dnstop", url.Values{"dimensions": {"qname,rcode"}})
	for i, b := range blocks[:5] {
		name := block.Name{Instance: "lax", Seq: uint64(i + 1), Queue: "dns.arrow", Time: time.Date(2026, 12, 7, 10, i, 0, 0, time.UTC)}
		in := stage.Input{Block: name, Tally: &stage.Tally{}}
		var out bytes.Buffer
		if err := top.Run(context.Background(), in, bytes.NewReader(b), &out); err != nil {
			t.Fatal(err)
		}
		own := exactRanks(t, tbls[i:i+1])
		got := map[string][]string{}
		for _, r := range topRows(t, out.Bytes()) {
			if r.instance != "lax" || (r.dim != dnstop.DimQname && r.dim != dnstop.DimRcode) {
				t.Fatalf("block %d: a row %+v", i, r)
			}
			got[r.dim] = append(got[r.dim], fmt.Sprintf("%s=%d", r.value, r.count))
		}
		for _, dim := range []string{dnstop.DimQname, dnstop.DimRcode} {
			if !slices.Equal(got[dim], wantTop(own[dim], 10)) {
				t.Errorf("block %d %s: %v, want %v", i, dim, got[dim], wantTop(own[dim], 10))
			}
		}
		tally := in.Tally.Counts()
		if err := dnstop.CheckTally(tally); err != nil || (len(own[dnstop.DimQname]) > 0 && len(tally) == 0) {
			t.Errorf("block %d: tally of %d keys: %v", i, len(tally), err)
		}
	}
}

func boundOf(rows []topRow, dim string) int64 {
	for _, r := range rows {
		if r.dim == dim {
			return r.bound
		}
	}
	return 0
}

// TestDNSTopEnrichedAndPairs: enriched records rank requesters by AS and
// country; transactions rank by client as records do by source.
func TestDNSTopEnrichedAndPairs(t *testing.T) {
	dir := t.TempDir()
	geoVersion(t, dir, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), "SE")
	reg := enrichRegistry(dir)
	capture := dnsCapture(t, 1<<20)
	dns, _ := reg.New("dns", nil)
	records, err := run(t, dns, capture)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := reg.New("enrich", url.Values{"db": {"City.mmdb,ASN.mmdb"}})
	enriched, err := run(t, e, records)
	if err != nil {
		t.Fatal(err)
	}
	top, _ := reg.New("dnstop", url.Values{"dimensions": {"client,asn,country"}, "n": {"3"}})
	out, err := run(t, top, enriched)
	if err != nil {
		t.Fatal(err)
	}
	truth := exactRanks(t, []arrow.Table{table(t, enriched)})
	byDim := map[string][]string{}
	for _, r := range topRows(t, out) {
		byDim[r.dim] = append(byDim[r.dim], fmt.Sprintf("%s=%d", r.value, r.count))
	}
	if want := wantTop(truth[dnstop.DimASN], 3); len(want) == 0 || !slices.Equal(byDim[dnstop.DimASN], want) {
		t.Errorf("asn: %v, want %v", byDim[dnstop.DimASN], want)
	}
	if want := wantTop(truth[dnstop.DimCountry], 3); !slices.Equal(byDim[dnstop.DimCountry], want) || !strings.HasPrefix(want[0], "SE=") {
		t.Errorf("country: %v, want %v", byDim[dnstop.DimCountry], want)
	}
	// Transactions of a smaller capture, with counters to spare: every
	// dimension is its exact top, by client as records rank by source.
	pairs, _ := reg.New("dnspairs", nil)
	tx, err := run(t, pairs, dnsCapture(t, 1<<16))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := reg.New("dnstop", url.Values{"n": {"5"}, "counters": {"1000"}})
	out, err = run(t, all, tx)
	if err != nil {
		t.Fatal(err)
	}
	truth = exactRanks(t, []arrow.Table{table(t, tx)})
	byDim = map[string][]string{}
	for _, r := range topRows(t, out) {
		byDim[r.dim] = append(byDim[r.dim], fmt.Sprintf("%s=%d", r.value, r.count))
	}
	for _, dim := range []string{dnstop.DimClient, dnstop.DimClientPrefix, dnstop.DimQname, dnstop.DimRegisteredDomain, dnstop.DimRcode} {
		if want := wantTop(truth[dim], 5); len(want) == 0 || !slices.Equal(byDim[dim], want) {
			t.Errorf("transactions' %s: %v, want %v", dim, byDim[dim], want)
		}
	}
	if len(truth[dnstop.DimClient]) > 1000 {
		t.Fatalf("%d clients: more than the counters", len(truth[dnstop.DimClient]))
	}
}

// TestDNSTopRefuses: arguments out of range are refused at submission;
// a table that is not DNS rows, and a window naming a block that is
// not there, fail the run saying which.
func TestDNSTopRefuses(t *testing.T) {
	for _, args := range []url.Values{
		{"n": {"0"}}, {"n": {"101"}}, {"n": {"x"}}, {"n": {"10"}, "counters": {"5"}}, {"counters": {"1001"}},
		{"dimensions": {"client,src"}}, {"window": {"30s"}}, {"window": {"25h"}}, {"window": {"90500ms"}}, {"top": {"1"}},
	} {
		if _, err := registry().New("dnstop", args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	top, _ := registry().New("dnstop", nil)
	var out bytes.Buffer
	if err := dnstop.Write(&out, dnstop.NewCounter(dnstop.Dimensions, 10), "lax", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, top, out.Bytes()); !errors.Is(err, stage.ErrMalformed) || !strings.Contains(err.Error(), "neither DNS records") {
		t.Errorf("ranking a non-DNS table: %v", err)
	}
	if _, err := run(t, top, []byte("not arrow")); !errors.Is(err, stage.ErrMalformed) {
		t.Errorf("ranking garbage: %v", err)
	}
	doc := "window:\n  id: w9\n  instance: all\nblocks:\n  - {name: gone, path: /nonexistent/gone.arrow}\n"
	if _, err := run(t, top, []byte(doc)); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("a window of a missing block: %v", err)
	}
	// No rows at all: an empty table, not a failure.
	empty := emptyRecords(t)
	got, err := run(t, top, empty)
	if err != nil || len(topRows(t, got)) != 0 {
		t.Errorf("no rows: %v", err)
	}
}

// emptyRecords is builtin:dns's records of a capture of no packets.
func emptyRecords(t *testing.T) []byte {
	t.Helper()
	var capture bytes.Buffer
	w, _ := pcap.NewWriter(&capture, layers.LinkTypeEthernet, 65535, false)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	dns, _ := registry().New("dns", nil)
	out, err := run(t, dns, capture.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

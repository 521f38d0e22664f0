package builtin

import (
	"bytes"
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/stage"
)

// firstSeen is, from records read back, each registered domain's first
// query as "domain time client", in order of the blocks and rows.
func firstSeen(t *testing.T, tbls []arrow.Table) []string {
	seen := map[string]bool{}
	var out []string
	for _, tbl := range tbls {
		qr, dom, tm, src := testenv.ColumnStrings(t, tbl, "qr"), testenv.ColumnStrings(t, tbl, "registered_domain"),
			testenv.ColumnStrings(t, tbl, "time"), testenv.ColumnStrings(t, tbl, "src")
		for i := range qr {
			d := strings.ToLower(dom[i])
			if qr[i] == "true" || d == "" || seen[d] {
				continue
			}
			seen[d] = true
			out = append(out, d+" "+tm[i]+" "+src[i])
		}
	}
	return out
}

// foundRows reads builtin:newdomains' rows as "domain time client".
func foundRows(t *testing.T, out []byte) []string {
	t.Helper()
	tbl := table(t, out)
	defer tbl.Release()
	dom, tm, cl := testenv.ColumnStrings(t, tbl, "domain"), testenv.ColumnStrings(t, tbl, "time"), testenv.ColumnStrings(t, tbl, "client")
	var rows []string
	for i := range dom {
		rows = append(rows, dom[i]+" "+tm[i]+" "+cl[i])
	}
	return rows
}

// runSite runs b over a site's blocks in turn, each going on from the
// state the previous left, and returns each block's rows.
func runSite(t *testing.T, b stage.Builtin, blocks [][]byte, carry []byte) ([][]string, []byte, map[string]int64) {
	t.Helper()
	var rows [][]string
	drops := &stage.Drops{}
	for i, data := range blocks {
		c := &stage.Carry{In: carry}
		in := stage.Input{Block: block.Name{Instance: "lax", Seq: uint64(i + 1), Queue: "dns.arrow"}, Carry: c, Drops: drops}
		var out bytes.Buffer
		if err := b.Run(context.Background(), in, bytes.NewReader(data), &out); err != nil {
			t.Fatalf("block %d: %v", i+1, err)
		}
		rows = append(rows, foundRows(t, out.Bytes()))
		carry = c.Out
	}
	return rows, carry, drops.Counts()
}

// TestNewDomainsOnceAtAnyCut: over the real captures of testdata (their
// packets moved into one hour, as they span 18 years), a site's new
// domains are each distinct registered domain once, at its first
// query, whether the records come in many blocks carrying the memory
// from one to the next or in one; run again from the memory the last
// block left, the same records give nothing new.
func TestNewDomainsOnceAtAnyCut(t *testing.T) {
	blocks := realRecordsAt(t, time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	var tbls []arrow.Table
	for _, b := range blocks {
		tbls = append(tbls, table(t, b))
	}
	want := firstSeen(t, tbls)
	if len(want) < 20 {
		t.Fatalf("only %d domains in the captures", len(want))
	}
	nd, err := registry().New("newdomains", nil)
	if err != nil {
		t.Fatal(err)
	}
	perBlock, carry, drops := runSite(t, nd, blocks, nil)
	if got := slices.Concat(perBlock...); !slices.Equal(got, want) {
		t.Errorf("block by block: %d new domains, want %d\n got %v\nwant %v", len(got), len(want), got, want)
	}
	if len(drops) != 0 {
		t.Errorf("drops %v", drops)
	}
	// One block of every record.
	whole, _, _ := runSite(t, nd, [][]byte{concatArrow(t, tbls)}, nil)
	if !slices.Equal(whole[0], want) {
		t.Errorf("in one block: %d new domains, want %d", len(whole[0]), len(want))
	}
	// The same records again, from the memory they left: nothing new.
	again, _, _ := runSite(t, nd, blocks, carry)
	if got := slices.Concat(again...); len(got) != 0 {
		t.Errorf("the records again: %v", got)
	}
}

// concatArrow writes tables' batches as one Arrow IPC file.
func concatArrow(t *testing.T, tbls []arrow.Table) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(tbls[0].Schema()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tbl := range tbls {
		r := array.NewTableReader(tbl, -1)
		for r.Next() {
			if err := w.Write(r.RecordBatch()); err != nil {
				t.Fatal(err)
			}
		}
		r.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestNewDomainsLateAndReset: a late block (no carry) checks nothing and
// counts its queries as late_unchecked; a memory made with other
// arguments is started afresh and counted as state_reset; garbage and
// non-DNS tables are malformed; arguments out of bounds are refused.
func TestNewDomainsLateAndReset(t *testing.T) {
	blocks := realRecords(t)[:3]
	nd, _ := registry().New("newdomains", nil)
	drops := &stage.Drops{}
	var out bytes.Buffer
	if err := nd.Run(context.Background(), stage.Input{Drops: drops}, bytes.NewReader(blocks[0]), &out); err != nil {
		t.Fatal(err)
	}
	if rows := foundRows(t, out.Bytes()); len(rows) != 0 || drops.Counts()[stage.DropLateUnchecked] == 0 {
		t.Errorf("a late block: rows %v, drops %v", rows, drops.Counts())
	}
	other, _ := registry().New("newdomains", url.Values{"horizon": {"7d"}})
	_, carry, _ := runSite(t, other, blocks, nil)
	rows, _, d := runSite(t, nd, blocks[:1], carry)
	if d[stage.DropStateReset] != 1 || len(rows[0]) == 0 {
		t.Errorf("another stage's memory: drops %v, %d rows", d, len(rows[0]))
	}
	c := &stage.Carry{}
	if err := nd.Run(context.Background(), stage.Input{Carry: c}, strings.NewReader("not arrow"), &out); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("garbage: %v", err)
	}
	var top bytes.Buffer
	tp, _ := registry().New("dnstop", nil)
	if err := tp.Run(context.Background(), stage.Input{}, bytes.NewReader(blocks[0]), &top); err != nil {
		t.Fatal(err)
	}
	if err := nd.Run(context.Background(), stage.Input{Carry: &stage.Carry{}}, bytes.NewReader(top.Bytes()), &out); err == nil || !strings.Contains(err.Error(), "neither DNS records") {
		t.Errorf("a table of ranks: %v", err)
	}
	for _, args := range []url.Values{
		{"horizon": {"30m"}}, {"horizon": {"500d"}}, {"horizon": {"xd"}}, {"generations": {"1"}}, {"generations": {"17"}},
		{"capacity": {"0"}}, {"capacity": {"20000000"}, "fp": {"0.000001"}}, {"fp": {"0.5"}}, {"fp": {"x"}}, {"names": {"src"}}, {"size": {"1"}},
	} {
		if _, err := registry().New("newdomains", args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

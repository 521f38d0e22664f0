package dnsrec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/publicsuffix"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// TestWriterRows: every record written reads back from the IPC file
// with each column as the schema documents it, over more than three
// batches (the Writer reuses its buffers from batch to batch), the real
// captures in testdata (EDNS options, ECS, EDE, every section) and both
// generated mixes (malformed and partial messages).
func TestWriterRows(t *testing.T) {
	var recs []Record
	keep := func(r *Record) { recs = append(recs, *r) }
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	for _, c := range captures {
		eachRecord(t, c, keep)
	}
	for _, attack := range []bool{false, true} {
		var buf bytes.Buffer
		w, _ := pcap.NewWriter(&buf, layers.LinkTypeEthernet, 65535, false)
		cfg := synth.Config{Seed: 3, MaxBytes: 5 << 20}
		if attack {
			synth.AttackMix(&cfg)
		}
		if _, err := synth.Generate(context.Background(), w, cfg); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		extractAll(t, &buf, keep)
	}
	recs[len(recs)/2].Tunnel = "vxlan" // the extractor's tunnels have their own test
	// So are dnstap's rows (TestDnstapRows).
	recs[len(recs)/3].DnstapType, recs[len(recs)/3].DnstapIdentity, recs[len(recs)/3].Transport = "CLIENT_QUERY", "r1", 4
	if len(recs) < 3*BatchRows+1 {
		t.Fatalf("%d records; want more than three batches", len(recs))
	}

	// A capture sampled at 1/7: every row says so.
	f := writeRecords(t, recs, func(w *Writer) { w.SetSampleRate(7) })
	if !f.Schema().Equal(Schema) {
		t.Fatalf("schema %v", f.Schema())
	}
	row, seen := 0, map[string]bool{}
	for i := range f.NumRecords() {
		rec, err := f.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		for j := range int(rec.NumRows()) {
			got := map[string]any{}
			for k, col := range rec.Columns() {
				name := rec.Schema().Field(k).Name
				got[name] = col.GetOneForMarshal(j)
				if name == "time" {
					got[name] = col.(*array.Timestamp).Value(j)
				}
			}
			want := wantRow(&recs[row], "site-a", 42)
			if g, w := normal(t, got), normal(t, want); !reflect.DeepEqual(g, w) {
				t.Fatalf("row %d:\n got %s\nwant %s", row, jsonOf(t, g), jsonOf(t, w))
			}
			for k, v := range want {
				if v != nil && !reflect.DeepEqual(v, []any{}) {
					seen[k] = true
				}
			}
			row++
		}
	}
	if row != len(recs) {
		t.Fatalf("%d rows read back; %d written", row, len(recs))
	}
	// Every column held a value somewhere, so each was compared.
	for _, f := range Schema.Fields() {
		if !seen[f.Name] {
			t.Errorf("no row has a %s: the comparison does not cover it", f.Name)
		}
	}
}

// wantRow is a record's row as the schema documents its columns.
func wantRow(r *Record, instance string, seq uint64) map[string]any {
	m := &r.Msg
	or := func(ok bool, v any) any {
		if ok {
			return v
		}
		return nil
	}
	rrs := func(rrs []dnsmsg.RR) []any {
		out := []any{}
		for _, rr := range rrs {
			out = append(out, map[string]any{"name": rr.Name, "type": rr.Type, "class": rr.Class, "ttl": rr.TTL, "rdata": rr.RData})
		}
		return out
	}
	opts, ede, texts := []any{}, []any{}, []string{}
	for _, o := range m.Options {
		opts = append(opts, map[string]any{"code": o.Code, "data": append([]byte{}, o.Data...)}) // an empty option has data "", not null
	}
	for _, e := range m.EDE {
		ede = append(ede, e.Code)
		if e.Text != "" {
			texts = append(texts, e.Text)
		}
	}
	transport := Transports[r.TransportIndex()]
	errText := ""
	if r.Err != nil {
		errText = r.Err.Error()
	}
	named := m.HasQuestion && m.QName != "."
	reg, err := publicsuffix.EffectiveTLDPlusOne(m.QName)
	labels := 0
	if named {
		labels = strings.Count(m.QName, ".") + 1
	}
	return map[string]any{
		"instance": instance, "seq": seq, "sample_rate": 7, "time": r.Time.UnixNano(), "src": r.Src.String(), "dst": r.Dst.String(),
		"sport": r.SrcPort, "dport": r.DstPort, "transport": transport, "ip_version": r.IPVersion, "size": r.Size,
		"id": m.ID, "qr": m.QR, "opcode": m.Opcode, "aa": m.AA, "tc": m.TC, "rd": m.RD, "ra": m.RA, "ad": m.AD, "cd": m.CD,
		"rcode": m.Rcode, "qdcount": m.QDCount, "ancount": m.ANCount, "nscount": m.NSCount, "arcount": m.ARCount,
		"qname": or(m.HasQuestion, m.QName), "qtype": or(m.HasQuestion, m.QType), "qclass": or(m.HasQuestion, m.QClass),
		"edns": m.EDNS, "edns_version": or(m.EDNS, m.EDNSVersion), "edns_udp_size": or(m.EDNS, m.UDPSize), "edns_do": m.DO,
		"edns_options": opts, "malformed": r.Err != nil, "error": or(r.Err != nil, errText),
		"qname_raw": or(m.HasQuestion && m.QNameRaw != m.QName, m.QNameRaw), "labels": or(m.HasQuestion, labels),
		"tld": or(named, m.QName[strings.LastIndexByte(m.QName, '.')+1:]), "registered_domain": or(named && err == nil && reg != "", reg),
		"answers": rrs(m.Answer), "authority": rrs(m.Authority), "additional": rrs(m.Additional),
		"ecs_family": or(m.ECS.Family != 0, m.ECS.Family), "ecs_source_prefix": or(m.ECS.Family != 0, m.ECS.SourcePrefix),
		"ecs_scope_prefix": or(m.ECS.Family != 0, m.ECS.ScopePrefix), "ecs_address": or(m.ECS.Family != 0, m.ECS.Address),
		"ede": ede, "ede_text": or(len(texts) > 0, strings.Join(texts, "; ")), "cookie": m.Cookie,
		"tunnel": or(r.Tunnel != "", r.Tunnel), "partial": r.Partial,
		"dnstap_type": or(r.DnstapType != "", r.DnstapType), "dnstap_identity": or(r.DnstapIdentity != "", r.DnstapIdentity),
		"tcp_rtt": or(r.HasTCPRTT, fmt.Sprintf("%dns", r.TCPRTT.Nanoseconds())), // as arrow marshals a duration
	}
}

// normal is v as JSON reads it back, so Go's types and arrow-go's
// compare by value.
func normal(t *testing.T, v any) any {
	var out any
	if err := json.Unmarshal(jsonOf(t, v), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func jsonOf(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReducedSections: read with fewer record sections, every capture
// in testdata gives the same records as read whole but for the sections
// left out, and those are null in the rows (not read), while an empty
// section read is an empty list.
func TestReducedSections(t *testing.T) {
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	if len(captures) < 50 {
		t.Fatalf("%d captures", len(captures))
	}
	for _, read := range []dnsmsg.Sections{0, dnsmsg.Answer, dnsmsg.Answer | dnsmsg.Additional} {
		var whole, reduced []Record
		for _, c := range captures {
			eachRecord(t, c, func(r *Record) {
				c := *r
				if read&dnsmsg.Answer == 0 {
					c.Msg.Answer = nil
				}
				if read&dnsmsg.Authority == 0 {
					c.Msg.Authority = nil
				}
				if read&dnsmsg.Additional == 0 {
					c.Msg.Additional = nil
				}
				whole = append(whole, c)
			})
			link, cis, frames := packetsOf(t, c)
			x := NewExtractor(link, nil, func(r *Record) { reduced = append(reduced, *r) })
			x.ReadSections(read)
			for i := range frames {
				x.Packet(cis[i].Timestamp, frames[i])
			}
			x.Flush()
		}
		if len(whole) != len(reduced) || len(whole) == 0 {
			t.Fatalf("sections %b: %d records; whole %d", read, len(reduced), len(whole))
		}
		for i := range whole {
			w, r := whole[i], reduced[i]
			if fmt.Sprint(w.Err) != fmt.Sprint(r.Err) {
				t.Fatalf("sections %b, record %d: error %v; whole %v", read, i, r.Err, w.Err)
			}
			w.Err, r.Err = nil, nil
			for _, m := range []*dnsmsg.Message{&w.Msg, &r.Msg} {
				for _, s := range []*[]dnsmsg.RR{&m.Answer, &m.Authority, &m.Additional} {
					if len(*s) == 0 {
						*s = nil
					}
				}
			}
			if !reflect.DeepEqual(w, r) {
				t.Fatalf("sections %b, record %d:\n got %+v\nwhole %+v", read, i, r.Msg, w.Msg)
			}
		}
		f := writeRecords(t, reduced, func(w *Writer) { w.SetSections(read) })
		nulls := map[string]int{}
		rows := 0
		for i := range f.NumRecords() {
			rec, _ := f.RecordBatch(i)
			for k, name := range []string{"answers", "authority", "additional"} {
				col := rec.Column(rec.Schema().FieldIndices(name)[0])
				nulls[name] += col.NullN()
				if read&(dnsmsg.Answer<<k) != 0 && col.NullN() != 0 {
					t.Errorf("sections %b: %d null %s, which were read", read, col.NullN(), name)
				}
			}
			rows += int(rec.NumRows())
		}
		f.Close()
		for k, name := range []string{"answers", "authority", "additional"} {
			if read&(dnsmsg.Answer<<k) == 0 && nulls[name] != rows {
				t.Errorf("sections %b: %d of %d rows have a null %s, which was not read", read, nulls[name], rows, name)
			}
		}
	}
}

// TestReducedNames: written with fewer columns derived from qname, the
// records of every capture in testdata are the same but for those left
// out, which are null in every row; names= is refused naming the wrong
// word.
func TestReducedNames(t *testing.T) {
	var recs []Record
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	for _, c := range captures {
		eachRecord(t, c, func(r *Record) { recs = append(recs, *r) })
	}
	write := func(n Names) []arrow.RecordBatch {
		f := writeRecords(t, recs, func(w *Writer) { w.SetNames(n) })
		var batches []arrow.RecordBatch
		for i := range f.NumRecords() {
			rec, err := f.RecordBatch(i)
			if err != nil {
				t.Fatal(err)
			}
			rec.Retain()
			batches = append(batches, rec)
		}
		return batches
	}
	whole := write(AllNames)
	for _, v := range []string{"none", "tld", "registered_domain,labels"} {
		n, err := ParseNames(v)
		if err != nil {
			t.Fatal(err)
		}
		kept := map[string]bool{"qname_raw": n&NameRaw != 0, "labels": n&NameLabels != 0, "tld": n&NameTLD != 0, "registered_domain": n&NameRegistered != 0}
		got := write(n)
		if len(got) != len(whole) {
			t.Fatalf("names=%s: %d batches, whole %d", v, len(got), len(whole))
		}
		for b := range got {
			for c, f := range Schema.Fields() {
				g, w := got[b].Column(c), whole[b].Column(c)
				if keep, derived := kept[f.Name]; derived && !keep {
					if g.NullN() != g.Len() {
						t.Fatalf("names=%s: %s has %d values, want none", v, f.Name, g.Len()-g.NullN())
					}
					if w.NullN() == w.Len() {
						t.Fatalf("%s is null in every row when kept too: the test shows nothing", f.Name)
					}
					continue
				}
				if !array.Equal(g, w) {
					t.Fatalf("names=%s: column %s differs from the whole records'", v, f.Name)
				}
			}
		}
	}
	if _, err := ParseNames("tld,domain"); err == nil || !strings.Contains(err.Error(), "qname_raw, labels, tld and registered_domain") {
		t.Errorf("a wrong name: %v", err)
	}
}

// TestBatchesEndAtBatchBytes: records with large answers (signatures,
// long TXT) end their batch once its names and data reach BatchBytes,
// long before BatchRows, so a writer's memory follows its bytes; every
// row is still there, in order.
func TestBatchesEndAtBatchBytes(t *testing.T) {
	sig := strings.Repeat("A", 2000)
	const rows = 6000 // 12 MB of answers
	var recs []Record
	for i := range rows {
		r := Record{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), SrcPort: 53, DstPort: 1024, IPVersion: 4}
		r.Msg.ID, r.Msg.QR, r.Msg.HasQuestion, r.Msg.QName, r.Msg.QNameRaw = uint16(i), true, true, "example.com", "example.com"
		r.Msg.Answer = []dnsmsg.RR{{Name: "example.com", Type: 46, Class: 1, TTL: 300, RData: sig}}
		recs = append(recs, r)
	}
	f := writeRecords(t, recs, nil)
	next := 0
	for i := range f.NumRecords() {
		rec, err := f.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		if n := int(rec.NumRows()); n*len(sig) > BatchBytes+64*len(sig) {
			t.Errorf("batch %d holds %d rows, %d bytes of answers; want at most BatchBytes (%d) and one check's rows", i, n, n*len(sig), BatchBytes)
		}
		ids := rec.Column(Schema.FieldIndices("id")[0]).(*array.Uint16)
		for j := range ids.Len() {
			if int(ids.Value(j)) != next {
				t.Fatalf("batch %d row %d has id %d; want %d", i, j, ids.Value(j), next)
			}
			next++
		}
	}
	if next != rows || f.NumRecords() < 3 {
		t.Fatalf("%d rows in %d batches; want %d rows in at least 3", next, f.NumRecords(), rows)
	}
}

// TestZstdLevels: the records of every capture in testdata read back
// the same at each level a stage may choose, and "small" makes them
// smaller than the default (what the level is for); other names are
// refused, saying which are taken.
func TestZstdLevels(t *testing.T) {
	var recs []Record
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	for _, c := range captures {
		eachRecord(t, c, func(r *Record) { recs = append(recs, *r) })
	}
	sizes := map[string]int{}
	var whole []arrow.RecordBatch
	for _, name := range []string{"fast", "balanced", "small"} {
		level, err := ParseZstd(name)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		f := writeRecordsTo(t, &out, level, recs, nil)
		sizes[name] = out.Len()
		var got []arrow.RecordBatch
		for i := range f.NumRecords() {
			rec, err := f.RecordBatch(i)
			if err != nil {
				t.Fatalf("zstd=%s: batch %d: %v", name, i, err)
			}
			rec.Retain()
			t.Cleanup(rec.Release)
			got = append(got, rec)
		}
		if whole == nil {
			whole = got
			continue
		}
		if len(got) != len(whole) {
			t.Fatalf("zstd=%s: %d batches; default %d", name, len(got), len(whole))
		}
		for i := range got {
			if !array.RecordEqual(got[i], whole[i]) {
				t.Fatalf("zstd=%s: batch %d differs from the default level's", name, i)
			}
		}
	}
	if whole == nil || whole[0].NumRows() == 0 {
		t.Fatal("no records")
	}
	if sizes["small"] >= sizes["fast"] {
		t.Errorf("zstd=small wrote %d bytes, fast (the default) %d: want fewer", sizes["small"], sizes["fast"])
	}
	t.Logf("bytes by level: %v", sizes)
	if l, err := ParseZstd(""); err != nil || l != RecordsZstdLevel {
		t.Errorf(`zstd="" reads as %d, %v; want %d`, l, err, RecordsZstdLevel)
	}
	for _, bad := range []string{"3", "best", "Small", "default"} {
		if _, err := ParseZstd(bad); err == nil || !strings.Contains(err.Error(), "fast, balanced or small") {
			t.Errorf("zstd=%s: %v; want it refused, naming the levels", bad, err)
		}
	}
}

// writeRecords writes recs through a Writer (set, when not nil, sets it
// up first) and opens the file it wrote.
func writeRecords(t *testing.T, recs []Record, set func(*Writer)) *ipc.FileReader {
	t.Helper()
	var out bytes.Buffer
	return writeRecordsTo(t, &out, RecordsZstdLevel, recs, set)
}

// writeRecordsTo is writeRecords at a ZSTD level, into out.
func writeRecordsTo(t *testing.T, out *bytes.Buffer, level int, recs []Record, set func(*Writer)) *ipc.FileReader {
	t.Helper()
	w, err := NewWriterLevel(out, "site-a", 42, level)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(w)
	}
	for i := range recs {
		if err := w.Add(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := ipc.NewFileReader(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

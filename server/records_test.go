package server

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/rowfilter"
)

func batch(t *testing.T) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "time", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
		{Name: "qname", Type: arrow.BinaryTypes.String},
		{Name: "qtype", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "qr", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "rcode", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
		{Name: "transport", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i, name := range []string{"a.example", "www.b.example", "c.example", "xb.example", "e.example"} {
		b.Field(0).(*array.TimestampBuilder).Append(arrow.Timestamp(int64(i) * 1e9))
		b.Field(1).(*array.StringBuilder).Append(name)
		b.Field(2).(*array.Uint16Builder).Append(uint16(1 + i%2*27))
		b.Field(3).(*array.BooleanBuilder).Append(i%2 == 1)
		if i%2 == 1 {
			b.Field(4).(*array.Uint16Builder).Append(uint16(i / 2 * 3)) // b: 0, d: 3
		} else {
			b.Field(4).AppendNull() // queries have no rcode
		}
		tr := "udp"
		if i == 1 || i == 2 {
			tr = "tcp"
		}
		if err := b.Field(5).(*array.BinaryDictionaryBuilder).AppendString(tr); err != nil {
			t.Fatal(err)
		}
	}
	return b.NewRecordBatch()
}

func names(r arrow.RecordBatch) string {
	var out []string
	col := r.Column(r.Schema().FieldIndices("qname")[0]).(*array.String)
	for i := 0; i < col.Len(); i++ {
		out = append(out, col.Value(i))
	}
	return strings.Join(out, ",")
}

func TestSelectRows(t *testing.T) {
	rec := batch(t)
	defer rec.Release()
	for _, c := range []struct {
		ticket string
		want   string
		err    string
	}{
		{`{"records":"q"}`, "a.example,www.b.example,c.example,xb.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qtype","op":"=","value":28}]}`, "www.b.example,xb.example", ""},
		{`{"records":"q","filter":[{"column":"qtype","op":"<","value":28},{"column":"qname","op":"!=","value":"c.example"}]}`, "a.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qr","op":"=","value":false}]}`, "a.example,c.example,e.example", ""},
		{`{"records":"q","from":"1970-01-01T00:00:01Z","to":"1970-01-01T00:00:03Z"}`, "www.b.example,c.example,xb.example", ""},
		{`{"records":"q","filter":[{"column":"qname","op":">=","value":"d"}],"columns":["qname"]}`, "www.b.example,xb.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qtype","op":"=","value":99}]}`, "", ""},
		{`{"records":"q","filter":[{"column":"qname","op":"in","value":["c.example","e.example","z"]}]}`, "c.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qtype","op":"in","value":[28]}]}`, "www.b.example,xb.example", ""},
		{`{"records":"q","filter":[{"column":"qname","op":"like","value":"%b.ex_mple"}]}`, "www.b.example,xb.example", ""},
		{`{"records":"q","filter":[{"column":"qname","op":"like","value":"_.example"}]}`, "a.example,c.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qname","op":"suffix","value":"b.example."}]}`, "www.b.example", ""},
		{`{"records":"q","filter":[{"column":"qname","op":"suffix","value":"example"}]}`, "a.example,www.b.example,c.example,xb.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qname","op":"regex","value":"^(www\\.)?[a-c]\\.example$"}]}`, "a.example,www.b.example,c.example", ""},
		{`{"records":"q","filter":[{"column":"qname","op":"regex","value":"b\\.ex"}]}`, "www.b.example,xb.example", ""},
		{`{"records":"q","filter":[{"column":"qname","op":"regex","value":"(a"}]}`, "", "regex"},
		{`{"records":"q","filter":[{"column":"qtype","op":"regex","value":"1"}]}`, "", "works on string columns"},
		{`{"records":"q","filter":[{"column":"rcode","op":"is_null"}]}`, "a.example,c.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"rcode","op":"not_null"}]}`, "www.b.example,xb.example", ""},
		{`{"records":"q","filter":[{"column":"rcode","op":"!=","value":3}]}`, "www.b.example", ""},
		{`{"records":"q","filter":[{"column":"transport","op":"=","value":"tcp"}]}`, "www.b.example,c.example", ""},
		{`{"records":"q","filter":[{"column":"transport","op":"in","value":["udp"]},{"column":"qr","op":"=","value":true}]}`, "xb.example", ""},
		{`{"records":"q","filter":[{"column":"transport","op":"like","value":"t%"}],"columns":["qname","transport"]}`, "www.b.example,c.example", ""},
		{`{"records":"q","filter":[{"column":"transport","op":"not_null"}]}`, "a.example,www.b.example,c.example,xb.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qtype","op":"~","value":1}]}`, "", `op "~"`},
		{`{"records":"q","filter":[{"column":"qtype","op":"=","value":"x"}]}`, "", "want a number"},
		{`{"records":"q","filter":[{"column":"nope","op":"=","value":1}]}`, "", `no column "nope"`},
		{`{"records":"q","filter":[{"column":"qtype","op":"like","value":"1%"}]}`, "", "works on string columns"},
		{`{"records":"q","filter":[{"column":"qname","op":"in","value":"a.example"}]}`, "", "in wants a list"},
		{`{"records":"q","filter":[{"column":"qname","op":"like","value":"a\\"}]}`, "", "ends in an escape"},
		{`{"records":"q","filter":[{"column":"rcode","op":"is_null","value":0}]}`, "", "takes no value"},
	} {
		r, err := parseRecords([]byte(c.ticket))
		if err != nil {
			t.Fatal(err)
		}
		out, err := rowfilter.Select(rec, r.Columns, r.conditions())
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.ticket, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.ticket, err)
			continue
		}
		if got := names(out); got != c.want {
			t.Errorf("%s: %s, want %s", c.ticket, got, c.want)
		}
		out.Release()
	}
}

// arrowFile is rec as an Arrow IPC file.
func arrowFile(t *testing.T, rec arrow.RecordBatch) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(rec.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRecordsAcrossAnAddedColumn: a queue whose older blocks were
// written before their stage gained a column (a Plumb upgrade) reads as
// one table of the newest block's columns, the older rows null in the
// new one, whether the ticket asks for every column, for the new one or
// filters on it; a block whose column changed type is refused, named.
func TestRecordsAcrossAnAddedColumn(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	old := batch(t)
	defer old.Release()
	// The newer block: the same rows, with rtt after rcode.
	fields := slices.Insert(slices.Clone(old.Schema().Fields()), 5, arrow.Field{Name: "rtt", Type: arrow.FixedWidthTypes.Duration_ns, Nullable: true})
	rb := array.NewDurationBuilder(memory.DefaultAllocator, arrow.FixedWidthTypes.Duration_ns.(*arrow.DurationType))
	defer rb.Release()
	for i := range old.NumRows() {
		rb.AppendValues([]arrow.Duration{arrow.Duration((i + 1) * 1000)}, nil)
	}
	rtt := rb.NewArray()
	defer rtt.Release()
	newer := array.NewRecordBatch(arrow.NewSchema(fields, nil), slices.Insert(slices.Clone(old.Columns()), 5, rtt), old.NumRows())
	defer newer.Release()
	if _, err := ts.c.Put(ctx, bytesSource("20250505-151105-00000001.lax.dns.arrow", arrowFile(t, old)),
		bytesSource("20250505-151106-00000002.lax.dns.arrow", arrowFile(t, newer))); err != nil {
		t.Fatal(err)
	}
	tbl, err := ts.c.RecordsTable(ctx, flight.RecordsTicket{Records: "dns.arrow"})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if tbl.NumRows() != 10 || !tbl.Schema().Equal(newer.Schema()) {
		t.Fatalf("%d rows of %v; want 10 of the newest block's columns", tbl.NumRows(), tbl.Schema())
	}
	if nulls := tbl.Column(5).NullN(); nulls != 5 {
		t.Fatalf("rtt has %d nulls; want the older block's 5", nulls)
	}
	tbl2, err := ts.c.RecordsTable(ctx, flight.RecordsTicket{Records: "dns.arrow", Columns: []string{"qname", "rtt"},
		Filter: []flight.Condition{{Column: "rtt", Op: "not_null"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl2.Release()
	if tbl2.NumRows() != 5 || tbl2.NumCols() != 2 {
		t.Fatalf("filtered on the new column: %d rows, %d columns; want the newer block's 5 rows, 2 columns", tbl2.NumRows(), tbl2.NumCols())
	}
	// A third block whose qtype is a string: refused, by name.
	fields = slices.Clone(old.Schema().Fields())
	fields[2].Type = arrow.BinaryTypes.String
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	defer sb.Release()
	sb.AppendValues([]string{"A", "AAAA", "A", "AAAA", "A"}, nil)
	qtype := sb.NewArray()
	defer qtype.Release()
	cols := slices.Clone(old.Columns())
	cols[2] = qtype
	odd := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, old.NumRows())
	defer odd.Release()
	if _, err := ts.c.Put(ctx, bytesSource("20250505-151107-00000003.lax.dns.arrow", arrowFile(t, odd))); err != nil {
		t.Fatal(err)
	}
	_, err = ts.c.RecordsTable(ctx, flight.RecordsTicket{Records: "dns.arrow", From: json.RawMessage("1"), To: json.RawMessage("2")})
	if err != nil {
		t.Fatalf("the two blocks before it: %v", err)
	}
	_, err = ts.c.RecordsTable(ctx, flight.RecordsTicket{Records: "dns.arrow"})
	wantCode(t, err, codes.FailedPrecondition, "block 20250505-151105-00000001.lax.dns.arrow")
}

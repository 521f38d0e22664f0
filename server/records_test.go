package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/plumb-dev/plumb/flight"
)

func batch(t *testing.T) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "time", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
		{Name: "qname", Type: arrow.BinaryTypes.String},
		{Name: "qtype", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "qr", Type: arrow.FixedWidthTypes.Boolean},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i, name := range []string{"a.example", "b.example", "c.example", "d.example", "e.example"} {
		b.Field(0).(*array.TimestampBuilder).Append(arrow.Timestamp(int64(i) * 1e9))
		b.Field(1).(*array.StringBuilder).Append(name)
		b.Field(2).(*array.Uint16Builder).Append(uint16(1 + i%2*27))
		b.Field(3).(*array.BooleanBuilder).Append(i%2 == 1)
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
		{`{"records":"q"}`, "a.example,b.example,c.example,d.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qtype","op":"=","value":28}]}`, "b.example,d.example", ""},
		{`{"records":"q","filter":[{"column":"qtype","op":"<","value":28},{"column":"qname","op":"!=","value":"c.example"}]}`, "a.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qr","op":"=","value":false}]}`, "a.example,c.example,e.example", ""},
		{`{"records":"q","from":"1970-01-01T00:00:01Z","to":"1970-01-01T00:00:03Z"}`, "b.example,c.example,d.example", ""},
		{`{"records":"q","filter":[{"column":"qname","op":">=","value":"d"}],"columns":["qname"]}`, "d.example,e.example", ""},
		{`{"records":"q","filter":[{"column":"qtype","op":"=","value":99}]}`, "", ""},
		{`{"records":"q","filter":[{"column":"qtype","op":"~","value":1}]}`, "", `op "~"`},
		{`{"records":"q","filter":[{"column":"qtype","op":"=","value":"x"}]}`, "", "want a number"},
		{`{"records":"q","filter":[{"column":"nope","op":"=","value":1}]}`, "", `no column "nope"`},
	} {
		var tk flight.RecordsTicket
		if err := json.Unmarshal([]byte(c.ticket), &tk); err != nil {
			t.Fatal(err)
		}
		from, _ := parseBound(tk.From, "from")
		to, _ := parseBound(tk.To, "to")
		out, err := selectRows(rec, tk, from, to)
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

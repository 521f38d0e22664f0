package arrowjson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestSameValuesAsRecordToJSON: every row reads back (decoded as JSON)
// as the row arrow-go's RecordToJSON writes, on every column type DNS
// records use, nulls, escapes and invalid UTF-8 included.
func TestSameValuesAsRecordToJSON(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "u8", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
		{Name: "u16", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "u64", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
		{Name: "t", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "rrs", Type: arrow.ListOf(arrow.StructOf(
			arrow.Field{Name: "name", Type: arrow.BinaryTypes.String},
			arrow.Field{Name: "ttl", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
			arrow.Field{Name: "w", Type: arrow.PrimitiveTypes.Float64})), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	strs := []string{"plain", "quote\" back\\slash", "ctl\x01\n\t\r", "<html>&", "bad\xff\xfeutf8", "ünïcødé \u2028", ""}
	for i, s := range strs {
		b.Field(0).(*array.StringBuilder).Append(s)
		b.Field(1).(*array.BooleanBuilder).Append(i%2 == 0)
		b.Field(2).(*array.Uint8Builder).Append(uint8(i * 40))
		b.Field(3).(*array.Uint16Builder).Append(uint16(i * 9000))
		b.Field(4).(*array.Uint32Builder).Append(uint32(i) * 1e9)
		b.Field(5).(*array.Uint64Builder).Append(uint64(i) << 60)
		b.Field(6).(*array.Int64Builder).Append(-int64(i) << 40)
		b.Field(7).(*array.TimestampBuilder).Append(arrow.Timestamp(1765101600123456789 + int64(i)))
		b.Field(8).(*array.BinaryBuilder).Append([]byte(s))
		lb := b.Field(9).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.StringBuilder).Append(s)
		rb := b.Field(10).(*array.ListBuilder)
		rb.Append(true)
		sb := rb.ValueBuilder().(*array.StructBuilder)
		for k := range i {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(s)
			if k%2 == 0 {
				sb.FieldBuilder(1).(*array.Uint32Builder).Append(uint32(k))
			} else {
				sb.FieldBuilder(1).(*array.Uint32Builder).AppendNull()
			}
			sb.FieldBuilder(2).(*array.Float64Builder).Append(float64(k) / 3)
		}
	}
	for j := range schema.NumFields() {
		b.Field(j).AppendNull()
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var want bytes.Buffer
	if err := array.RecordToJSON(rec, &want); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(want.Bytes()), []byte("\n"))
	rows := New(rec)
	for i := range int(rec.NumRows()) {
		got := rows.Append(nil, i)
		var g, w map[string]any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("row %d: %s: %v", i, got, err)
		}
		json.Unmarshal(lines[i], &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("row %d:\n got %s\nwant %s", i, got, lines[i])
		}
	}
}

func BenchmarkRows(b *testing.B) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "qname", Type: arrow.BinaryTypes.String}, {Name: "id", Type: arrow.PrimitiveTypes.Uint16}}, nil)
	bl := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	for range 1000 {
		bl.Field(0).(*array.StringBuilder).Append("www.example.com.")
		bl.Field(1).(*array.Uint16Builder).Append(4242)
	}
	rec := bl.NewRecordBatch()
	rows := New(rec)
	var buf []byte
	for b.Loop() {
		for i := range 1000 {
			buf = rows.Append(buf[:0], i)
		}
	}
}

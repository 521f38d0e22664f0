package dnstop

import (
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

var tsType = &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}

// Schema is the table builtin:dnstop writes: a row per dimension and
// rank, the most counted first. A listed value was seen between count -
// error and count times; one not listed, at most bound times; total is
// what the dimension counted (queries, or responses for rcode).
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "instance", Type: arrow.BinaryTypes.String}, // the site; "all" for a window across sites
	{Name: "from", Type: tsType},                       // the first event time counted
	{Name: "to", Type: tsType},                         // the last
	{Name: "dimension", Type: arrow.BinaryTypes.String},
	{Name: "rank", Type: arrow.PrimitiveTypes.Uint16}, // 1 for the most counted
	{Name: "value", Type: arrow.BinaryTypes.String},
	{Name: "count", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "error", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "total", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "bound", Type: arrow.PrimitiveTypes.Uint64},
}, nil)

// Write writes the top n of each of c's dimensions as one Arrow IPC file
// of Schema, for instance (a site, or "all").
func Write(w io.Writer, c *Counter, instance string, n int) error {
	b := array.NewRecordBuilder(memory.DefaultAllocator, Schema)
	defer b.Release()
	var (
		inst  = b.Field(0).(*array.StringBuilder)
		from  = b.Field(1).(*array.TimestampBuilder)
		to    = b.Field(2).(*array.TimestampBuilder)
		dim   = b.Field(3).(*array.StringBuilder)
		rank  = b.Field(4).(*array.Uint16Builder)
		value = b.Field(5).(*array.StringBuilder)
		count = b.Field(6).(*array.Uint64Builder)
		errs  = b.Field(7).(*array.Uint64Builder)
		total = b.Field(8).(*array.Uint64Builder)
		bound = b.Field(9).(*array.Uint64Builder)
	)
	f, t := c.Span()
	ts := func(t time.Time) arrow.Timestamp {
		if t.IsZero() {
			return 0
		}
		return arrow.Timestamp(t.UnixNano())
	}
	for _, d := range c.Dimensions() {
		s := c.Summary(d)
		for i, it := range s.Top(n) {
			inst.Append(instance)
			from.Append(ts(f))
			to.Append(ts(t))
			dim.Append(d)
			rank.Append(uint16(i + 1))
			value.Append(it.Value)
			count.Append(uint64(it.Count))
			errs.Append(uint64(it.Err))
			total.Append(uint64(s.Total()))
			bound.Append(uint64(s.Bound()))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	fw, err := ipc.NewFileWriter(w, ipc.WithSchema(Schema), ipc.WithZstd())
	if err != nil {
		return err
	}
	if err := fw.Write(rec); err != nil {
		return fmt.Errorf("top rows: %w", err)
	}
	return fw.Close()
}

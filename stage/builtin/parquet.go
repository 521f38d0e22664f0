package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/plumb-dev/plumb/ipcguard"
	"github.com/plumb-dev/plumb/stage"
)

// Bounds of one builtin:parquet run: the Arrow block it reads, and the
// memory its batches may take decoded (all of them when the rows must be
// sorted).
const (
	maxParquetInput  = 1 << 30
	maxParquetMemory = 1 << 30
	// DefaultRowGroupRows is the rows of a Parquet row group: about
	// 30–60 MB of DNS records compressed, what Spark and Trino split on.
	DefaultRowGroupRows = 1 << 20
)

func registerParquet(reg *stage.Registry) {
	reg.Add(stage.Factory{
		Name: "parquet",
		Doc: "Writes an Arrow IPC block (DNS records, transactions, any table) as one Parquet file: ZSTD, statistics on, " +
			"rows sorted by their time column, row groups of ?row_group_rows=1048576. An output queue named *.parquet is " +
			"stored as a lake under Hive partitions QUEUE/date=YYYY-MM-DD/site=SITE/ that pyarrow, DuckDB, Spark and " +
			"Trino read in place.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args, "row_group_rows"); err != nil {
				return nil, err
			}
			p := &Parquet{RowGroupRows: DefaultRowGroupRows}
			if v := args.Get("row_group_rows"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1024 || n > 64<<20 {
					return nil, fmt.Errorf("row_group_rows=%q: want a count between 1024 and %d", v, 64<<20)
				}
				p.RowGroupRows = n
			}
			return p, nil
		},
	})
}

// Parquet turns Arrow IPC blocks into Parquet files.
type Parquet struct {
	RowGroupRows int
	// MaxMemory bounds what a run's Arrow and Parquet buffers take;
	// maxParquetMemory when zero. A block needing more is set aside.
	MaxMemory int64
}

// Run implements stage.Builtin.
func (p *Parquet) Run(ctx context.Context, _ stage.Input, in io.Reader, out io.Writer) error {
	data, err := io.ReadAll(io.LimitReader(in, maxParquetInput+1))
	if err != nil {
		return err
	}
	if len(data) > maxParquetInput {
		return fmt.Errorf("%w: an Arrow block over %d bytes; cut the capture into smaller blocks", stage.ErrMalformed, maxParquetInput)
	}
	most := p.MaxMemory
	if most <= 0 {
		most = maxParquetMemory
	}
	mem := ipcguard.NewBudget(most)
	f, err := ipcguard.OpenFile(data, most)
	if err != nil {
		return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
	}
	defer f.Close()
	// The Parquet writer allocates from the same budget, and panics
	// past it: Under turns that into an error.
	err = ipcguard.Under(func() error { return p.write(ctx, f, out, mem) })
	if errors.Is(err, ipcguard.ErrOverBudget) {
		return fmt.Errorf("%w: its rows need more than %d bytes of memory to write (%v); cut the capture into smaller blocks",
			stage.ErrMalformed, most, err)
	}
	return err
}

func (p *Parquet) write(ctx context.Context, f *ipc.FileReader, out io.Writer, mem *ipcguard.Budget) error {
	schema := f.Schema()
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithStats(true),
		parquet.WithMaxRowGroupLength(int64(p.RowGroupRows)),
		parquet.WithDictionaryDefault(true),
		parquet.WithDictionaryFor("time", false),
		parquet.WithEncodingFor("time", parquet.Encodings.DeltaBinaryPacked),
		parquet.WithDictionaryFor("response_time", false),
		parquet.WithEncodingFor("response_time", parquet.Encodings.DeltaBinaryPacked),
		parquet.WithCreatedBy("plumb"),
		parquet.WithAllocator(mem),
	)
	// Microseconds, not nanoseconds: Spark refuses Parquet's
	// TIMESTAMP(NANOS), and capture times are microseconds (a
	// nanosecond pcap loses its last three digits here, not in Arrow).
	arrowProps := pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(mem), pqarrow.WithStoreSchema(),
		pqarrow.WithCoerceTimestamps(arrow.Microsecond), pqarrow.WithTruncatedTimestamps(true))
	pqSchema := parquetSchema(schema)
	w, err := pqarrow.NewFileWriter(pqSchema, out, props, arrowProps)
	if err != nil {
		return fmt.Errorf("%w: a Parquet file of schema %s: %v", stage.ErrMalformed, schema, err)
	}
	defer w.Close()

	batch := func(i int) (rec arrow.RecordBatch, err error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := ipcguard.Under(func() (err error) { rec, err = f.RecordBatchAt(i); return err }); err != nil { // ours to release
			return nil, fmt.Errorf("%w: batch %d: %v", stage.ErrMalformed, i, err)
		}
		return rec, nil
	}
	timeCol := -1
	if idx := schema.FieldIndices("time"); len(idx) == 1 && schema.Field(idx[0]).Type.ID() == arrow.TIMESTAMP {
		timeCol = idx[0]
	}
	// Rows in time order already (builtin:dns writes a time-ordered
	// capture's so) stream through a batch at a time; others are read
	// whole and sorted. Finding out costs a first pass of decoding.
	sorted, last := true, int64(-1<<63)
	for i := 0; i < f.NumRecords() && timeCol >= 0 && sorted; i++ {
		rec, err := batch(i)
		if err != nil {
			return err
		}
		ts := rec.Column(timeCol).(*array.Timestamp)
		for j := 0; j < ts.Len(); j++ {
			if ts.IsNull(j) {
				sorted = false // nulls go last
				break
			}
			if v := int64(ts.Value(j)); v >= last {
				last = v
			} else {
				sorted = false
				break
			}
		}
		rec.Release()
	}
	if sorted {
		for i := 0; i < f.NumRecords(); i++ {
			rec, err := batch(i)
			if err != nil {
				return err
			}
			pq := asParquet(rec, pqSchema)
			err = w.WriteBuffered(pq)
			pq.Release()
			rec.Release()
			if err != nil {
				return fmt.Errorf("write Parquet: %w", err)
			}
		}
		return w.Close()
	}
	batches := make([]arrow.RecordBatch, 0, f.NumRecords())
	defer func() {
		for _, b := range batches {
			b.Release()
		}
	}()
	for i := 0; i < f.NumRecords(); i++ {
		rec, err := batch(i)
		if err != nil {
			return err
		}
		batches = append(batches, rec)
	}
	if len(batches) > 0 {
		rec, err := sortByTime(ctx, batches, schema, timeCol, mem)
		if err != nil {
			return err
		}
		defer rec.Release()
		pq := asParquet(rec, pqSchema)
		defer pq.Release()
		if err := w.WriteBuffered(pq); err != nil {
			return fmt.Errorf("write Parquet: %w", err)
		}
	}
	return w.Close()
}

// sortByTime joins batches into one, its rows in the order of column
// col (nulls last, ties as they came).
func sortByTime(ctx context.Context, batches []arrow.RecordBatch, schema *arrow.Schema, col int, mem *ipcguard.Budget) (rec arrow.RecordBatch, err error) {
	ctx = compute.WithAllocator(ctx, mem)
	err = ipcguard.Under(func() error {
		cols := make([]arrow.Array, schema.NumFields())
		defer func() {
			for _, c := range cols {
				if c != nil {
					c.Release()
				}
			}
		}()
		for j := range cols {
			parts := make([]arrow.Array, len(batches))
			for i, b := range batches {
				parts[i] = b.Column(j)
			}
			c, err := array.Concatenate(parts, mem)
			if err != nil {
				return err
			}
			cols[j] = c
		}
		n := int64(cols[0].Len())
		all := array.NewRecordBatch(schema, cols, n)
		defer all.Release()
		indices, err := compute.SortIndicesRecordBatch(ctx, all, []compute.SortKey{{ColumnIndex: col,
			Order: compute.SortOrderAscending, NullPlacement: compute.SortNullsAtEnd}})
		if err != nil {
			return err
		}
		defer indices.Release()
		sortedCols := make([]arrow.Array, len(cols))
		for j, c := range cols {
			if sortedCols[j], err = compute.TakeArray(ctx, c, indices); err != nil {
				for _, s := range sortedCols[:j] {
					s.Release()
				}
				return err
			}
		}
		rec = array.NewRecordBatch(schema, sortedCols, n)
		for _, s := range sortedCols {
			s.Release()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: sorting the rows by time: %v", stage.ErrMalformed, err)
	}
	return rec, nil
}

// parquetSchema is the schema a table is written with: Parquet has no
// duration type, so a duration column (the transactions' latency) is
// written as int64 counts of its unit.
func parquetSchema(s *arrow.Schema) *arrow.Schema {
	fields := s.Fields()
	changed := false
	for i, f := range fields {
		if f.Type.ID() == arrow.DURATION {
			fields[i].Type = arrow.PrimitiveTypes.Int64
			changed = true
		}
	}
	if !changed {
		return s
	}
	md := s.Metadata()
	return arrow.NewSchema(fields, &md)
}

// asParquet views a batch in the schema parquetSchema made of its own,
// without copying: a duration and an int64 array hold the same bytes.
func asParquet(rec arrow.RecordBatch, schema *arrow.Schema) arrow.RecordBatch {
	if schema.Equal(rec.Schema()) {
		rec.Retain()
		return rec
	}
	cols := make([]arrow.Array, rec.NumCols())
	for i, c := range rec.Columns() {
		if c.DataType().ID() == arrow.DURATION {
			d := c.Data()
			nd := array.NewData(arrow.PrimitiveTypes.Int64, d.Len(), d.Buffers(), nil, d.NullN(), d.Offset())
			cols[i] = array.MakeFromData(nd)
			nd.Release()
		} else {
			c.Retain()
			cols[i] = c
		}
	}
	out := array.NewRecordBatch(schema, cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out
}

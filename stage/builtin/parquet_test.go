package builtin

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/stage"
)

// runAs runs a built-in on in as a run for block name does.
func runAs(t *testing.T, program string, args url.Values, name string, in []byte) []byte {
	t.Helper()
	b, err := registry().New(program, args)
	if err != nil {
		t.Fatal(err)
	}
	n, err := block.Parse(name)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := b.Run(context.Background(), stage.Input{Block: n}, bytes.NewReader(in), &out); err != nil {
		t.Fatalf("builtin:%s: %v", program, err)
	}
	return out.Bytes()
}

// readParquet reads a Parquet file as one table, and how many row groups
// it has.
func readParquet(t *testing.T, data []byte) (arrow.Table, int) {
	t.Helper()
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tbl, pf.NumRowGroups()
}

func arrowRows(t *testing.T, data []byte) int64 {
	t.Helper()
	f, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for i := 0; i < f.NumRecords(); i++ {
		rec, err := f.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		n += rec.NumRows()
	}
	return n
}

// TestParquetKeepsEveryRowInTimeOrder: DNS records (already in time
// order) and transactions (not: a row is written when its response or
// its timeout comes) become Parquet files with every row, the columns of
// the Arrow table, times in microseconds, rows sorted by time, ZSTD and
// statistics on.
func TestParquetKeepsEveryRowInTimeOrder(t *testing.T) {
	capture := dnsCapture(t, 8<<20)
	const name = "20250505-151105-00000007.lax.pcap"
	records := runAs(t, "dns", nil, name, capture)
	pairs := runAs(t, "dnspairs", nil, name, capture)
	// Header and question only: the sections are null lists.
	lean := runAs(t, "dns", url.Values{"sections": {"question"}}, name, capture)
	for _, c := range []struct {
		what  string
		arrow []byte
	}{{"records", records}, {"transactions", pairs}, {"records, question only", lean}} {
		t.Run(c.what, func(t *testing.T) {
			out := runAs(t, "parquet", url.Values{"row_group_rows": {"4096"}}, name, c.arrow)
			tbl, groups := readParquet(t, out)
			defer tbl.Release()
			if want := arrowRows(t, c.arrow); tbl.NumRows() != want || want < 10000 {
				t.Fatalf("%d rows in Parquet, %d in Arrow", tbl.NumRows(), want)
			}
			if groups < 3 {
				t.Errorf("%d row groups of at most 4096 rows for %d rows", groups, tbl.NumRows())
			}
			ts := tbl.Column(tbl.Schema().FieldIndices("time")[0])
			if u := ts.DataType().(*arrow.TimestampType); u.Unit != arrow.Microsecond || u.TimeZone != "UTC" {
				t.Errorf("time is %s; want timestamp[us, UTC]", ts.DataType())
			}
			last := arrow.Timestamp(-1 << 63)
			for _, chunk := range ts.Data().Chunks() {
				v := chunk.(*array.Timestamp)
				for i := 0; i < v.Len(); i++ {
					if v.Value(i) < last {
						t.Fatalf("row %d at %d after one at %d: not in time order", i, v.Value(i), last)
					}
					last = v.Value(i)
				}
			}
			pf, _ := file.NewParquetReader(bytes.NewReader(out))
			col, err := pf.MetaData().RowGroup(0).ColumnChunk(2) // time
			if err != nil {
				t.Fatal(err)
			}
			if col.Compression().String() != "ZSTD" {
				t.Errorf("compression %s", col.Compression())
			}
			if ok, _ := col.StatsSet(); !ok {
				t.Error("no statistics on the time column")
			}
		})
	}
	// The transactions arrived out of time order: the test saw the
	// sorting path, not only the streaming one.
	f, _ := ipc.NewFileReader(bytes.NewReader(pairs))
	rec, _ := f.RecordBatch(0)
	ts := rec.Column(2).(*array.Timestamp)
	inOrder := true
	for i := 1; i < ts.Len(); i++ {
		inOrder = inOrder && ts.Value(i) >= ts.Value(i-1)
	}
	if inOrder {
		t.Error("the transactions came in time order; the sorting path went untested")
	}
	f.Close()
}

// TestParquetSetsAsideHostileBlocks: a block that is not an Arrow file,
// or whose batches would decode past the stage's memory, is set aside as
// malformed, not crashed on.
func TestParquetSetsAsideHostileBlocks(t *testing.T) {
	b, _ := registry().New("parquet", nil)
	for what, in := range map[string][]byte{
		"not Arrow": []byte(strings.Repeat("garbage ", 100)),
		"a pcap":    dnsCapture(t, 1<<16),
		"cut in two": func() []byte {
			r := runAs(t, "dns", nil, "20250505-151105-00000007.lax.pcap", dnsCapture(t, 1<<20))
			return r[:len(r)/2]
		}(),
	} {
		if _, err := run(t, b, in); !errors.Is(err, stage.ErrMalformed) {
			t.Errorf("%s: %v; want it set aside as malformed", what, err)
		}
	}
	// Rows that take more memory than a run may: set aside, with why.
	records := runAs(t, "dns", nil, "20250505-151105-00000007.lax.pcap", dnsCapture(t, 4<<20))
	_, err := run(t, &Parquet{RowGroupRows: DefaultRowGroupRows, MaxMemory: 1 << 20}, records)
	if !errors.Is(err, stage.ErrMalformed) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("over its memory: %v; want it set aside, saying why", err)
	}
}

package laketable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/pcap/anon"
)

// A lake holds a file per block: with 5-minute blocks, 288 files a site
// a day. Compaction rewrites the files of a past day of a site into
// files of up to the target size, rows sorted by registered domain and
// name (so a query for one domain reads few pages), with a bloom filter
// on qname, and swaps them for the block files in one commit.
//
// A compacted file lists the block files it holds in a sidecar file
// beside it (NAME.sources, written and synced before the commit): a
// sync takes those blocks as in the table, and the compacted file stays
// when the queue's retention later lets its blocks go, so a lake queue
// may keep days while its table keeps years.

// DefaultTarget is the size compaction aims a file at (what Spark and
// Trino split on).
const DefaultTarget = 128 << 20

// Compacted is what one compaction of a table did.
type Compacted struct {
	Table          string
	Files, Written int // block files rewritten; files written
}

// compactedDir is the location of a table's compacted files: apart
// from the lake's, so a sync tells the two apart by path.
func (t *Tables) compactedDir(name string) string {
	return t.warehouse + "/" + Namespace + "/" + name + "/compacted"
}

// compactedFile is the location of a compacted file of a table, in the
// partition k (date=D/site=S), named after the first file it holds.
func (t *Tables) compactedFile(name, k, first, suffix string) string {
	return t.compactedDir(name) + "/" + k + "/" + strings.TrimSuffix(path.Base(first), ".parquet") + suffix
}

// sources reads the block files a compacted file holds, cached: the
// sidecars never change.
func (t *Tables) sources(loc string) ([]string, error) {
	t.mu.Lock()
	s, ok := t.sidecars[loc]
	t.mu.Unlock()
	if ok {
		return s, nil
	}
	raw, err := t.files.read(context.TODO(), loc+".sources")
	if err != nil {
		return nil, fmt.Errorf("the sources of compacted file %s: %w", loc, err)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("the sources of compacted file %s: %w", loc, err)
	}
	t.mu.Lock()
	t.sidecars[loc] = s
	t.mu.Unlock()
	return s, nil
}

// Compact compacts, in the table of a lake queue, the block files of
// each site's days before now's (UTC) into files of up to the target
// size. A day whose blocks arrive late is compacted again, into another
// file.
func (t *Tables) Compact(ctx context.Context, queue string, now time.Time) (Compacted, error) {
	name := TableName(queue)
	res := Compacted{Table: Namespace + "." + name}
	tbl, err := t.cat.LoadTable(ctx, table.Identifier{Namespace, name})
	if err != nil {
		return res, fmt.Errorf("table %s: %w", res.Table, err)
	}
	groups := map[string][]src{} // date=D/site=S → block files
	dir := t.compactedDir(name) + "/"
	today := now.UTC().Format(time.DateOnly)
	err = eachFile(ctx, tbl, func(f iceberg.DataFile) {
		p := f.FilePath()
		if strings.HasPrefix(p, dir) {
			return
		}
		day, k, ok := fileDay(p)
		if !ok || day >= today {
			return
		}
		groups[k] = append(groups[k], src{p, f.FileSizeBytes(), f.Count()})
	})
	if err != nil {
		return res, fmt.Errorf("table %s: listing its files: %w", res.Table, err)
	}
	var skipped []error
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		files := groups[k]
		slices.SortFunc(files, func(a, b src) int { return strings.Compare(a.loc, b.loc) })
		for _, run := range runs(files, t.target, t.memory) {
			// A run of one is left alone.
			if len(run) >= 2 {
				locs := make([]string, 0, len(run))
				for _, f := range run {
					locs = append(locs, f.loc)
				}
				out := t.compactedFile(name, k, locs[0], fmt.Sprintf("-%d.parquet", len(locs)))
				if err := t.rewrite(ctx, locs, locs, out, nil, nil); err != nil {
					// The other days go on: one that cannot be compacted
					// stays as it is, and is named.
					skipped = append(skipped, fmt.Errorf("table %s: compacting %s: %w", res.Table, k, err))
					continue
				}
				tx := tbl.NewTransaction()
				props := iceberg.Properties{"plumb.compacted-files": fmt.Sprint(len(locs))}
				if err := tx.ReplaceDataFiles(ctx, locs, []string{out}, props); err != nil {
					return res, fmt.Errorf("table %s: compacting %s: %w", res.Table, k, err)
				}
				if tbl, err = tx.Commit(ctx); err != nil {
					return res, fmt.Errorf("table %s: compacting %s: commit: %w", res.Table, k, err)
				}
				res.Files += len(locs)
				res.Written++
			}
		}
	}
	return res, errors.Join(skipped...)
}

// src is a data file of a table, its size and its rows.
type src struct {
	loc        string
	size, rows int64
}

// unionSchema is the columns of all the tables, in the order first met
// (a day's files written before and after its records gained a column):
// a column is nullable if it is in any table, or missing from any. A
// column of two types is an error naming both files.
func unionSchema(tables []arrow.Table, locs []string) (*arrow.Schema, error) {
	var fields []arrow.Field
	where := map[string]int{} // name → index in fields
	from := map[string]string{}
	for i, tbl := range tables {
		for _, f := range tbl.Schema().Fields() {
			f.Metadata = withoutKey(f.Metadata, "PARQUET:field_id")
			j, ok := where[f.Name]
			if !ok {
				if i > 0 {
					f.Nullable = true
				}
				where[f.Name], from[f.Name] = len(fields), locs[i]
				fields = append(fields, f)
				continue
			}
			if !arrow.TypeEqual(fields[j].Type, f.Type) {
				return nil, fmt.Errorf("column %s is %s in %s and %s in %s; the day is left as it is", f.Name, fields[j].Type, from[f.Name], f.Type, locs[i])
			}
			fields[j].Nullable = fields[j].Nullable || f.Nullable
		}
		for j := range fields {
			if len(tbl.Schema().FieldIndices(fields[j].Name)) == 0 {
				fields[j].Nullable = true
			}
		}
	}
	return arrow.NewSchema(fields, nil), nil
}

// conform is tbl with the columns of schema, in its order: those tbl
// lacks all null.
func conform(mem memory.Allocator, tbl arrow.Table, schema *arrow.Schema) arrow.Table {
	cols := make([]arrow.Column, schema.NumFields())
	for i, f := range schema.Fields() {
		if idx := tbl.Schema().FieldIndices(f.Name); len(idx) > 0 {
			cols[i] = *arrow.NewColumn(f, tbl.Column(idx[0]).Data())
			continue
		}
		nulls := array.MakeArrayOfNull(mem, f.Type, int(tbl.NumRows()))
		ch := arrow.NewChunked(f.Type, []arrow.Array{nulls})
		nulls.Release()
		cols[i] = *arrow.NewColumn(f, ch)
		ch.Release()
	}
	out := array.NewTable(schema, cols, tbl.NumRows())
	for i := range cols {
		cols[i].Release()
	}
	return out
}

// rowMemory is what a row takes in memory while its file is rewritten:
// its decoded columns (up to about 800 bytes for a signed zone's
// response with every section) and their sorted copy.
const rowMemory = 1600

// DefaultMemory is the memory a compaction or purge may hold at once.
const DefaultMemory = 1 << 30

// runs cuts files, in the order given, into runs of up to target bytes
// and up to memory bytes decoded (rowMemory a row; a table's metadata
// knows each file's rows, so this is checked before a file is read). A
// file over either alone is a run of its own.
func runs(files []src, target, memory int64) [][]src {
	var out [][]src
	for i := 0; i < len(files); {
		j, size, rows := i, int64(0), int64(0)
		for j < len(files) && (j == i || size+files[j].size <= target && (rows+files[j].rows)*rowMemory <= memory) {
			size += files[j].size
			rows += files[j].rows
			j++
		}
		out = append(out, files[i:j])
		i = j
	}
	return out
}

// overBudget says why a run cannot be rewritten within memory, or "".
func overBudget(run []src, memory int64) string {
	var rows int64
	for _, f := range run {
		rows += f.rows
	}
	if rows*rowMemory <= memory {
		return ""
	}
	return fmt.Sprintf("%s holds %d rows, about %d MiB in memory to rewrite, more than the %d MiB allowed; raise --iceberg-memory", run[0].loc, rows, rows*rowMemory>>20, memory>>20)
}

// SetMemory sets the memory a compaction or purge may hold at once
// (DefaultMemory unless set).
func (t *Tables) SetMemory(bytes int64) { t.memory = bytes }

// SetKeys sets the directory of the keys a table's plumb.privacy-key
// names: the server's --anon-keys, where builtin:anonymize finds them.
func (t *Tables) SetKeys(dir string) { t.keys = dir }

// KeyCheck says whether the owners of a lake queue's table may have its
// rows anonymized under an anonymization key, as builtin:anonymize's
// users must be granted theirs: the property can be set by anyone who
// reaches the catalog, and a key used without a grant maps addresses
// its owner chose to keep apart (a key oracle).
type KeyCheck func(queue, key string) error

// SetKeyCheck sets the check of each key a table's plumb.privacy-key
// names, before it is set through Plumb and before every purge; without
// one (a server without users) any key of the directory is used.
func (t *Tables) SetKeyCheck(c KeyCheck) { t.keyCheck = c }

// checkKey reads the key a table's policy names, and checks its owners
// may use it.
func (t *Tables) checkKey(queue, key string) error {
	if key == "" {
		return nil
	}
	if t.keyCheck != nil {
		if err := t.keyCheck(queue, key); err != nil {
			return err
		}
	}
	_, err := anon.ReadKey(t.keys, key)
	return err
}

// rewrite writes the rows of the Parquet files at locs, sorted, as one
// file at out, the columns named in nulled all null and each batch
// through transform when it is set, with its sidecar listing the lake's
// block files it holds (sources), both synced before it returns.
func (t *Tables) rewrite(ctx context.Context, locs, sources []string, out string, nulled []string, transform func(arrow.RecordBatch) (arrow.RecordBatch, error)) error {
	mem := memory.DefaultAllocator
	var recs []arrow.RecordBatch
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	var tables []arrow.Table
	defer func() {
		for _, tb := range tables {
			tb.Release()
		}
	}()
	for _, loc := range locs {
		src, err := t.files.open(ctx, loc)
		if err != nil {
			return err
		}
		f, err := file.NewParquetReader(src)
		if err != nil {
			src.Close()
			return fmt.Errorf("%s: %w", loc, err)
		}
		r, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, mem)
		if err != nil {
			f.Close()
			return err
		}
		tbl, err := r.ReadTable(ctx)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", loc, err)
		}
		tables = append(tables, tbl)
	}
	schema, err := unionSchema(tables, locs)
	if err != nil {
		return err
	}
	for _, tbl := range tables {
		wide := conform(mem, tbl, schema)
		tr := array.NewTableReader(wide, 64<<10)
		for tr.Next() {
			rec := tr.RecordBatch()
			if transform == nil {
				rec.Retain()
			} else if rec, err = transform(rec); err != nil {
				tr.Release()
				wide.Release()
				return fmt.Errorf("rewriting %s: %w", locs[0], err)
			}
			recs = append(recs, rec)
		}
		tr.Release()
		wide.Release()
	}
	all := array.NewTableFromRecords(schema, recs)
	defer all.Release()
	var keys []compute.SortKey
	for _, c := range []string{"registered_domain", "qname", "time"} {
		if len(schema.FieldIndices(c)) > 0 {
			keys = append(keys, compute.SortKey{ColumnIndex: schema.FieldIndices(c)[0], Order: compute.SortOrderAscending, NullPlacement: compute.SortNullsAtEnd})
		}
	}
	sorted := all
	if len(keys) > 0 && all.NumRows() > 0 {
		idx, err := compute.SortIndicesTable(ctx, all, keys)
		if err != nil {
			return err
		}
		defer idx.Release()
		d, err := compute.Take(ctx, *compute.DefaultTakeOptions(), compute.NewDatumWithoutOwning(all), compute.NewDatumWithoutOwning(idx))
		if err != nil {
			return err
		}
		defer d.Release()
		sorted = d.(*compute.TableDatum).Value
	}
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithStats(true),
		parquet.WithMaxRowGroupLength(1<<20),
		parquet.WithDictionaryDefault(true),
		parquet.WithBloomFilterEnabledFor("qname", true),
		parquet.WithCreatedBy("plumb"),
	)
	// Without the field ids the reader added: readers map the file's
	// columns to the table's by name, as they do the lake's own files.
	fields := withoutFieldIDs(schema.Fields())
	for i := range fields {
		if slices.Contains(nulled, fields[i].Name) {
			fields[i].Nullable = true
		}
	}
	plain := arrow.NewSchema(fields, nil)
	cols := make([]arrow.Column, sorted.NumCols())
	for i := range cols {
		data := sorted.Column(i).Data()
		if slices.Contains(nulled, fields[i].Name) {
			nulls := array.MakeArrayOfNull(mem, fields[i].Type, int(sorted.NumRows()))
			data = arrow.NewChunked(fields[i].Type, []arrow.Array{nulls})
			nulls.Release()
			defer data.Release()
		}
		cols[i] = *arrow.NewColumn(plain.Field(i), data)
	}
	plainTable := array.NewTable(plain, cols, sorted.NumRows())
	defer plainTable.Release()
	// The sidecar first: a compacted file is never without it.
	raw, err := json.Marshal(sources)
	if err != nil {
		return err
	}
	err = t.files.write(ctx, out+".sources", func(w io.Writer) error {
		_, err := w.Write(raw)
		return err
	})
	if err != nil {
		return err
	}
	return t.files.write(ctx, out, func(dst io.Writer) error {
		// Only the writer: the Parquet writer closes a sink it can.
		w, err := pqarrow.NewFileWriter(plain, struct{ io.Writer }{dst}, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
		if err != nil {
			return err
		}
		if err := w.WriteTable(plainTable, 1<<20); err != nil {
			w.Close()
			return err
		}
		return w.Close()
	})
}

// CompactAll compacts the table of every lake queue that has one.
func (t *Tables) CompactAll(ctx context.Context, now time.Time) ([]Compacted, error) {
	qs, err := t.db.Queues()
	if err != nil {
		return nil, err
	}
	var out []Compacted
	var errs []error
	for _, q := range qs {
		if !blob.IsLake(q.Name) {
			continue
		}
		res, err := t.Compact(ctx, q.Name, now)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
		}
		if res.Written > 0 {
			out = append(out, res)
		}
	}
	return out, errors.Join(errs...)
}

// withoutFieldIDs is fields without the Parquet field ids a reader put
// in their metadata, at every depth.
func withoutFieldIDs(fields []arrow.Field) []arrow.Field {
	out := make([]arrow.Field, len(fields))
	for i, f := range fields {
		f.Metadata = withoutKey(f.Metadata, "PARQUET:field_id")
		switch dt := f.Type.(type) {
		case *arrow.StructType:
			f.Type = arrow.StructOf(withoutFieldIDs(dt.Fields())...)
		case *arrow.ListType:
			f.Type = arrow.ListOfField(withoutFieldIDs([]arrow.Field{dt.ElemField()})[0])
		}
		out[i] = f
	}
	return out
}

func withoutKey(md arrow.Metadata, key string) arrow.Metadata {
	if md.FindKey(key) < 0 {
		return md
	}
	var keys, vals []string
	for i, k := range md.Keys() {
		if k != key {
			keys, vals = append(keys, k), append(vals, md.Values()[i])
		}
	}
	return arrow.NewMetadata(keys, vals)
}

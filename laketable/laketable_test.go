package laketable_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/laketable"
	"github.com/plumb-dev/plumb/pcap/anon"
	"github.com/plumb-dev/plumb/state"
)

// rows counts the rows a reader of the table gets.
func rows(t *testing.T, tb *laketable.Tables, queue string) int64 {
	t.Helper()
	_, n, _, err := tb.Sizes(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// lake is a metadata file and a directory store under a test's temp
// directory, on a clock the test moves, and put commits a lake block of
// testdata/edns-ecs.parquet (85 rows) for a site at a time.
func lake(t *testing.T, now *time.Time) (dir string, db *state.DB, store *blob.Dir, put func(seq uint64, site string, at time.Time)) {
	t.Helper()
	dir = t.TempDir()
	db, err := state.Open(filepath.Join(dir, "meta.db"), state.Options{Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store, err = blob.OpenDir(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	data, err := os.ReadFile("testdata/edns-ecs.parquet")
	if err != nil {
		t.Fatal(err)
	}
	put = func(seq uint64, site string, at time.Time) { putBlock(t, db, store, seq, site, at, data) }
	return dir, db, store, put
}

// openTables opens the Iceberg tables of the lake under dir, closed when
// the test ends.
func openTables(t *testing.T, dir string, db *state.DB, store blob.Store) *laketable.Tables {
	t.Helper()
	tb, err := laketable.Open(context.Background(), filepath.Join(dir, "iceberg"), db, store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// putBlock commits a lake block of data (a Parquet file) to dns.parquet.
func putBlock(t *testing.T, db *state.DB, store blob.Store, seq uint64, site string, at time.Time, data []byte) {
	t.Helper()
	n := block.Name{Time: at, Seq: seq, Instance: site, Queue: "dns.parquet"}
	sum := blob.Sum(sha256.Sum256(data))
	key := blob.BlockKey(n, sum)
	if err := store.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), sum); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CommitBlock(state.Block{Name: n.String(), Queue: n.Queue, Instance: site, Seq: seq, Time: n.Time,
		Size: int64(len(data)), SHA256: sum.String(), Key: key}); err != nil {
		t.Fatal(err)
	}
}

// TestTableFollowsTheQueue: the table holds each lake block's file once,
// whatever repeats (a sync again, a reopened catalog as after a crash),
// and drops a block's file when retention drops the block.
// testdata/edns-ecs.parquet is `plumb dns -o` of zeek's dns-edns-ecs.pcap
// (testdata/pcaps in the repository root): 85 rows.
func TestTableFollowsTheQueue(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	dir, db, store, putAt := lake(t, &now)
	put := func(seq uint64, site string) {
		putAt(seq, site, time.Date(2016, 5, 18, 0, 0, int(seq), 0, time.UTC))
	}
	tb, err := laketable.Open(ctx, filepath.Join(dir, "iceberg"), db, store)
	if err != nil {
		t.Fatal(err)
	}
	put(1, "lax")
	put(2, "lax")
	res, err := tb.SyncAll(ctx)
	if err != nil || len(res) != 1 || res[0].Table != "plumb.dns" || res[0].Added != 2 {
		t.Fatalf("first sync: %+v %v", res, err)
	}
	if n := rows(t, tb, "dns.parquet"); n != 170 {
		t.Fatalf("%d rows after two blocks of 85", n)
	}
	// Again, and from a catalog opened anew: nothing twice.
	if res, err := tb.Sync(ctx, "dns.parquet"); err != nil || res.Added+res.Dropped != 0 {
		t.Fatalf("a second sync changed the table: %+v %v", res, err)
	}
	tb.Close()
	if tb, err = laketable.Open(ctx, filepath.Join(dir, "iceberg"), db, store); err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	put(3, "ams")
	if res, err := tb.SyncAll(ctx); err != nil || len(res) != 1 || res[0].Added != 1 {
		t.Fatalf("after a reopen: %+v %v", res, err)
	}
	if n := rows(t, tb, "dns.parquet"); n != 255 {
		t.Fatalf("%d rows after three blocks of 85", n)
	}
	// A commit per sync adds up: old snapshots are expired, with their
	// manifest lists and manifests, and metadata files past the table's
	// previous-versions-max are deleted; the data files stay.
	tb.KeepSnapshots(2, 0)
	if err := tb.SetProperties(ctx, "dns.parquet", map[string]string{"write.metadata.previous-versions-max": "4"}); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(10); seq < 16; seq++ {
		put(seq, "nrt")
		if _, err := tb.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n := tb.Snapshots("dns.parquet")
	if n < 1 || n > 3 {
		t.Fatalf("%d snapshots kept; want at most 3 (2 and half again)", n)
	}
	meta := filepath.Join(dir, "iceberg", "warehouse", "plumb", "dns", "metadata")
	if lists, _ := filepath.Glob(filepath.Join(meta, "snap-*.avro")); len(lists) != n {
		t.Fatalf("%d manifest lists on disk for %d snapshots kept", len(lists), n)
	}
	if files, _ := filepath.Glob(filepath.Join(meta, "*.metadata.json")); len(files) > 5 {
		t.Fatalf("%d metadata files on disk; want the current one and at most 4 before it", len(files))
	}
	if n := rows(t, tb, "dns.parquet"); n != 9*85 {
		t.Fatalf("%d rows after expiring snapshots; nine blocks of 85 are in the queue", n)
	}
	// Retention drops the blocks older than an hour; the table follows.
	if err := db.SetPolicy("dns.parquet", state.Policy{MaxAge: time.Hour, DropUnconsumed: true}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Hour)
	put(4, "ams")
	if _, err := db.Expire("dns.parquet", 100); err != nil {
		t.Fatal(err)
	}
	res, err = tb.SyncAll(ctx)
	if err != nil || len(res) != 1 || res[0].Added != 1 || res[0].Dropped != 9 {
		t.Fatalf("after retention: %+v %v", res, err)
	}
	if n := rows(t, tb, "dns.parquet"); n != 85 {
		t.Fatalf("%d rows after retention left one block", n)
	}
}

// TestCompaction: a site's past day of block files becomes one file,
// its rows sorted by registered domain and name, swapped in one commit;
// today's files are left for later; a sync after it adds none of the
// compacted blocks again, and the compacted file stays when the queue's
// retention lets its blocks go.
func TestCompaction(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	dir, db, store, putAt := lake(t, &now)
	put := func(seq uint64, at time.Time) { putAt(seq, "lax", at) }
	tb := openTables(t, dir, db, store)
	day := time.Date(2016, 5, 18, 0, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= 5; seq++ {
		put(seq, day.Add(time.Duration(seq)*5*time.Minute))
	}
	put(6, now) // today's
	if _, err := tb.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := tb.Compact(ctx, "dns.parquet", now)
	if err != nil || res.Files != 5 || res.Written != 1 {
		t.Fatalf("compaction: %+v %v; want the day's 5 files in 1", res, err)
	}
	if files, rows, _, err := tb.Sizes(ctx, "dns.parquet"); err != nil || files != 2 || rows != 6*85 {
		t.Fatalf("after compaction: %d files, %d rows (%v); want the compacted one and today's, 510 rows", files, rows, err)
	}
	if r, err := tb.Sync(ctx, "dns.parquet"); err != nil || r.Added+r.Dropped != 0 {
		t.Fatalf("a sync after compaction changed the table: %+v %v", r, err)
	}
	if res, err := tb.Compact(ctx, "dns.parquet", now); err != nil || res.Written != 0 {
		t.Fatalf("a second compaction: %+v %v; want nothing left to do", res, err)
	}
	// The compacted file: rows sorted by registered domain, then name.
	matches, _ := filepath.Glob(filepath.Join(dir, "iceberg", "warehouse", "plumb", "dns", "compacted", "date=2016-05-18", "site=lax", "*.parquet"))
	if len(matches) != 1 {
		t.Fatalf("compacted files: %v", matches)
	}
	domains := column(t, matches[0], "registered_domain")
	if len(domains) != 5*85 || !slices.IsSorted(domains) {
		t.Fatalf("%d rows in the compacted file, sorted %v", len(domains), slices.IsSorted(domains))
	}
	// Retention lets the blocks go: the compacted rows stay in the table.
	if err := db.SetPolicy("dns.parquet", state.Policy{MaxAge: time.Hour, DropUnconsumed: true}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Hour)
	if _, err := db.Expire("dns.parquet", 100); err != nil {
		t.Fatal(err)
	}
	r, err := tb.Sync(ctx, "dns.parquet")
	if err != nil || r.Dropped != 1 || r.Added != 0 {
		t.Fatalf("after retention: %+v %v; want today's file dropped, the compacted kept", r, err)
	}
	if files, rows, _, _ := tb.Sizes(ctx, "dns.parquet"); files != 1 || rows != 5*85 {
		t.Fatalf("after retention: %d files, %d rows", files, rows)
	}
}

// column reads a string column of a Parquet file, nulls as "".
func column(t *testing.T, path, name string) []string {
	t.Helper()
	return values[string, *array.String](t, path, name)
}

// values reads a column of a Parquet file whose chunks are of array type
// A, nulls as T's zero.
func values[T any, A interface {
	Len() int
	Value(int) T
}](t *testing.T, path, name string) []T {
	t.Helper()
	tbl := readParquet(t, path)
	defer tbl.Release()
	var out []T
	for _, c := range tbl.Column(tbl.Schema().FieldIndices(name)[0]).Data().Chunks() {
		a := c.(A)
		for i := range a.Len() {
			out = append(out, a.Value(i))
		}
	}
	return out
}

// TestRetirement: a table's own TTL and privacy age, set as table
// properties, let its old days go (and a sync adds none of their blocks
// back, though the lake still holds them) and rewrite the days past the
// privacy age with every address null, the columns made optional; the
// compacted files no snapshot holds then leave the disk.
func TestRetirement(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	dir, db, store, putAt := lake(t, &now)
	tb := openTables(t, dir, db, store)
	old, recent := time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= 3; seq++ {
		putAt(seq, "lax", old.Add(time.Duration(seq)*5*time.Minute))
		putAt(10+seq, "lax", recent.Add(time.Duration(seq)*5*time.Minute))
	}
	putAt(20, "lax", now) // today's: stays as it is
	putAt(21, "ams", recent)
	if _, err := tb.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := tb.Compact(ctx, "dns.parquet", now); err != nil || res.Written != 2 {
		t.Fatalf("compaction: %+v %v; want a file for each of lax's past days", res, err)
	}
	if err := tb.SetProperties(ctx, "dns.parquet", map[string]string{laketable.PropTTL: "a month"}); err == nil {
		t.Fatal("a TTL of \"a month\" was taken")
	}
	if err := tb.SetProperties(ctx, "dns.parquet", map[string]string{laketable.PropTTL: "30d", laketable.PropPrivacyAfter: "2d"}); err != nil {
		t.Fatal(err)
	}
	tb.KeepSnapshots(1, 0)
	tb.DeleteUnkeptAt(0)
	res, err := tb.Retire(ctx, "dns.parquet", now)
	// Dropped: lax's compacted April day. Purged: lax's compacted May day
	// and ams's block file, into a file each. Removed: the two compacted
	// files no snapshot holds now.
	if err != nil || res.Dropped != 1 || res.Purged != 2 || res.Written != 2 || res.Removed != 2 {
		t.Fatalf("retirement: %+v %v", res, err)
	}
	if files, rows, _, err := tb.Sizes(ctx, "dns.parquet"); err != nil || files != 3 || rows != 5*85 {
		t.Fatalf("after retirement: %d files, %d rows (%v); want 3 files, 425 rows: May's 4 blocks and today's", files, rows, err)
	}
	if r, err := tb.Sync(ctx, "dns.parquet"); err != nil || r.Added+r.Dropped != 0 {
		t.Fatalf("a sync after retirement changed the table: %+v %v; the April blocks are gone for good", r, err)
	}
	private, _ := filepath.Glob(filepath.Join(dir, "iceberg", "warehouse", "plumb", "dns", "compacted", "date=*", "site=*", "*.parquet"))
	if len(private) != 2 {
		t.Fatalf("compacted files on disk: %v; want the two purged ones only", private)
	}
	for _, p := range private {
		for _, c := range []string{"src", "dst", "ecs_address", "edns_options"} {
			if n, nulls := nullCount(t, p, c); nulls != n || n == 0 {
				t.Errorf("%s: %d of %d %s null", p, nulls, n, c)
			}
		}
		if n, nulls := nullCount(t, p, "qname"); nulls != 0 || n == 0 {
			t.Errorf("%s: %d of %d qname null; only addresses go", p, nulls, n)
		}
	}
	if again, err := tb.Retire(ctx, "dns.parquet", now); err != nil || again.Dropped+again.Purged+again.Removed != 0 {
		t.Fatalf("a second retirement: %+v %v; want nothing left to do", again, err)
	}
}

// TestPrivacyKey: with plumb.privacy-key the purge rewrites the
// addresses with Crypto-PAn under the server's key, as
// builtin:anonymize?key=NAME does, instead of nulling them: every
// address is the key's mapping of the one it replaced, the client subnet
// keeps only its prefix, and a key the server lacks purges nothing.
func TestPrivacyKey(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	dir, db, store, putAt := lake(t, &now)
	tb := openTables(t, dir, db, store)
	putAt(1, "lax", time.Date(2025, 4, 1, 0, 5, 0, 0, time.UTC))
	putAt(2, "lax", time.Date(2025, 4, 1, 0, 10, 0, 0, time.UTC))
	if _, err := tb.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	tb.SetKeys(keys)
	set := map[string]string{laketable.PropPrivacyAfter: "2d", laketable.PropPrivacyKey: "lake"}
	if err := tb.SetProperties(ctx, "dns.parquet", set); err == nil || !strings.Contains(err.Error(), "no such key") || strings.Contains(err.Error(), keys) {
		t.Fatalf("a key the server lacks: %v; want refused, naming the key and not the directory", err)
	}
	key := bytes.Repeat([]byte{7}, 32)
	if err := os.WriteFile(filepath.Join(keys, "lake"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	// A key the table's owners were not granted is refused when set, and
	// a table that names it from outside purges nothing with it.
	granted := false
	tb.SetKeyCheck(func(queue, key string) error {
		if queue != "dns.parquet" || key != "lake" {
			t.Errorf("checked %s %s", queue, key)
		}
		if !granted {
			return errors.New("user bob may not use anonymization key lake")
		}
		return nil
	})
	if err := tb.SetProperties(ctx, "dns.parquet", set); err == nil || !strings.Contains(err.Error(), "may not use anonymization key lake") {
		t.Fatalf("a key the owners were not granted: %v; want refused", err)
	}
	granted = true
	if err := tb.SetProperties(ctx, "dns.parquet", set); err != nil {
		t.Fatal(err)
	}
	granted = false // the grant is taken back after the property was set
	if res, err := tb.Retire(ctx, "dns.parquet", now); err == nil || !strings.Contains(err.Error(), "may not use anonymization key lake") || res.Purged != 0 {
		t.Fatalf("retirement with a key no longer granted: %+v %v; want nothing purged, the grant named", res, err)
	}
	granted = true
	res, err := tb.Retire(ctx, "dns.parquet", now)
	if err != nil || res.Purged != 2 || res.Written != 1 {
		t.Fatalf("retirement: %+v %v", res, err)
	}
	purged, _ := filepath.Glob(filepath.Join(dir, "iceberg", "warehouse", "plumb", "dns", "compacted", "date=*", "site=*", "*-private.parquet"))
	if len(purged) != 1 {
		t.Fatalf("purged files: %v", purged)
	}
	a, err := anon.New(anon.Config{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	orig := "testdata/edns-ecs.parquet"
	prefixes := uint8Column(t, orig, "ecs_source_prefix")
	for _, c := range []string{"src", "dst", "ecs_address"} {
		var want []string
		for _, file := range []string{orig, orig} {
			for i, v := range column(t, file, c) {
				if v == "" {
					want = append(want, v)
					continue
				}
				y := a.Map(netip.MustParseAddr(v))
				if c == "ecs_address" {
					p, _ := y.Prefix(int(prefixes[i]))
					y = p.Addr()
				}
				want = append(want, y.String())
			}
		}
		got := column(t, purged[0], c)
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s after the purge: %d values, want the key's mapping of the %d there were", c, len(got), len(want))
		}
		if c != "ecs_address" && slices.Contains(got, column(t, orig, c)[0]) {
			t.Errorf("%s: an address of before the purge is still there", c)
		}
	}
	if n, nulls := nullCount(t, purged[0], "edns_options"); nulls != 0 || n != 170 {
		t.Errorf("edns_options: %d of %d null; with a key, options stay, the subnet's address anonymized", nulls, n)
	}
	if files, rows, _, err := tb.Sizes(ctx, "dns.parquet"); err != nil || files != 1 || rows != 170 {
		t.Fatalf("after the purge: %d files, %d rows (%v)", files, rows, err)
	}
}

// readParquet reads a Parquet file whole.
func readParquet(t *testing.T, path string) arrow.Table {
	t.Helper()
	f, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := r.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// uint8Column reads a uint8 column of a Parquet file (0 for null).
func uint8Column(t *testing.T, path, name string) []uint8 {
	t.Helper()
	return values[uint8, *array.Uint8](t, path, name)
}

// nullCount is how many rows a Parquet file's column has, and how many
// of them are null.
func nullCount(t *testing.T, path, name string) (n, nulls int) {
	t.Helper()
	tbl := readParquet(t, path)
	defer tbl.Release()
	col := tbl.Column(tbl.Schema().FieldIndices(name)[0])
	return col.Len(), col.NullN()
}

// TestSchemaWidens: a lake file with a column the table lacks (records
// that gained one) adds it to the table's schema, optional, in the
// commit that adds the file; the older files are not rewritten, and the
// table reads every row. Compaction then unites the day's two schemas.
func TestSchemaWidens(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	dir, db, store, put := lake(t, &now)
	tb := openTables(t, dir, db, store)
	day := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	put(1, "lax", day)
	if _, err := tb.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	before := tb.Columns("dns.parquet")
	if slices.Contains(before, "handshake_rtt?") {
		t.Fatalf("columns before: %v", before)
	}
	putBlock(t, db, store, 2, "lax", day.Add(time.Minute), withColumn(t, "testdata/edns-ecs.parquet", "handshake_rtt"))
	if res, err := tb.SyncAll(ctx); err != nil || len(res) != 1 || res[0].Added != 1 {
		t.Fatalf("sync of the wider file: %+v %v", res, err)
	}
	after := tb.Columns("dns.parquet")
	if len(after) != len(before)+1 || after[len(after)-1] != "handshake_rtt?" || !slices.Equal(after[:len(before)], before) {
		t.Fatalf("columns after: %v; want those before and handshake_rtt, optional", after)
	}
	if files, rows, _, err := tb.Sizes(ctx, "dns.parquet"); err != nil || files != 2 || rows != 2*85 {
		t.Fatalf("%d files, %d rows (%v)", files, rows, err)
	}
	// The day's two schemas compact into one file of the wider, the
	// older rows null in the new column.
	if res, err := tb.Compact(ctx, "dns.parquet", now); err != nil || res.Written != 1 || res.Files != 2 {
		t.Fatalf("compacting a day of two schemas: %+v %v", res, err)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "iceberg", "warehouse", "plumb", "dns", "compacted", "date=2025-05-01", "site=lax", "*.parquet"))
	if len(matches) != 1 {
		t.Fatalf("compacted files: %v", matches)
	}
	if n, nulls := nullCount(t, matches[0], "handshake_rtt"); n != 2*85 || nulls != 85 {
		t.Fatalf("handshake_rtt in the compacted file: %d rows, %d null; want 170, 85", n, nulls)
	}
	if files, rows, _, err := tb.Sizes(ctx, "dns.parquet"); err != nil || files != 1 || rows != 2*85 {
		t.Fatalf("after compaction: %d files, %d rows (%v)", files, rows, err)
	}
}

// withColumn is the Parquet file at path with a string column name added.
func withColumn(t *testing.T, path, name string) []byte {
	t.Helper()
	tbl := readParquet(t, path)
	defer tbl.Release()
	b := array.NewStringBuilder(memory.DefaultAllocator)
	for range tbl.NumRows() {
		b.Append("12ms")
	}
	col := b.NewArray()
	defer col.Release()
	field := arrow.Field{Name: name, Type: arrow.BinaryTypes.String}
	ch := arrow.NewChunked(field.Type, []arrow.Array{col})
	defer ch.Release()
	cols := make([]arrow.Column, 0, tbl.NumCols()+1)
	fields := make([]arrow.Field, 0, tbl.NumCols()+1)
	for i := range int(tbl.NumCols()) {
		cols = append(cols, *tbl.Column(i))
		fields = append(fields, tbl.Schema().Field(i))
	}
	cols = append(cols, *arrow.NewColumn(field, ch))
	fields = append(fields, field)
	wider := array.NewTable(arrow.NewSchema(fields, nil), cols, tbl.NumRows())
	defer wider.Release()
	var buf bytes.Buffer
	if err := pqarrow.WriteTable(wider, &buf, 1<<20, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRewritesWithinMemory: compaction and the privacy purge rewrite at
// most the rows their memory allows at once, counted from the table's
// metadata before a file is read; a run over it alone is named with the
// flag to raise, and the other days go on.
func TestRewritesWithinMemory(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	dir, db, store, putAt := lake(t, &now)
	tb := openTables(t, dir, db, store)
	day := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= 5; seq++ {
		putAt(seq, "lax", day.Add(time.Duration(seq)*5*time.Minute))
	}
	putAt(6, "ams", day)
	if _, err := tb.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	const rowMemory = 1600 // as laketable counts a row
	tb.SetMemory(2 * 85 * rowMemory)
	res, err := tb.Compact(ctx, "dns.parquet", now)
	if err != nil || res.Written != 2 || res.Files != 4 {
		t.Fatalf("compaction within two files' rows: %+v %v; want lax's 5 files as 2+2 (+1 left)", res, err)
	}
	// A purge whose every file is over the budget: named, nothing lost.
	tb.SetMemory(85*rowMemory - 1)
	if err := tb.SetProperties(ctx, "dns.parquet", map[string]string{laketable.PropPrivacyAfter: "2d"}); err != nil {
		t.Fatal(err)
	}
	r, err := tb.Retire(ctx, "dns.parquet", now)
	if err == nil || !strings.Contains(err.Error(), "raise --iceberg-memory") || r.Purged != 0 {
		t.Fatalf("a purge over the memory allowed: %+v, %v", r, err)
	}
	if _, rows, _, _ := tb.Sizes(ctx, "dns.parquet"); rows != 6*85 {
		t.Fatalf("%d rows after a refused purge; want 510", rows)
	}
	tb.SetMemory(laketable.DefaultMemory)
	if r, err := tb.Retire(ctx, "dns.parquet", now); err != nil || r.Purged != 4 || r.Written != 2 {
		t.Fatalf("the purge within the default memory: %+v %v; want lax's 3 files and ams's 1 purged, one file each", r, err)
	}
}

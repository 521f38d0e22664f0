package laketable_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/laketable"
	"github.com/plumb-dev/plumb/state"
)

// TestTablesInABucket keeps a table of a lake whose primary store is an
// S3 store (a real MinIO): its metadata, and the files compaction and the privacy purge
// write, go into the store's bucket under plumb-iceberg/, beside the
// lake's block files, so that a query engine reaching the bucket
// reaches the table; the store's listing (what fsck sees) leaves them
// out; a reopened catalog finds the table whole.
func TestTablesInABucket(t *testing.T) {
	ctx := context.Background()
	m := testenv.StartMinIO(t)
	bucket, err := blob.NewS3(ctx, blob.S3Config{Endpoint: m.Endpoint, Bucket: "lake", AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	db, err := state.Open(filepath.Join(dir, "meta.db"), state.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// As the server has it: the S3 store is the primary of its stores.
	store := blob.NewMulti(db, "primary", bucket.String(), bucket)
	data, err := os.ReadFile("testdata/edns-ecs.parquet")
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= 4; seq++ {
		putBlock(t, db, store, seq, "lax", day.Add(time.Duration(seq)*5*time.Minute), data)
	}
	putBlock(t, db, store, 5, "lax", now, data) // today's
	tb, err := laketable.Open(ctx, filepath.Join(dir, "iceberg"), db, store)
	if err != nil {
		t.Fatal(err)
	}
	if w := tb.Warehouse(); w != "s3://lake/plumb-iceberg/warehouse" {
		t.Fatalf("warehouse %s", w)
	}
	if res, err := tb.SyncAll(ctx); err != nil || len(res) != 1 || res[0].Added != 5 {
		t.Fatalf("sync: %+v %v", res, err)
	}
	if res, err := tb.Compact(ctx, "dns.parquet", now); err != nil || res.Files != 4 || res.Written != 1 {
		t.Fatalf("compaction: %+v %v; want the day's 4 files in 1", res, err)
	}
	if files, rows, _, err := tb.Sizes(ctx, "dns.parquet"); err != nil || files != 2 || rows != 5*85 {
		t.Fatalf("after compaction: %d files, %d rows (%v); want 2 files, 425 rows", files, rows, err)
	}
	// The purge reads the compacted file back from the bucket and
	// writes it again without addresses; the file it replaced is deleted.
	if err := tb.SetProperties(ctx, "dns.parquet", map[string]string{laketable.PropPrivacyAfter: "2d"}); err != nil {
		t.Fatal(err)
	}
	tb.KeepSnapshots(1, 0)
	tb.DeleteUnkeptAt(0)
	if res, err := tb.Retire(ctx, "dns.parquet", now); err != nil || res.Purged != 1 || res.Written != 1 || res.Removed != 1 {
		t.Fatalf("retirement: %+v %v; want the compacted day purged and the file it replaced deleted", res, err)
	}
	var tables, metadata, compacted []string
	err = bucket.Walk(ctx, blob.TablesPrefix, func(i blob.Info) error {
		tables = append(tables, i.Key)
		switch {
		case strings.HasSuffix(i.Key, ".metadata.json"):
			metadata = append(metadata, i.Key)
		case strings.HasSuffix(i.Key, ".parquet"):
			compacted = append(compacted, i.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(metadata) == 0 || len(compacted) != 1 || !strings.HasPrefix(compacted[0], "plumb-iceberg/warehouse/plumb/dns/compacted/date=2025-05-01/site=lax/") ||
		!strings.HasSuffix(compacted[0], "-private.parquet") {
		t.Fatalf("in the bucket: metadata %v, compacted %v; want the purged file only", metadata, compacted)
	}
	err = bucket.List(ctx, func(i blob.Info) error {
		if strings.HasPrefix(i.Key, blob.TablesPrefix) {
			t.Errorf("the store lists %s, a file of the tables: fsck would take it for an orphan", i.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// From a catalog opened anew, as after a restart: nothing to add.
	tb.Close()
	if tb, err = laketable.Open(ctx, filepath.Join(dir, "iceberg"), db, store); err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if res, err := tb.Sync(ctx, "dns.parquet"); err != nil || res.Added+res.Dropped != 0 {
		t.Fatalf("a sync after a reopen changed the table: %+v %v", res, err)
	}
	if files, rows, _, err := tb.Sizes(ctx, "dns.parquet"); err != nil || files != 2 || rows != 5*85 {
		t.Fatalf("after the purge: %d files, %d rows (%v); want 2 files, 425 rows", files, rows, err)
	}
}

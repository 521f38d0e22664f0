package laketable_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/laketable"
	"github.com/plumb-dev/plumb/state"
)

// rows counts the rows a reader of the table gets.
func rows(t *testing.T, tb *laketable.Tables, queue string) int64 {
	t.Helper()
	_, n, err := tb.Files(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTableFollowsTheQueue: the table holds each lake block's file once,
// whatever repeats (a sync again, a reopened catalog as after a crash),
// and drops a block's file when retention drops the block.
// testdata/edns-ecs.parquet is `plumb dns -o` of zeek's dns-edns-ecs.pcap
// (testdata/pcaps in the repository root): 85 rows.
func TestTableFollowsTheQueue(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	db, err := state.Open(filepath.Join(dir, "meta.db"), state.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := blob.OpenDir(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	data, err := os.ReadFile("testdata/edns-ecs.parquet")
	if err != nil {
		t.Fatal(err)
	}
	put := func(seq uint64, site string) {
		n := block.Name{Time: time.Date(2016, 5, 18, 0, 0, int(seq), 0, time.UTC), Seq: seq, Instance: site, Queue: "dns.parquet"}
		sum := blob.Sum(sha256.Sum256(data))
		key := blob.BlockKey(n, sum)
		if err := store.Put(ctx, key, bytesReader(data), int64(len(data)), sum); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.CommitBlock(state.Block{Name: n.String(), Queue: n.Queue, Instance: site, Seq: seq, Time: n.Time,
			Size: int64(len(data)), SHA256: sum.String(), Key: key}); err != nil {
			t.Fatal(err)
		}
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
	// A commit per sync adds up: old snapshots are expired, the files
	// stay.
	tb.KeepSnapshots(2, 0)
	for seq := uint64(10); seq < 16; seq++ {
		put(seq, "nrt")
		if _, err := tb.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := tb.Snapshots("dns.parquet"); n < 1 || n > 3 {
		t.Fatalf("%d snapshots kept; want at most 3 (2 and half again)", n)
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

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

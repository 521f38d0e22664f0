package retention_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/retention"
	"github.com/plumb-dev/plumb/state"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestSweepDeletesExpiredKeepsOwed: with a fake clock, a sweep deletes the
// metadata and blobs of blocks past their queue's age that nobody owes,
// and keeps the one a subscriber has not read.
func TestSweepDeletesExpiredKeepsOwed(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	db, err := state.Open(filepath.Join(dir, "meta.db"), state.Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := blob.OpenDir(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var keys []string
	for seq := uint64(1); seq <= 3; seq++ {
		n := block.Name{Time: c.t, Seq: seq, Instance: "lax", Queue: "pcap.sz"}
		data := []byte(fmt.Sprint("block ", seq))
		sum := blob.Sum(sha256.Sum256(data))
		key := blob.BlockKey(n, sum)
		if err := store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), sum); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.CommitBlock(state.Block{Name: n.String(), Queue: n.Queue, Instance: n.Instance, Seq: seq, Time: n.Time,
			Size: int64(len(data)), SHA256: sum.String(), Key: key}); err != nil {
			t.Fatal(err)
		}
		if seq == 2 {
			db.EnsureGroup("pcap.sz", "ids", state.Latest) // owes block 3 only
		}
		keys = append(keys, key)
	}
	db.SetPolicy("pcap.sz", state.Policy{Retention: "1h", MaxAge: time.Hour})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if rep, err := retention.Sweep(ctx, db, store, log); err != nil || rep.Deleted != 0 {
		t.Fatalf("sweep before the hour: %+v %v", rep, err)
	}
	c.t = c.t.Add(time.Hour)
	rep, err := retention.Sweep(ctx, db, store, log)
	if err != nil || rep.Deleted != 2 || rep.Kept != 1 || rep.Bytes != 14 {
		t.Fatalf("sweep after the hour: %+v %v; want 2 deleted (14 bytes), 1 kept", rep, err)
	}
	for i, key := range keys {
		_, err := store.Stat(ctx, key)
		if gone := errors.Is(err, blob.ErrNotFound); gone != (i < 2) {
			t.Errorf("blob of block %d: %v", i+1, err)
		}
	}
	if b, ok, _ := db.Reserve("pcap.sz", "ids", "r", time.Minute); !ok || b.Seq != 3 {
		t.Errorf("the owed block is not delivered: %+v %v", b, ok)
	}
}

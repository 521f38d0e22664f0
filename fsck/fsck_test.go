package fsck_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/fsck"
	"github.com/plumb-dev/plumb/state"
)

// TestFindAndRepair plants an old orphan blob, a young one (an upload
// whose metadata has not committed yet), a missing blob and a corrupt one,
// and checks that fsck finds each, that repair deletes only the old
// orphan and marks the two broken blocks lost for their subscriber, and
// that a second pass is clean.
func TestFindAndRepair(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := state.Open(filepath.Join(dir, "meta.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storeDir := filepath.Join(dir, "store")
	store, err := blob.OpenDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	at := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	put := func(seq uint64, commit bool) string {
		n := block.Name{Time: at, Seq: seq, Instance: "lax", Queue: "pcap.sz"}
		data := []byte(fmt.Sprintf("block %d bytes", seq))
		sum := blob.Sum(sha256.Sum256(data))
		key := blob.BlockKey(n, sum)
		if err := store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), sum); err != nil {
			t.Fatal(err)
		}
		if commit {
			if _, _, err := db.CommitBlock(state.Block{Name: n.String(), Queue: n.Queue, Instance: n.Instance, Seq: seq, Time: n.Time,
				Size: int64(len(data)), SHA256: sum.String(), Key: key}); err != nil {
				t.Fatal(err)
			}
		}
		return key
	}
	put(1, true)
	db.EnsureGroup("pcap.sz", "ids", state.Earliest)
	put(2, true)
	missing := put(3, true)
	corrupt := put(4, true)
	oldOrphan := put(5, false)
	put(6, false) // young orphan
	os.Remove(filepath.Join(storeDir, "blobs", missing))
	os.WriteFile(filepath.Join(storeDir, "blobs", corrupt), []byte("block 4 BYTES"), 0o640) // same size, other bytes
	past := time.Now().Add(-2 * time.Hour)
	os.Chtimes(filepath.Join(storeDir, "blobs", oldOrphan), past, past)

	rep, err := fsck.Check(ctx, db, store, fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Blocks != 4 || rep.Blobs != 5 || len(rep.Missing) != 1 || len(rep.Corrupt) != 0 || rep.Orphans != 1 || rep.Young != 1 {
		t.Fatalf("report without --verify: %s", rep)
	}
	rep, err = fsck.Check(ctx, db, store, fsck.Options{Verify: true})
	if err != nil || len(rep.Corrupt) != 1 || rep.Corrupt[0] != "20250505-000000-00000004.lax.pcap.sz" || rep.OrphansDeleted != 0 {
		t.Fatalf("report with --verify: %s, %v", rep, err)
	}
	rep, err = fsck.Check(ctx, db, store, fsck.Options{Verify: true, Repair: true})
	if err != nil || rep.OrphansDeleted != 1 || rep.MarkedLost != 2 {
		t.Fatalf("repair: %s, %v", rep, err)
	}
	if _, err := store.Stat(ctx, oldOrphan); err == nil {
		t.Error("the old orphan blob is still there")
	}
	lost, _ := db.LostBlocks("pcap.sz", "ids")
	if len(lost) != 2 || lost[0].Why != "fsck: blob missing" || lost[1].Why != "fsck: blob sha256 "+lost[1].Why[len("fsck: blob sha256 "):] {
		t.Errorf("the subscriber was not told: %+v", lost)
	}
	if q, _ := db.Queue("pcap.sz"); q.Blocks != 2 {
		t.Errorf("queue holds %d blocks; want 2", q.Blocks)
	}
	rep, err = fsck.Check(ctx, db, store, fsck.Options{Verify: true})
	if err != nil || !rep.Clean() || rep.Young != 1 {
		t.Errorf("second pass: %s, %v", rep, err)
	}
}

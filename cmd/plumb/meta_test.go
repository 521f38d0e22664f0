package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/metakv"
	"github.com/plumb-dev/plumb/state"
)

// TestMetaCopy moves a server's metadata from its bbolt file to
// PostgreSQL with plumb meta-copy: the blocks are there, and a copy from
// a file not there is refused by name.
func TestMetaCopy(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "meta.db")
	db, err := state.Open(file, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for seq := uint64(1); seq <= 3; seq++ {
		n := block.Name{Time: time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC), Seq: seq, Instance: "lax", Queue: "pcap"}
		if _, _, err := db.CommitBlock(state.Block{Name: n.String(), Queue: n.Queue, Instance: n.Instance, Seq: seq, Time: n.Time, Size: 10, SHA256: "aa", Key: "k"}); err != nil {
			t.Fatal(err)
		}
		names = append(names, n.String())
	}
	id := db.ID()
	db.Close()
	url := testenv.StartPostgres(t)
	if url == "" {
		return
	}
	if _, stderr, code := plumbExec(t, "meta-copy", file, url); code != 0 || !strings.Contains(stderr, "start the server with --meta") {
		t.Fatalf("meta-copy: exit %d: %s", code, stderr)
	}
	kv, err := metakv.OpenPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := state.OpenKV(ctx, kv, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	if pg.ID() != id {
		t.Errorf("the metadata's identity %s became %s: the stores would not know it", id, pg.ID())
	}
	bs, err := pg.Blocks("pcap", 0, 10)
	if err != nil || len(bs) != 3 || bs[0].Name != names[0] || bs[2].Name != names[2] {
		t.Fatalf("blocks in PostgreSQL: %+v %v", bs, err)
	}
	if _, stderr, code := plumbExec(t, "meta-copy", filepath.Join(t.TempDir(), "nope.db"), url); code == 0 || !strings.Contains(stderr, "nope.db") {
		t.Fatalf("a copy from a file not there: exit %d: %s", code, stderr)
	}
}

package state

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/block"
)

func TestStreamCursor(t *testing.T) {
	db, c := open(t)
	for _, seq := range []uint64{1, 2, 4} {
		db.CommitBlock(mk(seq, "s"))
	}
	cur, err := db.OpenCursor("pcap.sz", "lax", "ids", "")
	if err != nil || cur.Next != 1 {
		t.Fatalf("open = %+v, %v", cur, err)
	}
	if p, _ := db.PeekNext("pcap.sz", "lax", "ids"); !p.Present || p.Gap != 1 || p.Next != 1 {
		t.Fatalf("peek = %+v", p)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		b, err := db.ProcessNext("pcap.sz", "lax", "ids")
		if err != nil || b.Seq != seq {
			t.Fatalf("process %d = %+v, %v", seq, b, err)
		}
		if _, err := db.Commit("pcap.sz", "lax", "ids", seq); err != nil {
			t.Fatal(err)
		}
	}
	c.t = c.t.Add(time.Minute)
	p, _ := db.PeekNext("pcap.sz", "lax", "ids")
	if p.Present || p.Gap != 2 || p.Next != 3 || p.Since != time.Minute {
		t.Fatalf("peek at a hole = %+v; want next 3 absent, gap 2, a minute since", p)
	}
	if _, err := db.ProcessNext("pcap.sz", "lax", "ids"); !errors.Is(err, ErrNotPresent) {
		t.Fatalf("process of a missing block = %v", err)
	}
	if _, err := db.PutState("pcap.sz", "lax", "ids", map[string]string{"packets": "42"}); err != nil {
		t.Fatal(err)
	}
	// A checkpoint at a block before the cursor (what a reader wrote of
	// what it was sent) is kept; one past the cursor is refused.
	if cur, err := db.SaveCheckpointAt("pcap.sz", "lax", "ids", 2, nil); err != nil || cur.Checkpoint.Next != 2 {
		t.Fatalf("checkpoint at 2 = %+v, %v", cur.Checkpoint, err)
	}
	if _, err := db.SaveCheckpointAt("pcap.sz", "lax", "ids", 4, nil); err == nil || !strings.Contains(err.Error(), "past the cursor") {
		t.Fatalf("checkpoint past the cursor: %v", err)
	}
	if _, err := db.SaveCheckpoint("pcap.sz", "lax", "ids", nil); err != nil {
		t.Fatal(err)
	}
	cur, err = db.Skip("pcap.sz", "lax", "ids")
	if err != nil || cur.Next != 4 || len(cur.Skipped) != 1 {
		t.Fatalf("skip = %+v, %v", cur, err)
	}
	if _, err := db.Skip("pcap.sz", "lax", "ids"); !errors.Is(err, ErrPresent) {
		t.Fatalf("skip of a present block = %v", err)
	}
	// The skipped block arrives: reported late, once, not inserted.
	db.CommitBlock(mk(3, "s"))
	p, _ = db.PeekNext("pcap.sz", "lax", "ids")
	if p.Gap != -1 || len(p.Late) != 1 || p.Late[0] != 3 || p.Next != 4 {
		t.Fatalf("peek after a late block = %+v", p)
	}
	if p, _ = db.PeekNext("pcap.sz", "lax", "ids"); len(p.Late) != 0 || p.Gap != 1 {
		t.Fatalf("late reported twice: %+v", p)
	}
	db.PutState("pcap.sz", "lax", "ids", map[string]string{"packets": "99"})
	// A restart from the checkpoint resumes at 3 with its state.
	cur, err = db.OpenCursor("pcap.sz", "lax", "ids", "checkpoint")
	if err != nil || cur.Next != 3 || cur.State["packets"] != "42" {
		t.Fatalf("from checkpoint = %+v, %v", cur, err)
	}
	big := map[string]string{"x": string(make([]byte, MaxStreamState+1))}
	if _, err := db.PutState("pcap.sz", "lax", "ids", big); err == nil {
		t.Error("oversized state accepted")
	}
	if _, err := db.PeekNext("pcap.sz", "lax", "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown consumer = %v", err)
	}
}

// TestStreamConsumersHoldBlocks: a block every group is done with stays
// while a stream consumer of its site has not checkpointed past it.
func TestStreamConsumersHoldBlocks(t *testing.T) {
	db, _ := open(t)
	db.EnsureGroup("pcap.sz", "g", Earliest)
	b1, _, _ := db.CommitBlock(mk(1, "a"))
	db.CommitBlock(mk(2, "b"))
	db.OpenCursor("pcap.sz", "lax", "ids", "earliest")
	if _, err := db.Ack("pcap.sz", "g", []block.ID{b1.ID()}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := db.DeleteConsumed("pcap.sz", b1.Serial); err != nil || ok {
		t.Fatalf("deleted a block a stream consumer has not passed: %v %v", ok, err)
	}
	db.CheckpointAt("pcap.sz", "lax", "ids", 2, nil, 0, 0)
	if _, ok, err := db.DeleteConsumed("pcap.sz", b1.Serial); err != nil || !ok {
		t.Fatalf("block 1 not deleted once checkpointed past: %v %v", ok, err)
	}
}

// TestReplayKeepsBlocksBehindTheCheckpoint: with replay limits, a stream
// stage's checkpoints release only the blocks beyond them.
func TestReplayKeepsBlocksBehindTheCheckpoint(t *testing.T) {
	db, _ := open(t)
	db.EnsureGroup("pcap.sz", "stage", Earliest)
	for seq := uint64(1); seq <= 8; seq++ {
		b := mk(seq, "x")
		b.Time = b.Time.Add(time.Duration(seq) * time.Minute)
		db.CommitBlock(b)
	}
	db.OpenCursor("pcap.sz", "lax", "stage", "1")
	seqs := func(bs []Block) (out []uint64) {
		for _, b := range bs {
			out = append(out, b.Seq)
		}
		return out
	}
	// Two blocks kept behind: a checkpoint at 5 releases 1 and 2.
	rel, err := db.CheckpointAt("pcap.sz", "lax", "stage", 5, nil, 2, 0)
	if err != nil || fmt.Sprint(seqs(rel)) != "[1 2]" {
		t.Fatalf("released %v, %v", seqs(rel), err)
	}
	// Three minutes of event time kept: a checkpoint at 8 (block 7 at
	// minute 7) keeps 4..7, releases 3.
	rel, _ = db.CheckpointAt("pcap.sz", "lax", "stage", 8, nil, 0, 3*time.Minute)
	if fmt.Sprint(seqs(rel)) != "[3]" {
		t.Fatalf("released %v by time", seqs(rel))
	}
	cur, _ := db.GetCursor("pcap.sz", "lax", "stage")
	if cur.Checkpoint.Released != 4 {
		t.Errorf("released up to %d, want 4", cur.Checkpoint.Released)
	}
}

// TestCheckpointPastTheBlockHandedOut: a stream ticket commits a block
// after sending it, so its reader may have written the block, and
// checkpointed past it, first. That checkpoint, one past a block handed
// out, is kept; one further is refused, and so is one past a block not
// handed out.
func TestCheckpointPastTheBlockHandedOut(t *testing.T) {
	db, _ := open(t)
	for _, seq := range []uint64{1, 2, 3} {
		db.CommitBlock(mk(seq, "s"))
	}
	if _, err := db.OpenCursor("pcap.sz", "lax", "ids", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SaveCheckpointAt("pcap.sz", "lax", "ids", 2, nil); err == nil || !strings.Contains(err.Error(), "past the cursor") {
		t.Fatalf("checkpoint past a block not handed out: %v", err)
	}
	if b, err := db.ProcessNext("pcap.sz", "lax", "ids"); err != nil || b.Seq != 1 {
		t.Fatalf("process = %+v, %v", b, err)
	}
	if _, err := db.SaveCheckpointAt("pcap.sz", "lax", "ids", 3, nil); err == nil || !strings.Contains(err.Error(), "past the cursor") {
		t.Fatalf("checkpoint two past the block handed out: %v", err)
	}
	cur, err := db.SaveCheckpointAt("pcap.sz", "lax", "ids", 2, nil)
	if err != nil || cur.Checkpoint.Next != 2 {
		t.Fatalf("checkpoint past the block handed out = %+v, %v", cur.Checkpoint, err)
	}
	if cur.Next != 1 || !cur.Pending {
		t.Fatalf("the cursor moved with the checkpoint: %+v", cur)
	}
	if _, err := db.Commit("pcap.sz", "lax", "ids", 1); err != nil {
		t.Fatalf("the stream's commit after its reader's checkpoint: %v", err)
	}
}

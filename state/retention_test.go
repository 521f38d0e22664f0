package state

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/block"
)

// TestExpireByAge: with a fake clock, blocks past their queue's age are
// gone from reads at once and deleted by Expire, except those a
// subscriber still owes; sequence numbers of deleted blocks stay used.
func TestExpireByAge(t *testing.T) {
	db, c := open(t)
	start := c.t
	for i := uint64(1); i <= 4; i++ {
		if _, _, err := db.CommitBlock(mk(i, "s")); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if _, err := db.EnsureGroup("pcap.sz", "g", Earliest); err != nil {
				t.Fatal(err)
			}
		}
		c.t = c.t.Add(time.Hour)
	}
	// g is done with 1 and 3, still owes 2 and 4.
	if _, err := db.Ack("pcap.sz", "g", []block.ID{mk(1, "").ID(), mk(3, "").ID()}); err != nil {
		t.Fatal(err)
	}
	if err := db.SetPolicy("pcap.sz", Policy{Retention: "2h", MaxAge: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Now start+4h: blocks 1, 2 (arrived at +0h, +1h) are past 2h; 3 is at 2h exactly.
	if _, err := db.Lookup(mk(1, "").ID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an expired, consumed block is still readable: %v", err)
	}
	if _, err := db.Lookup(mk(2, "").ID()); err != nil {
		t.Fatalf("an expired block still owed is gone: %v", err)
	}
	list := func() string {
		bs, err := db.Blocks("pcap.sz", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, b := range bs {
			seqs = append(seqs, b.Seq)
		}
		return fmt.Sprint(seqs)
	}
	if got := list(); got != "[2 4]" {
		t.Fatalf("visible blocks = %s; want [2 4] (1 and 3 expired and consumed)", got)
	}
	res, err := db.Expire("pcap.sz", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deleted) != 2 || res.Deleted[0].Seq != 1 || res.Deleted[1].Seq != 3 || res.Kept != 1 || len(res.Lost) != 0 {
		t.Fatalf("Expire = %+v; want 1 and 3 deleted, 2 kept", res)
	}
	if q, _ := db.Queue("pcap.sz"); q.Blocks != 2 || q.Bytes != 20 {
		t.Fatalf("queue after expiry = %+v", q)
	}
	// The subscriber finishes 2 and 4; time passes; all go, but an agent
	// asking where to go on still hears 4.
	db.Ack("pcap.sz", "g", []block.ID{mk(2, "").ID(), mk(4, "").ID()})
	c.t = start.Add(10 * time.Hour)
	if res, _ := db.Expire("pcap.sz", 100); len(res.Deleted) != 2 {
		t.Fatalf("second Expire = %+v", res)
	}
	if seq, found, err := db.LastSeq("pcap.sz", "lax"); err != nil || !found || seq != 4 {
		t.Fatalf("LastSeq after every block expired = %d %v %v; want 4", seq, found, err)
	}
	if got := list(); got != "[]" {
		t.Fatalf("blocks left: %s", got)
	}
}

// TestExpireDropUnconsumedAndBytes: a byte cap keeps the newest blocks;
// with drop-unconsumed an owed block goes too and its subscriber is told.
func TestExpireDropUnconsumedAndBytes(t *testing.T) {
	db, _ := open(t)
	db.CommitBlock(mk(1, "s"))
	db.EnsureGroup("pcap.sz", "slow", Earliest)
	for i := uint64(2); i <= 5; i++ {
		db.CommitBlock(mk(i, "s"))
	}
	// Each block is 10 bytes: a 30-byte cap keeps 3, 4, 5.
	db.SetPolicy("pcap.sz", Policy{Retention: "30B", MaxBytes: 30})
	if res, _ := db.Expire("pcap.sz", 100); len(res.Deleted) != 0 || res.Kept != 2 {
		t.Fatalf("owed blocks over the cap: %+v; want both kept", res)
	}
	db.SetPolicy("pcap.sz", Policy{Retention: "30B", MaxBytes: 30, DropUnconsumed: true})
	res, err := db.Expire("pcap.sz", 100)
	if err != nil || len(res.Deleted) != 2 || len(res.Lost) != 2 || res.Lost[0].Group != "slow" {
		t.Fatalf("drop-unconsumed = %+v, %v", res, err)
	}
	lost, err := db.LostBlocks("pcap.sz", "slow")
	if err != nil || len(lost) != 2 || lost[0].Block != mk(1, "").Name || lost[1].Block != mk(2, "").Name {
		t.Fatalf("LostBlocks = %+v, %v", lost, err)
	}
	// The lost blocks are never handed out; the kept ones are.
	var got []uint64
	for {
		b, ok, err := db.Reserve("pcap.sz", "slow", "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, b.Seq)
	}
	if fmt.Sprint(got) != "[3 4 5]" {
		t.Fatalf("reserved after the drop: %v", got)
	}
	gs, _ := db.Groups("pcap.sz")
	if gs[0].Lost != 2 {
		t.Fatalf("group stats %+v; want 2 lost", gs[0])
	}
}

package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
)

// TestLeaseExpiresAndLateCommitIsRefused: a worker that stops
// heartbeating (cut off) loses its lease; the block is leased again to
// another worker, whose commit publishes it; the first worker's late
// commit is refused, so the output exists once.
func TestLeaseExpiresAndLateCommitIsRefused(t *testing.T) {
	r := newRig(t, engine.Config{RemoteOnly: true, LeaseTTL: 300 * time.Millisecond})
	r.put("raw", 1, []byte("warm-up"))
	r.mustAccept(`
job: up
from: earliest
stages:
  - {name: up, inputs: [raw], program: [tr, a-z, A-Z], outputs: [raw.upper], retention: forever}
`)
	ctx := context.Background()
	hello := func(id string) flight.Hello { return flight.Hello{Worker: id, Host: "h", Slots: 1} }
	var l1 flight.Lease
	r.wait("a lease for worker 1", func() bool {
		var ok bool
		l1, ok, _ = r.eng.Lease(ctx, hello("w1"))
		return ok
	})
	if l1.Stage != "up/up" || l1.Inputs[0].Seq != 1 || l1.Outputs[0] != "raw.upper" {
		t.Fatalf("lease: %+v", l1)
	}
	if err := r.eng.Heartbeat(l1.ID); err != nil {
		t.Fatalf("heartbeat of a live lease: %v", err)
	}
	// Worker 2 finds nothing while worker 1 holds the block.
	if _, ok, _ := r.eng.Lease(ctx, hello("w2")); ok {
		t.Fatal("a held block was leased twice")
	}
	// Worker 1 is cut off: no heartbeat past the TTL.
	time.Sleep(400 * time.Millisecond)
	if err := r.eng.Heartbeat(l1.ID); !errors.Is(err, engine.ErrLeaseGone) {
		t.Fatalf("heartbeat of an expired lease: %v", err)
	}
	l2, ok, err := r.eng.Lease(ctx, hello("w2"))
	if err != nil || !ok || l2.Inputs[0].Seq != 1 {
		t.Fatalf("the expired block was not leased again: %+v %v %v", l2, ok, err)
	}
	stage := func(l flight.Lease, data []byte) []flight.LeaseOutput {
		sum := sha256.Sum256(data)
		n, _ := block.Parse(l.Inputs[0].Name)
		n.Queue = "raw.upper"
		if err := r.store.Put(ctx, blob.BlockKey(n, sum), bytes.NewReader(data), int64(len(data)), sum); err != nil {
			t.Fatal(err)
		}
		return []flight.LeaseOutput{{Queue: "raw.upper", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}}
	}
	if err := r.eng.CommitLease(ctx, l2.ID, engine.LeaseResult{Outputs: stage(l2, []byte("WARM-UP")), CPU: time.Millisecond}); err != nil {
		t.Fatalf("commit of the live lease: %v", err)
	}
	if err := r.eng.CommitLease(ctx, l1.ID, engine.LeaseResult{Outputs: stage(l1, []byte("WARM-UP")), CPU: time.Millisecond}); !errors.Is(err, engine.ErrLeaseGone) {
		t.Fatalf("late commit of the expired lease: %v; want refused", err)
	}
	if n := r.count("raw.upper"); n != 1 || string(r.read("raw.upper", 1)) != "WARM-UP" {
		t.Fatalf("raw.upper holds %d blocks", n)
	}
	ws := r.eng.Workers()
	if len(ws) != 2 || ws[0].Lost != 1 || ws[1].Done != 1 {
		t.Fatalf("workers: %+v", ws)
	}
}

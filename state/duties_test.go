package state

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDuties: one holder at a time; a hold renewed keeps its term; a
// lapsed hold passes to another with the next term, and its old holder
// learns so; a hold given up passes at once.
func TestDuties(t *testing.T) {
	db, c := open(t)
	ctx := context.Background()
	const ttl = 15 * time.Second
	d, err := db.HoldDuty(ctx, "retention", "a", ttl)
	if err != nil || d.Holder != "a" || d.Term != 1 || !d.Until.Equal(c.t.Add(ttl)) {
		t.Fatalf("a takes a free duty: %+v, %v", d, err)
	}
	if _, err := db.HoldDuty(ctx, "retention", "b", ttl); !errors.Is(err, ErrDutyHeld) {
		t.Fatalf("b takes a duty a holds: %v; want ErrDutyHeld", err)
	}
	if d, err := db.HoldDuty(ctx, "fsck", "b", ttl); err != nil || d.Holder != "b" {
		t.Fatalf("b takes another duty: %+v, %v", d, err)
	}
	c.t = c.t.Add(10 * time.Second)
	if d, err := db.HoldDuty(ctx, "retention", "a", ttl); err != nil || d.Term != 1 || !d.Until.Equal(c.t.Add(ttl)) {
		t.Fatalf("a renews: %+v, %v", d, err)
	}
	c.t = c.t.Add(ttl) // a stalled past its time
	d, err = db.HoldDuty(ctx, "retention", "b", ttl)
	if err != nil || d.Holder != "b" || d.Term != 2 {
		t.Fatalf("b takes a lapsed duty: %+v, %v", d, err)
	}
	if _, err := db.HoldDuty(ctx, "retention", "a", ttl); !errors.Is(err, ErrDutyHeld) {
		t.Fatalf("a renews a duty b took: %v; want ErrDutyHeld", err)
	}
	if err := db.ReleaseDuty(ctx, "retention", "a"); err != nil {
		t.Fatal(err)
	}
	if d, _ := db.HoldDuty(ctx, "retention", "b", ttl); d.Holder != "b" || d.Term != 2 {
		t.Fatalf("a gave up a duty it no longer held, and b lost it: %+v", d)
	}
	if err := db.ReleaseDuty(ctx, "retention", "b"); err != nil {
		t.Fatal(err)
	}
	if d, err := db.HoldDuty(ctx, "retention", "a", ttl); err != nil || d.Holder != "a" || d.Term != 3 {
		t.Fatalf("a takes a duty given up: %+v, %v", d, err)
	}
	ds, err := db.Duties()
	if err != nil || len(ds) != 2 || ds[0].Name != "fsck" || ds[1].Name != "retention" {
		t.Fatalf("duties: %+v, %v", ds, err)
	}
}

package windowing

import (
	"testing"
	"time"
)

// TestForceFreesTheWindowBehind: in strict order, a window waiting behind
// a stuck one fires at the next Due once the stuck one is forced, even
// though nothing new arrived.
func TestForceFreesTheWindowBehind(t *testing.T) {
	tr, err := New(Spec{Size: time.Hour, Ordering: StrictOrder})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	for _, b := range []struct {
		seq uint64
		at  time.Duration
	}{{1, 0}, {3, 40 * time.Minute}, {4, 70 * time.Minute}, {5, 130 * time.Minute}} {
		tr.Add(Block{Instance: "lax", Seq: b.seq, Time: day.Add(b.at), Arrived: day.Add(3 * time.Hour)})
	}
	now := day.Add(3 * time.Hour)
	if fs := tr.Due(now); len(fs) != 0 {
		t.Fatalf("fired before forcing: %+v", fs)
	}
	open := tr.Open(now)
	f, err := tr.Force(open[0].ID, now)
	if err != nil || f.Reason != Forced {
		t.Fatalf("force: %+v %v", f, err)
	}
	fs := tr.Due(now)
	if len(fs) != 1 || fs[0].ID != open[1].ID || fs[0].Reason != Complete {
		t.Fatalf("after forcing the first window, due: %+v; want the complete one behind it", fs)
	}
}

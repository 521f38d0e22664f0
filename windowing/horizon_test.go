package windowing

import (
	"fmt"
	"testing"
	"time"
)

// feedDays sends sites' 5-minute blocks for days [from, to), asking Due
// after each hour's blocks, and checks every daily window fires complete
// with its 288 blocks per site. It returns the blocks and windows held
// after each day.
func feedDays(t *testing.T, tr *Tracker, sites []string, from, to int, seq map[string]uint64) (blocks, windows []int) {
	t.Helper()
	day0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	per := 288
	if tr.Spec().AllInstances {
		per *= len(sites)
	}
	for d := from; d < to; d++ {
		for i := 0; i < 288; i++ {
			at := day0.Add(time.Duration(d)*24*time.Hour + time.Duration(i)*5*time.Minute)
			for _, s := range sites {
				seq[s]++
				if k := tr.Add(Block{Instance: s, Seq: seq[s], Time: at, Arrived: at.Add(5 * time.Minute), Name: fmt.Sprint(s, seq[s])}); k != InWindow {
					t.Fatalf("day %d block %s:%d: %s", d, s, seq[s], k)
				}
			}
			if i%12 == 11 {
				for _, f := range tr.Due(at.Add(5 * time.Minute)) {
					if f.Reason != Complete || len(f.Blocks) != per || len(f.Missing) != 0 {
						t.Fatalf("window %v fired %s with %d blocks, %d missing; want complete with %d", f.ID, f.Reason, len(f.Blocks), len(f.Missing), per)
					}
				}
			}
		}
		b, w := tr.Held()
		blocks, windows = append(blocks, b), append(windows, w)
	}
	return blocks, windows
}

// TestTrackerMemoryFlat: a daily window stage fed 400 days of 5-minute
// blocks holds what its open window and its late horizon need, not the
// history: the blocks and windows it holds after day 400 are those after
// day 10 (they grew by 288 blocks a day before). Per site, and across
// sites.
func TestTrackerMemoryFlat(t *testing.T) {
	for _, all := range []bool{false, true} {
		t.Run(fmt.Sprintf("all=%v", all), func(t *testing.T) {
			tr, err := New(Spec{Size: 24 * time.Hour, AllInstances: all})
			if err != nil {
				t.Fatal(err)
			}
			sites := []string{"lax", "nrt"}
			blocks, windows := feedDays(t, tr, sites, 0, 400, map[string]uint64{})
			t.Logf("held after day 10: %d blocks, %d windows; after day 400: %d blocks, %d windows", blocks[9], windows[9], blocks[399], windows[399])
			if blocks[399] > blocks[9] || windows[399] > windows[9] {
				t.Errorf("held grew from %d blocks and %d windows after day 10 to %d and %d after day 400",
					blocks[9], windows[9], blocks[399], windows[399])
			}
			if max := 2 * 4 * 288; blocks[399] > max { // today, the 2-day horizon, and the anchor
				t.Errorf("holds %d blocks; want at most %d", blocks[399], max)
			}
		})
	}
}

// TestLateHorizon: a block late by less than the horizon is reported
// with its window; one later than that is counted and dropped, and does
// not open (and later fire) a window of its own.
func TestLateHorizon(t *testing.T) {
	tr, err := New(Spec{Size: 24 * time.Hour, LateHorizon: 2})
	if err != nil {
		t.Fatal(err)
	}
	seq := map[string]uint64{}
	feedDays(t, tr, []string{"lax"}, 0, 10, seq)
	day0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// A block of day 8 (fired, inside the horizon of days 8 and 9).
	if k := tr.Add(Block{Instance: "lax", Seq: 100000, Time: day0.Add(8*24*time.Hour + time.Minute), Arrived: day0.Add(10 * 24 * time.Hour)}); k != LateBlock {
		t.Errorf("a block of day 8 on day 10: %s; want late", k)
	}
	// A block of day 3, long pruned.
	if k := tr.Add(Block{Instance: "lax", Seq: 100001, Time: day0.Add(3*24*time.Hour + time.Minute), Arrived: day0.Add(10 * 24 * time.Hour)}); k != TooLate || tr.TooLateCount() != 1 {
		t.Errorf("a block of day 3 on day 10: %s (%d too late); want beyond the horizon", k, tr.TooLateCount())
	}
	for _, f := range tr.Due(day0.Add(11 * 24 * time.Hour)) {
		if f.From.Before(day0.Add(8 * 24 * time.Hour)) {
			t.Errorf("a window below the horizon fired: %+v", f.ID)
		}
	}
}

// TestReplayAfterRestart: a restarted stage marks the windows it fired,
// then replays the queue's blocks: nothing fires again, memory stays that
// of the horizon, and the open day and the next fire complete as blocks
// come.
func TestReplayAfterRestart(t *testing.T) {
	spec := Spec{Size: 24 * time.Hour}
	tr, _ := New(spec)
	seq := map[string]uint64{}
	feedDays(t, tr, []string{"lax"}, 0, 60, seq)

	re, _ := New(spec)
	for d := 0; d < 59; d++ {
		re.MarkFired(WindowID{"lax", int64(20089 + d)}, 1) // 2025-01-01 is day 20089 of the epoch
	}
	day0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for q := uint64(1); q <= seq["lax"]; q++ {
		at := day0.Add(time.Duration(q-1) * 5 * time.Minute)
		re.Replay(Block{Instance: "lax", Seq: q, Time: at, Arrived: at.Add(5 * time.Minute)})
	}
	if fs := re.Due(day0.Add(60 * 24 * time.Hour)); len(fs) != 0 {
		t.Fatalf("after the replay: %+v; want nothing (day 59 waits for a block past its end)", fs)
	}
	if b, _ := re.Held(); b > 4*288 {
		t.Errorf("holds %d blocks after replaying 60 days", b)
	}
	feedDays(t, re, []string{"lax"}, 60, 62, seq)
}

package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/state"
	"github.com/plumb-dev/plumb/synth"
)

// capture generates a few minutes of DNS traffic starting at start.
func capture(t *testing.T, seed uint64, start time.Time) []byte {
	var b bytes.Buffer
	w, _ := pcap.NewWriter(&b, layers.LinkTypeEthernet, 65535, false)
	if _, err := synth.Generate(context.Background(), w, synth.Config{Seed: seed, Start: start, Duration: 2 * time.Minute, Rate: 20}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	return b.Bytes()
}

// doneWith reports whether the block's one delivery (to the job's one
// stage) is DONE.
func (r *rig) doneWith(queue, site string, seq uint64) bool {
	b, err := r.db.Lookup(block.ID{Queue: queue, Instance: site, Seq: seq})
	if err != nil {
		return false
	}
	dels, _ := r.db.DeliveriesOf(queue, []uint64{b.Serial})
	for _, d := range dels[b.Serial] {
		return d.State == state.Done
	}
	return false
}

func (r *rig) putAt(queue, site string, seq uint64, tm time.Time, data []byte) {
	r.t.Helper()
	n := block.Name{Time: tm, Seq: seq, Instance: site, Queue: queue}
	r.putName(n, data)
}

// TestDailyRSSACWindow: a daily RSSAC window for three sites. One block
// of one site is withheld: that site's window waits, fires after max_wait
// listing the block missing, then fires again as revision 2 when it comes.
func TestDailyRSSACWindow(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	day := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	sites := []string{"ams", "lax", "nrt"}
	// The queue exists before the job names it.
	r.putAt("pcap", "ams", 1, day.Add(1*time.Hour), capture(t, 1, day.Add(1*time.Hour)))
	r.mustAccept(`
job: rssac
from: earliest
stages:
  - name: daily
    abstraction: window
    window: {size: 24h, max_wait: 1s, late: refire}
    inputs: [pcap]
    program: builtin:rssac?service=x.root-servers.net
    outputs: [rssac.yaml]
    retention: forever
`)
	for i, site := range sites {
		for seq := uint64(1); seq <= 4; seq++ {
			if site == "ams" && seq == 1 {
				continue // already there
			}
			if site == "lax" && seq == 3 {
				continue // withheld
			}
			tm := day.Add(time.Duration(seq) * time.Hour * 5)
			r.putAt("pcap", site, seq, tm, capture(t, uint64(10*i)+seq, tm))
		}
		// The next day's first block brackets the day.
		next := day.Add(25 * time.Hour)
		r.putAt("pcap", site, 5, next, capture(t, uint64(10*i)+5, next))
	}
	r.wait("ams and nrt at once, lax after max_wait", func() bool { return r.count("rssac.yaml") == 3 })
	wins := r.windows(t)
	if !strings.Contains(wins, "lax/20213 rev 1 max_wait missing=[lax:3]") || !strings.Contains(wins, "ams/20213 rev 1 complete") {
		t.Fatalf("windows:\n%s", wins)
	}
	tm := day.Add(15 * time.Hour)
	r.putAt("pcap", "lax", 3, tm, capture(t, 13, tm))
	r.wait("revision 2 of lax's day", func() bool { return r.count("rssac.yaml") == 4 })
	if wins := r.windows(t); !strings.Contains(wins, "lax/20213 rev 2 late_block missing=[] late=[lax:3]") {
		t.Fatalf("windows:\n%s", wins)
	}
	rev1 := string(r.readName(t, "20250505-000000-02021301.lax.rssac.yaml"))
	rev2 := string(r.readName(t, "20250505-000000-02021302.lax.rssac.yaml"))
	if !strings.Contains(rev1, "metric: traffic-volume") || rev1 == rev2 {
		t.Fatalf("revision 1:\n%s\nrevision 2:\n%s", rev1, rev2)
	}
	if !strings.Contains(rev2, "start-period: 2025-05-05T00:00:00Z") {
		t.Errorf("revision 2:\n%s", rev2)
	}
}

func (r *rig) windows(t *testing.T) string {
	var b strings.Builder
	for _, st := range r.eng.Stats() {
		recs, err := r.db.Windows(st.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range recs {
			fmt.Fprintf(&b, "%s rev %d %s missing=%v late=%v\n", w.ID, w.Revision, w.Reason, w.Missing, w.Late)
		}
	}
	return strings.ReplaceAll(b.String(), "missing=[] late=[]", "")
}

// TestWindowsSurviveRestart: after a restart the fired windows do not
// fire again, and the open ones still fire when their blocks come.
func TestWindowsSurviveRestart(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	day := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	r.putAt("raw", "lax", 1, day, []byte("first"))
	r.mustAccept(`
job: hourly
from: earliest
stages:
  - {name: h, abstraction: window, window: {size: 1h}, inputs: [raw], program: [wc, -c], outputs: [raw.count], retention: forever}
`)
	for seq := uint64(2); seq <= 4; seq++ {
		r.putAt("raw", "lax", seq, day.Add(time.Duration(seq-1)*30*time.Minute), []byte(fmt.Sprint("block ", seq)))
	}
	r.wait("the first hour", func() bool { return r.count("raw.count") == 1 })
	r.stop()
	r.start(engine.Config{Slots: 2})
	r.putAt("raw", "lax", 5, day.Add(2*time.Hour), []byte("fifth"))
	r.wait("the second hour", func() bool { return r.count("raw.count") == 2 })
	time.Sleep(200 * time.Millisecond) // a refire of the first hour would come now
	if n := r.count("raw.count"); n != 2 {
		t.Fatalf("%d window outputs after a restart; want 2", n)
	}
	if out := r.readName(t, "20250505-010000-48511301.lax.raw.count"); len(bytes.TrimSpace(out)) == 0 {
		t.Error("the second hour's output is empty")
	}
}

// TestWaitingWindowIsVisibleAndCanBeForced: a window stuck on a missing
// block shows what it waits for, and an operator can fire it.
func TestWaitingWindowIsVisibleAndCanBeForced(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	day := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	r.putAt("raw", "lax", 1, day, []byte("1"))
	r.mustAccept(`
job: hourly
from: earliest
stages:
  - {name: h, abstraction: window, window: {size: 1h, ordering: strict}, inputs: [raw], program: [cat], outputs: [raw.all], retention: forever}
`)
	r.putAt("raw", "lax", 3, day.Add(40*time.Minute), []byte("3"))
	r.putAt("raw", "lax", 4, day.Add(70*time.Minute), []byte("4"))
	r.putAt("raw", "lax", 5, day.Add(130*time.Minute), []byte("5"))
	var ws []engine.WindowView
	r.wait("three waiting windows", func() bool {
		var err error
		ws, err = r.eng.Windows("hourly/h")
		return err == nil && len(ws) == 3
	})
	// Hour 0 misses block 2; hour 1 is complete but waits behind it; hour
	// 2 has no block past its end yet.
	if ws[0].State != "waiting" || fmt.Sprint(ws[0].Missing) != "[lax:2]" || !ws[0].Bracketed || ws[1].BlockedBy != ws[0].ID || ws[2].Bracketed {
		t.Fatalf("windows = %+v", ws)
	}
	if _, err := r.eng.Windows("nosuch"); err == nil {
		t.Error("unknown stage accepted")
	}
	// The four blocks wait for their windows by design: no run could take
	// them, so they are not backlog (which would call for more workers).
	var st engine.StageStats
	r.wait("the blocks counted as waiting for windows", func() bool {
		st = r.eng.Stats()[0]
		return st.Waiting == 4
	})
	if st.Backlog != 0 {
		t.Errorf("a window stage waiting for block 2: backlog %d, waiting %d; want 0 and 4", st.Backlog, st.Waiting)
	}
	if err := r.eng.FireWindow("hourly/h", ws[0].ID); err != nil {
		t.Fatal(err)
	}
	r.wait("the forced window and the one behind it", func() bool { return r.count("raw.all") == 2 })
	ws, _ = r.eng.Windows("hourly/h")
	if len(ws) != 3 || ws[0].State != "waiting" || ws[1].Reason != "forced" || ws[2].Reason != "complete" {
		t.Fatalf("after forcing: %+v", ws)
	}
}

// TestBlockPastLateHorizon: with late_horizon: 1, a block for a window
// long fired is not held for it (it would be owed for ever): the stage
// is done with it, and it opens no window of its own.
func TestBlockPastLateHorizon(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	day := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	r.putAt("raw", "lax", 1, day, []byte("1"))
	r.mustAccept(`
job: hourly
from: earliest
stages:
  - {name: h, abstraction: window, window: {size: 1h, late_horizon: 1}, inputs: [raw], program: [cat], outputs: [raw.all], retention: forever}
`)
	for seq := uint64(2); seq <= 6; seq++ {
		r.putAt("raw", "lax", seq, day.Add(time.Duration(seq-1)*time.Hour), []byte("x"))
	}
	r.wait("hours 0 to 4 fired", func() bool { return r.count("raw.all") == 5 })
	// Block 7 comes back to hour 0, four windows behind the open one.
	r.putAt("raw", "lax", 7, day.Add(10*time.Minute), []byte("late"))
	r.wait("the late block done with", func() bool { return r.doneWith("raw", "lax", 7) })
	// Owed still: block 5 (the open hour's left bracket) and block 6.
	r.wait("the stage's count", func() bool { st := r.eng.Stats()[0]; return st.Waiting == 2 && st.Backlog == 0 })
	ws, _ := r.eng.Windows("hourly/h")
	for _, w := range ws {
		if w.State == "waiting" && !strings.HasSuffix(w.ID, "/"+fmt.Sprint(day.Unix()/3600+5)) {
			t.Errorf("a window other than hour 5 waits: %+v", w)
		}
	}
	if n := r.count("raw.all"); n != 5 {
		t.Errorf("%d windows fired; the late block fired one of its own", n)
	}
}

// TestLateHorizonBounded: a job asking a window stage of one-minute
// windows to keep 30 days of them late (43,200 windows held in memory)
// is refused, naming the bound.
func TestLateHorizonBounded(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1})
	r.put("raw", 1, []byte("x"))
	res, err := r.ctl.Submit("j.yaml", []byte("job: j\nfrom: earliest\nstages:\n  - {name: m, abstraction: window, window: {size: 1m, late_horizon: 30d}, inputs: [raw], program: [cat], outputs: [raw.m]}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != "rejected" || !strings.Contains(res.Reason, "is 43200 windows of 1m0s; at most 10000 are held") {
		t.Errorf("a 30-day horizon of 1-minute windows: %s %q", res.State, res.Reason)
	}
}

// TestWindowRestartReplaysTails: a restart replays only what each site
// still needs (its open windows and the late horizon), and with that a
// late block still refires its window within the horizon, one past it is
// done with, and no window fires twice. Two sites, one name the prefix of
// the other, as their blocks sit side by side in the metadata.
func TestWindowRestartReplaysTails(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	day := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	at := func(seq uint64) time.Time { return day.Add(time.Duration(seq-1) * 30 * time.Minute) }
	r.putAt("raw", "lax", 1, at(1), []byte("1"))
	r.mustAccept(`
job: hourly
from: earliest
stages:
  - {name: h, abstraction: window, window: {size: 1h, late: refire, max_missing: 1, late_horizon: 4}, inputs: [raw], program: [wc, -c], outputs: [raw.count], retention: forever}
`)
	// Hours 0 to 5 and the first block of hour 6, two blocks an hour;
	// lax withholds seq 8 (hour 3), lax2 seq 2 (hour 0).
	for _, site := range []string{"lax", "lax2"} {
		for seq := uint64(1); seq <= 13; seq++ {
			if site == "lax" && (seq == 1 || seq == 8) || site == "lax2" && seq == 2 {
				continue
			}
			r.putAt("raw", site, seq, at(seq), []byte(fmt.Sprint(site, seq)))
		}
	}
	r.wait("hours 0 to 5 of both sites", func() bool { return r.count("raw.count") == 12 })
	r.stop()
	r.start(engine.Config{Slots: 2})
	// Hour 3 of lax is inside the horizon (four windows below hour 6):
	// it fires again. Hour 0 of lax2 is past it: done with, no firing.
	r.putAt("raw", "lax", 8, at(8), []byte("late"))
	r.wait("hour 3 of lax again", func() bool { return r.count("raw.count") == 13 })
	r.putAt("raw", "lax2", 2, at(2), []byte("too late"))
	r.wait("the block past the horizon done with", func() bool { return r.doneWith("raw", "lax2", 2) })
	// Hour 6 still fires, once, when hour 7 begins.
	r.putAt("raw", "lax", 14, at(14), []byte("14"))
	r.putAt("raw", "lax", 15, at(15), []byte("15"))
	r.wait("hour 6 of lax", func() bool { return r.count("raw.count") == 14 })
	time.Sleep(300 * time.Millisecond) // a window firing twice would come now
	got := r.windows(t)
	if n := r.count("raw.count"); n != 14 {
		t.Errorf("%d window outputs, want 14:\n%s", n, got)
	}
	hour3 := fmt.Sprint("lax/", day.Unix()/3600+3, " rev 2")
	if !strings.Contains(got, hour3) {
		t.Errorf("no %q among the windows:\n%s", hour3, got)
	}
}

// TestEmptyWindowsCostNothing: one hourly job over 55 years of sparse
// backfill made 48,300 runs of nothing, a record and a log line each. A
// window stage now runs only windows that hold a block (or miss one),
// and records a stretch of empty windows as one; `window.empty: run`
// runs them as before.
func TestEmptyWindowsCostNothing(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	times := []time.Time{
		time.Date(1970, 1, 1, 0, 10, 0, 0, time.UTC),
		time.Date(1999, 12, 31, 23, 30, 0, 0, time.UTC),
		time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC),
		time.Date(2025, 5, 5, 14, 0, 0, 0, time.UTC), // brackets 2025-05-05 12:00
	}
	for i, at := range times {
		r.putAt("raw", "lax", uint64(i+1), at, []byte(fmt.Sprint("block ", i+1)))
	}
	r.mustAccept(`
job: hourly
from: earliest
stages:
  - {name: h, abstraction: window, window: {size: 1h}, inputs: [raw], program: [wc, -c], outputs: [raw.count], retention: forever}
`)
	var ws []engine.WindowView
	r.wait("the three bracketed hours and the two stretches between", func() bool {
		var err error
		ws, err = r.eng.Windows("hourly/h")
		fired := 0
		for _, w := range ws {
			if w.State == "fired" {
				fired++
			}
		}
		return err == nil && fired == 6 // three hours with a block, two stretches, 13:00
	})
	if n := r.count("raw.count"); n != 3 {
		t.Fatalf("%d window runs; want 3, one per hour holding a block", n)
	}
	var stretches []engine.WindowView
	for _, w := range ws {
		if w.Empty > 0 {
			stretches = append(stretches, w)
		}
	}
	hours := func(a, b time.Time) int64 {
		return int64(b.Truncate(time.Hour).Sub(a.Truncate(time.Hour))/time.Hour) - 1
	}
	if len(stretches) != 3 || stretches[0].Empty != hours(times[0], times[1]) || stretches[1].Empty != hours(times[1], times[2]) || stretches[2].Empty != 1 ||
		!stretches[0].From.Equal(times[0].Truncate(time.Hour).Add(time.Hour)) || !stretches[0].To.Equal(times[1].Truncate(time.Hour)) || stretches[0].Reason != "empty" {
		t.Fatalf("empty stretches: %+v", stretches)
	}
	if st := r.eng.Stats()[0]; st.Runs != 3 {
		t.Fatalf("stage stats: %d runs; want 3", st.Runs)
	}
	// A listing stops at its limit, in the same order, and narrows by
	// state and by the stages the caller may read.
	ids := func(ws []engine.WindowView) (out []string) {
		for _, w := range ws {
			out = append(out, w.ID+" "+w.State)
		}
		return out
	}
	first, err := r.eng.WindowsMatching(engine.WindowFilter{Limit: 4}, nil)
	if err != nil || fmt.Sprint(ids(first)) != fmt.Sprint(ids(ws[:4])) {
		t.Errorf("the first 4 windows: %v (%v); the whole listing starts %v", ids(first), err, ids(ws[:4]))
	}
	var fired []engine.WindowView
	for _, w := range ws {
		if w.State == "fired" {
			fired = append(fired, w)
		}
	}
	got, err := r.eng.WindowsMatching(engine.WindowFilter{State: "fired", Limit: 2}, nil)
	if err != nil || fmt.Sprint(ids(got)) != fmt.Sprint(ids(fired[:2])) {
		t.Errorf("the first 2 fired windows: %v (%v); want %v", ids(got), err, ids(fired[:2]))
	}
	site, _, _ := strings.Cut(ws[0].ID, "/")
	if got, err := r.eng.WindowsMatching(engine.WindowFilter{Site: site}, nil); err != nil || len(got) != len(ws) {
		t.Errorf("site %s has %d windows listed (%v); the whole listing has %d", site, len(got), err, len(ws))
	}
	if got, err := r.eng.WindowsMatching(engine.WindowFilter{Site: site + "x"}, nil); err != nil || len(got) != 0 {
		t.Errorf("site %sx, which has none, lists %v (%v)", site, ids(got), err)
	}
	if got, err := r.eng.WindowsMatching(engine.WindowFilter{}, func(string) bool { return false }); err != nil || len(got) != 0 {
		t.Errorf("a caller who reads no stage sees %v (%v)", ids(got), err)
	}
	if _, err := r.eng.WindowsMatching(engine.WindowFilter{Stage: "hourly/nope"}, nil); err == nil {
		t.Error("no error for an unknown stage")
	}
}

// TestWindowFilter: a listing of windows narrows by site, state and time
// (TestEmptyWindowsCostNothing lists through an engine, with a limit).
func TestWindowFilter(t *testing.T) {
	hour := func(h int) time.Time { return time.Date(2025, 5, 5, h, 0, 0, 0, time.UTC) }
	var ws []engine.WindowView
	for h := range 6 {
		for _, site := range []string{"lax", "nrt"} {
			st := "fired"
			if h == 5 {
				st = "waiting"
			}
			ws = append(ws, engine.WindowView{Stage: "s", ID: fmt.Sprintf("%s/%d", site, h), State: st, From: hour(h), To: hour(h + 1)})
		}
	}
	for _, tc := range []struct {
		f    engine.WindowFilter
		want string
	}{
		{engine.WindowFilter{Site: "nrt", State: "waiting"}, "[nrt/5]"},
		{engine.WindowFilter{Site: "lax", From: hour(2), To: hour(4)}, "[lax/2 lax/3]"},
		{engine.WindowFilter{Site: "sfo"}, "[]"},
	} {
		var got []string
		for _, w := range ws {
			if tc.f.Match(w) {
				got = append(got, w.ID)
			}
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("%+v: %v; want %s", tc.f, got, tc.want)
		}
	}
}

package stage

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Drops counts, by reason, what a run let go of to stay within its
// bounds (a budget, a cap): the stage's stats and metrics add them up,
// so an operator sees what a bound cost. A nil *Drops counts nothing.
type Drops struct {
	mu sync.Mutex
	m  map[string]int64
}

// Add counts n more let go of for reason.
func (d *Drops) Add(reason string, n int64) {
	if d == nil || n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]int64{}
	}
	d.m[reason] += n
}

// Counts returns the counts so far, nil when none.
func (d *Drops) Counts() map[string]int64 {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.m)
}

// The reasons runs count drops under. Each is a metric label, so a
// worker's commit naming another is refused (CheckDrops).
const (
	DropEdgeBudget     = "edge_budget"     // frames a block's edge let go for the budget
	DropTCPEvicted     = "tcp_evicted"     // TCP streams let go for room
	DropTCPHoles       = "tcp_holes"       // holes in TCP streams given up on
	DropDefrag         = "defrag_dropped"  // datagrams never made whole
	DropPairingInexact = "pairing_inexact" // pairing decided past the budget
	DropLateUnchecked  = "late_unchecked"  // rows of a late block a stage's state could not check
	DropStateReset     = "state_reset"     // carried states that did not read and were started afresh
)

// CheckDrops refuses drop counts a worker sends that no run counts: an
// unknown reason, or a count below 0.
func CheckDrops(d map[string]int64) error {
	for reason, n := range d {
		switch reason {
		case DropEdgeBudget, DropTCPEvicted, DropTCPHoles, DropDefrag, DropPairingInexact, DropLateUnchecked, DropStateReset:
		default:
			return fmt.Errorf("dropped: %q is not a reason runs count drops under", reason)
		}
		if n < 0 {
			return fmt.Errorf("dropped: %s is %d, below 0", reason, n)
		}
	}
	return nil
}

// A Tally counts what a run saw, for metrics exported once the run is
// committed, so a run retried or lost is counted once or not at all
// (builtin:dnsmetrics counts DNS messages by site, type and rcode). Its
// keys are the Tallier's to define and check. A nil *Tally counts
// nothing.
type Tally struct{ Drops }

// Add counts n more under key.
func (t *Tally) Add(key string, n int64) {
	if t != nil {
		t.Drops.Add(key, n)
	}
}

// Counts returns the counts so far, nil when none.
func (t *Tally) Counts() map[string]int64 {
	if t == nil {
		return nil
	}
	return t.Drops.Counts()
}

// A Tallier takes the tallies of committed runs.
type Tallier interface {
	// Check refuses a tally a worker sends that no run makes.
	Check(map[string]int64) error
	// Add counts a committed run's tally.
	Add(map[string]int64)
}

// TallyRoute sends the keys of a tally that start with Prefix to
// Tallier.
type TallyRoute struct {
	Prefix  string
	Tallier Tallier
}

// Talliers is a Tallier made of several: each key goes to the first
// route whose prefix it has ("" takes any), so the built-ins that tally
// (builtin:dnsmetrics, builtin:dnstop) each keep their own metrics.
type Talliers []TallyRoute

// route splits a tally by route, and names a key no route takes.
func (ts Talliers) route(t map[string]int64) (parts []map[string]int64, unrouted string) {
	parts = make([]map[string]int64, len(ts))
	for k, n := range t {
		i := slices.IndexFunc(ts, func(r TallyRoute) bool { return strings.HasPrefix(k, r.Prefix) })
		if i < 0 {
			unrouted = k
			continue
		}
		if parts[i] == nil {
			parts[i] = map[string]int64{}
		}
		parts[i][k] = n
	}
	return parts, unrouted
}

// Check implements Tallier: every key must have a route whose Tallier
// takes it.
func (ts Talliers) Check(t map[string]int64) error {
	parts, unrouted := ts.route(t)
	if unrouted != "" {
		return fmt.Errorf("tally %q: no metric counts it", unrouted)
	}
	for i, p := range parts {
		if p == nil {
			continue
		}
		if err := ts[i].Tallier.Check(p); err != nil {
			return err
		}
	}
	return nil
}

// Add implements Tallier. Keys no route takes are skipped (Check
// refuses them from workers).
func (ts Talliers) Add(t map[string]int64) {
	parts, _ := ts.route(t)
	for i, p := range parts {
		if p != nil {
			ts[i].Tallier.Add(p)
		}
	}
}

// Package windowing decides when a window of blocks is complete, from
// sequence numbers rather than guesses: a site's window is complete when
// its blocks are bracketed in time (a block before its start, or the
// stream's first block; a block at or after its end) and every sequence
// number between the brackets is present. It also applies the user's
// trade-offs — how long to wait for missing blocks, how many may be
// missing, whether windows fire in order — and classifies every block
// (in window, duplicate, late, out of range, unwanted).
//
// The package is pure: no I/O, and time is always an argument, so the
// same arrivals give the same firings, in tests and in replays.
package windowing

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ordering says whether windows may fire out of order.
type Ordering string

// Orderings.
const (
	AnyOrder    Ordering = "any"    // a window fires as soon as it may (default)
	StrictOrder Ordering = "strict" // a window fires only after every earlier window of its site
)

// Cutoff says where a block that straddles a window boundary goes.
type Cutoff string

// Cutoffs.
const (
	CutoffStart Cutoff = "start" // to the window it starts in (default)
	CutoffNext  Cutoff = "next"  // to the window it ends in
	CutoffBoth  Cutoff = "both"  // to both
)

// Late says what a block arriving after its window fired does.
type Late string

// Late policies.
const (
	LateReport Late = "report" // recorded and reported; the window stands (default)
	LateRefire Late = "refire" // the window fires again, with the next revision
)

// Spec is a window specification.
type Spec struct {
	// Size is the window's length in event time, or SizeBlocks its
	// length in sequence numbers; exactly one is set.
	Size       time.Duration
	SizeBlocks uint64
	// Phase aligns time windows: they start at Phase + k·Size. Zero
	// means UTC midnight (the Unix epoch).
	Phase time.Time
	// From and To, when set, bound a one-off range (backfill): only
	// windows inside [From, To) exist; blocks outside are out of range.
	From, To time.Time
	// MaxWait is how long to wait for missing blocks, counted from the
	// arrival of the first block beyond the window's end; zero waits
	// forever.
	MaxWait time.Duration
	// MaxMissing and MaxMissingPct let a bracketed window fire with that
	// many (or that percent of its) blocks missing; negative disables.
	MaxMissing    int
	MaxMissingPct float64
	// IdleTimeout fires a site's open windows when it has sent nothing
	// for this long (wall clock), as it will never bracket them; zero
	// disables.
	IdleTimeout time.Duration
	Ordering    Ordering
	Cutoff      Cutoff
	Late        Late
	// AllInstances makes one window across every site seen (complete when
	// each site's part is); otherwise each site has its own windows.
	AllInstances bool
	// Instances, when given, are the only sites wanted.
	Instances []string
	// FirstSeq is a stream's first sequence number (the agent's is 1):
	// a window holding it needs no left bracket.
	FirstSeq uint64
	// LateHorizon is how many windows before a site's lowest open one
	// keep their blocks, for late blocks to be reported and refired: a
	// block older than that is counted (TooLate) and dropped, so the
	// tracker holds the open windows and this many, not the history.
	// Zero: 2 windows, and for time windows at least a day's worth.
	LateHorizon int64
}

// Defaults fills unset fields.
func (s *Spec) Defaults() {
	if s.Ordering == "" {
		s.Ordering = AnyOrder
	}
	if s.Cutoff == "" {
		s.Cutoff = CutoffStart
	}
	if s.Late == "" {
		s.Late = LateReport
	}
	if s.FirstSeq == 0 {
		s.FirstSeq = 1
	}
	if s.Phase.IsZero() {
		s.Phase = time.Unix(0, 0).UTC() // windows start at UTC midnight
	}
	if s.LateHorizon == 0 {
		s.LateHorizon = 2
		if s.Size > 0 {
			s.LateHorizon = max(2, int64((24*time.Hour+s.Size-1)/s.Size))
		}
	}
}

// Validate checks the spec.
func (s *Spec) Validate() error {
	var errs []error
	switch {
	case s.Size > 0 && s.SizeBlocks > 0:
		errs = append(errs, errors.New("size: give a duration or a number of blocks, not both"))
	case s.Size <= 0 && s.SizeBlocks == 0:
		errs = append(errs, errors.New("size: give a duration (24h) or a number of blocks"))
	}
	if !s.From.IsZero() && !s.To.IsZero() && !s.From.Before(s.To) {
		errs = append(errs, fmt.Errorf("range: start %s is not before end %s", s.From.Format(time.RFC3339), s.To.Format(time.RFC3339)))
	}
	if s.MaxMissingPct > 100 {
		errs = append(errs, fmt.Errorf("max_missing: %v%% is over 100%%", s.MaxMissingPct))
	}
	if !slices.Contains([]Ordering{AnyOrder, StrictOrder}, s.Ordering) {
		errs = append(errs, fmt.Errorf("ordering %q: want any or strict", s.Ordering))
	}
	if !slices.Contains([]Cutoff{CutoffStart, CutoffNext, CutoffBoth}, s.Cutoff) {
		errs = append(errs, fmt.Errorf("cutoff %q: want start, next or both", s.Cutoff))
	}
	if !slices.Contains([]Late{LateReport, LateRefire}, s.Late) {
		errs = append(errs, fmt.Errorf("late %q: want report or refire", s.Late))
	}
	if s.SizeBlocks > 0 && s.Cutoff != CutoffStart {
		errs = append(errs, errors.New("cutoff applies to time windows only"))
	}
	return errors.Join(errs...)
}

// ParseMissing reads max_missing: a count ("3") or a percentage ("1%");
// empty means none allowed beyond what max_wait decides.
func ParseMissing(v string) (count int, pct float64, err error) {
	if v == "" {
		return -1, -1, nil
	}
	if p, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f < 0 || f > 100 {
			return 0, 0, fmt.Errorf("max_missing %q: want a number of blocks or a percentage such as 1%%", v)
		}
		return -1, f, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, 0, fmt.Errorf("max_missing %q: want a number of blocks or a percentage such as 1%%", v)
	}
	return n, -1, nil
}

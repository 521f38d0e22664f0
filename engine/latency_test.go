package engine

import (
	"testing"
	"time"
)

// TestLatenciesKeepTheNewest: past the cap, percentiles come from the
// newest latencyCap samples only, however the slice is trimmed.
func TestLatenciesKeepTheNewest(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLatencies(func() time.Time { return now })
	n := 5*latencyCap/2 + 7
	for i := range n {
		l.add("stage", time.Duration(i))
	}
	p := l.percentiles("stage")
	if p.Samples != latencyCap {
		t.Fatalf("samples = %d, want the cap %d", p.Samples, latencyCap)
	}
	oldest := n - latencyCap
	if want := time.Duration(oldest + latencyCap/2); p.P50 != want {
		t.Errorf("p50 = %v, want %v (the median of the newest %d)", p.P50, want, latencyCap)
	}
	if got := len(l.samples["stage"]); got >= 2*latencyCap {
		t.Errorf("%d samples held; the slice is trimmed below twice the cap", got)
	}
}

package engine

import (
	"slices"
	"sync"
	"time"

	"github.com/plumb-dev/plumb/flight"
)

// latencies keeps recent latency samples per key (a stage, or a queue and
// consumer group) for the last hour, for percentiles in `plumb status`;
// Prometheus histograms carry the long view.
type latencies struct {
	mu      sync.Mutex
	now     func() time.Time
	samples map[string][]sample
}

type sample struct {
	at time.Time
	d  time.Duration
}

const (
	latencyWindow = time.Hour
	latencyCap    = 20000 // samples per key, newest kept
)

func newLatencies(now func() time.Time) *latencies {
	return &latencies{now: now, samples: map[string][]sample{}}
}

func (l *latencies) add(key string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := append(l.samples[key], sample{l.now(), d})
	// Trimmed to the cap only once it is twice over: trimmed at every
	// add, each moved the whole window (20,000 samples) and took 5% of
	// the server's CPU in make bench-scale.
	if len(s) >= 2*latencyCap {
		s = slices.Delete(s, 0, len(s)-latencyCap)
	}
	l.samples[key] = s
}

// Percentiles summarise a latency over the last hour, as the protocol defines them.
type Percentiles = flight.Percentiles

func (l *latencies) percentiles(key string) Percentiles {
	l.mu.Lock()
	defer l.mu.Unlock()
	cutoff := l.now().Add(-latencyWindow)
	s := l.samples[key]
	i, _ := slices.BinarySearchFunc(s, cutoff, func(x sample, t time.Time) int { return x.at.Compare(t) })
	s = s[i:]
	l.samples[key] = s
	s = s[max(len(s)-latencyCap, 0):] // the newest latencyCap
	if len(s) == 0 {
		return Percentiles{}
	}
	ds := make([]time.Duration, len(s))
	for i, x := range s {
		ds[i] = x.d
	}
	slices.Sort(ds)
	return Percentiles{P50: ds[len(ds)/2], P99: ds[len(ds)*99/100], Samples: len(ds)}
}

package admission

import (
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// SchedLatency follows how long this process's goroutines wait to run
// once ready (the Go runtime's /sched/latencies histogram), over about
// the last second. On a busy machine a read's request waits that long
// before the server sees it and its last bytes wait that long again on
// the way out; neither shows in the transfer times the slots measure,
// and a read finished on time by the server's clock reached its reader
// late. Its Margin, given as Config.Margin, keeps that much slack.
type SchedLatency struct {
	mu     sync.Mutex
	sample []metrics.Sample
	past   [][]uint64 // cumulative counts, one per Sample, oldest at next
	next   int
	p99    time.Duration
}

// schedSpan is how many samples back the quantile looks: at the server's
// recheck every 5 ms, about a second.
const schedSpan = 200

// NewSchedLatency returns a follower; call Sample often (Controller.Run
// does, when it is the Margin).
func NewSchedLatency() *SchedLatency {
	return &SchedLatency{sample: []metrics.Sample{{Name: "/sched/latencies:seconds"}}}
}

// Sample reads the runtime's histogram and updates the 99th percentile
// of the waits since about schedSpan samples ago.
func (s *SchedLatency) Sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	metrics.Read(s.sample)
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return
	}
	h := s.sample[0].Value.Float64Histogram()
	now := append([]uint64(nil), h.Counts...)
	var old []uint64
	if len(s.past) < schedSpan {
		if len(s.past) > 0 {
			old = s.past[0]
		}
		s.past = append(s.past, now)
	} else {
		old = s.past[s.next]
		s.past[s.next] = now
		s.next = (s.next + 1) % schedSpan
	}
	delta := make([]uint64, len(now))
	var total uint64
	for i := range now {
		delta[i] = now[i]
		if i < len(old) {
			delta[i] -= old[i]
		}
		total += delta[i]
	}
	if total == 0 {
		s.p99 = 0
		return
	}
	want := uint64(math.Ceil(0.99 * float64(total)))
	var seen uint64
	for i, n := range delta {
		if seen += n; seen >= want {
			// The bucket's upper bound, or its lower one for the last,
			// unbounded bucket.
			hi := h.Buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = h.Buckets[i]
			}
			s.p99 = time.Duration(hi * float64(time.Second))
			return
		}
	}
}

// P99 is the 99th percentile of recent waits to run.
func (s *SchedLatency) P99() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p99
}

// Margin is the slack a read keeps before its deadline: a wait to run on
// the way in and one on the way out.
func (s *SchedLatency) Margin() time.Duration {
	s.Sample()
	return 2 * s.P99()
}

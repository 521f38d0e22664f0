// Package memlimit keeps a process's heap within a fixed headroom of
// what is live, whatever its garbage collection target (GOGC) lets it
// grow to: a server that collects rarely for speed (GOGC=400: the heap
// may grow to five times what is live) should not, when a burst makes
// a few hundred MiB live, take five times that.
package memlimit

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Headroom sets, after every garbage collection, the runtime's soft
// memory limit to what is live then plus headroom (plus the memory the
// runtime holds beside the heap: stacks, its own metadata). Below
// headroom/4 of live heap the GOGC target is the lower one and decides
// alone; above it the limit does, so the heap grows past what is live
// by at most headroom. It returns a function that stops it and lifts
// the limit. A headroom of 0 or less does nothing; so does a GOMEMLIMIT
// the process was started with, which the operator chose.
//
// It runs on each collection (a cleanup the collector calls), not on a
// timer: an idle process, which collects every two minutes, pays
// nothing more.
func Headroom(headroom int64, gomemlimit string) (stop func()) {
	if headroom <= 0 || gomemlimit != "" {
		return func() {}
	}
	h := &bound{headroom: headroom, samples: make([]metrics.Sample, len(names))}
	for i, n := range names {
		h.samples[i].Name = n
	}
	h.arm()
	return h.stop
}

var names = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

type bound struct {
	headroom int64
	mu       sync.Mutex
	stopped  bool
	samples  []metrics.Sample
	// Limit is the last limit set; for tests.
	limit int64
}

// sentinel is an object only the collector frees: its cleanup runs once
// per collection. It is larger than the runtime's 16-byte tiny blocks,
// whose cleanups may never run.
type sentinel struct{ _ [32]byte }

func (h *bound) arm() {
	runtime.AddCleanup(new(sentinel), func(h *bound) { h.collected() }, h)
}

// collected sets the limit from what the collection found live, and
// waits for the next one.
func (h *bound) collected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	metrics.Read(h.samples)
	v := make([]int64, len(h.samples))
	for i, s := range h.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = int64(s.Value.Uint64())
		}
	}
	live, total, released, objects, unused, free := v[0], v[1], v[2], v[3], v[4], v[5]
	beside := max(total-released-objects-unused-free, 0) // stacks, the runtime's own metadata
	h.limit = live + h.headroom + beside
	debug.SetMemoryLimit(h.limit)
	h.arm()
}

func (h *bound) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	debug.SetMemoryLimit(math.MaxInt64)
}

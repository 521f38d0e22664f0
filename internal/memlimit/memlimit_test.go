package memlimit_test

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/memlimit"
)

// limitSet waits for a collection to have set the soft limit.
func limitSet() bool {
	for range 200 {
		runtime.GC()
		if debug.SetMemoryLimit(-1) < math.MaxInt64 {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func Example() {
	// A server collects rarely for speed, yet should not grow more than
	// 256 MiB past what is live; a GOMEMLIMIT the operator set wins.
	debug.SetGCPercent(400)
	defer debug.SetGCPercent(100)
	stop := memlimit.Headroom(256<<20, "")
	defer stop()
	fmt.Println("limit set after a collection:", limitSet())
	// Output: limit set after a collection: true
}

// peakHeap churns short-lived allocations over a live heap and returns
// the most heap the runtime held for objects meanwhile.
func peakHeap(live [][]byte) int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak int64
	var sink []byte
	for i := range 4000 {
		sink = make([]byte, 256<<10) // 1000 MiB churned in all
		for j := 0; j < len(sink); j += 512 {
			// Some work per allocation, as a server does: a collector
			// starved of CPU (over half of it) lets a soft limit slip.
			sink[j] = byte(i + j)
		}
		if i%16 == 0 {
			metrics.Read(s)
			peak = max(peak, int64(s[0].Value.Uint64()))
		}
	}
	runtime.KeepAlive(live)
	runtime.KeepAlive(sink)
	return peak
}

// TestHeadroomBoundsTheHeap: with GOGC=400 and 64 MiB live, churning
// garbage lets the heap grow to about five times what is live; with a
// headroom of 32 MiB it stays within that of what is live.
func TestHeadroomBoundsTheHeap(t *testing.T) {
	debug.SetGCPercent(400)
	defer debug.SetGCPercent(100)
	live := make([][]byte, 64)
	for i := range live {
		live[i] = make([]byte, 1<<20)
		live[i][0] = 1
	}
	runtime.GC()
	free := peakHeap(live)

	stop := memlimit.Headroom(32<<20, "")
	if !limitSet() {
		t.Fatal("no limit set after 200 collections")
	}
	bounded := peakHeap(live)
	stop()
	if debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Error("stop left the limit in place")
	}
	t.Logf("peak heap with 64 MiB live: %d MiB at GOGC=400 alone, %d MiB with 32 MiB of headroom", free>>20, bounded>>20)
	if free < 200<<20 {
		t.Fatalf("GOGC=400 alone peaked at %d MiB; the test needs it to grow well past 64 MiB live to mean anything", free>>20)
	}
	if bounded > (64+32+48)<<20 { // the collector paces itself a little past a soft limit
		t.Errorf("with 32 MiB of headroom the heap peaked at %d MiB over 64 MiB live", bounded>>20)
	}
}

// TestOperatorsLimitWins: a GOMEMLIMIT the process was started with is
// the operator's choice; Headroom leaves it alone.
func TestOperatorsLimitWins(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	stop := memlimit.Headroom(32<<20, "1GiB")
	defer stop()
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	runtime.GC()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit %d after Headroom with GOMEMLIMIT set; was %d", got, before)
	}
}

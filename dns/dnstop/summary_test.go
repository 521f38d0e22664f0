package dnstop

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// zipfStream draws n values of a Zipf law over k values, as requesters
// and names of real traffic are (a few heavy, a long tail).
func zipfStream(seed uint64, n int, k uint64) []string {
	r := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(r, 1.2, 2, k-1)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("v%d", z.Uint64())
	}
	return out
}

func exact(stream []string) map[string]int64 {
	m := map[string]int64{}
	for _, v := range stream {
		m[v]++
	}
	return m
}

// checkGuarantees asserts what a summary promises against the exact
// counts of its stream.
func checkGuarantees(t *testing.T, s *Summary, truth map[string]int64) {
	t.Helper()
	followed := map[string]bool{}
	for _, it := range s.Top(s.Len()) {
		followed[it.Value] = true
		if tc := truth[it.Value]; tc < it.Count-it.Err || tc > it.Count {
			t.Errorf("%s: true count %d outside [%d, %d]", it.Value, tc, it.Count-it.Err, it.Count)
		}
		if it.Err > s.Bound() {
			t.Errorf("%s: error %d over the bound %d", it.Value, it.Err, s.Bound())
		}
	}
	var total int64
	for v, tc := range truth {
		total += tc
		if !followed[v] && tc > s.Bound() {
			t.Errorf("%s seen %d times, not followed, over the bound %d", v, tc, s.Bound())
		}
	}
	if s.Total() != total {
		t.Errorf("total %d, want %d", s.Total(), total)
	}
}

// TestSummaryGuarantees: on Zipf streams of many sizes, every followed
// count holds the true count within its error, no value left out was
// seen more than the bound, the bound is at most W/c, and the top values
// whose counts stand apart by more than the bound are the true top.
func TestSummaryGuarantees(t *testing.T) {
	for _, tc := range []struct {
		n        int
		k        uint64
		counters int
	}{{1000, 50, 100}, {20000, 5000, 10}, {20000, 5000, 100}, {50000, 100000, 50}, {5, 5, 1}} {
		t.Run(fmt.Sprintf("n%d-k%d-c%d", tc.n, tc.k, tc.counters), func(t *testing.T) {
			stream := zipfStream(uint64(tc.n), tc.n, tc.k)
			truth := exact(stream)
			s := NewSummary(tc.counters)
			for _, v := range stream {
				s.Add(v, 1)
			}
			checkGuarantees(t, s, truth)
			if b := s.Bound(); b*int64(tc.counters) > int64(tc.n) {
				t.Errorf("bound %d over W/c = %d/%d", b, tc.n, tc.counters)
			}
			if len(truth) <= tc.counters && s.Bound() != 0 {
				t.Errorf("%d values in %d counters, bound %d: want exact", len(truth), tc.counters, s.Bound())
			}
			// The head of the ranking where it is certain.
			top := s.Top(s.Len())
			for i := 0; i+1 < len(top) && top[i].Count-top[i].Err >= top[i+1].Count; i++ {
				for v, c := range truth {
					if c > truth[top[i].Value] && v != top[i].Value {
						// A truly larger value must rank before i.
						if r := rankOf(top, v); r < 0 || r > i {
							t.Errorf("%s (%d) is certainly ranked %d, but %s was seen more (%d)", top[i].Value, truth[top[i].Value], i+1, v, c)
						}
					}
				}
			}
		})
	}
}

func rankOf(top []Item, v string) int {
	for i, it := range top {
		if it.Value == v {
			return i
		}
	}
	return -1
}

// TestMergeGuarantees: a stream cut into blocks, each summarized apart
// and merged in turn (as the server's metrics merge blocks' tallies),
// keeps the guarantees over the whole stream, and its top heavy hitters
// are the true ones.
func TestMergeGuarantees(t *testing.T) {
	for _, tc := range []struct{ parts, counters int }{{2, 100}, {7, 100}, {40, 100}, {7, 10}, {40, 5}} {
		parts, counters := tc.parts, tc.counters
		t.Run(fmt.Sprint(parts, "x", counters), func(t *testing.T) {
			stream := zipfStream(uint64(parts), 30000, 20000)
			truth := exact(stream)
			merged := NewSummary(counters)
			r := rand.New(rand.NewPCG(uint64(parts), 2))
			for rest := stream; len(rest) > 0; {
				n := min(len(rest), 1+r.IntN(2*len(stream)/parts))
				s := NewSummary(counters)
				for _, v := range rest[:n] {
					s.Add(v, 1)
				}
				merged.Merge(s)
				rest = rest[n:]
			}
			checkGuarantees(t, merged, truth)
			// Values seen more than W/c times in all are followed, and
			// the most seen ranks first.
			whole := NewSummary(1 << 20)
			for _, v := range stream {
				whole.Add(v, 1)
			}
			want := whole.Top(1)[0]
			if got := merged.Top(1)[0]; got.Value != want.Value {
				t.Errorf("merged top %+v, want %+v", got, want)
			}
			for v, c := range truth {
				if c*int64(counters) > int64(len(stream)) && rankOf(merged.Top(merged.Len()), v) < 0 {
					t.Errorf("%s seen %d of %d times is not followed", v, c, len(stream))
				}
			}
		})
	}
}

// TestMergeEmptyAndExact: merging exact summaries is exact; merging an
// empty one changes nothing.
func TestMergeEmptyAndExact(t *testing.T) {
	a, b := NewSummary(10), NewSummary(10)
	for _, v := range []string{"x", "x", "y"} {
		a.Add(v, 1)
	}
	b.Add("y", 2)
	b.Add("z", 1)
	a.Merge(NewSummary(3))
	a.Merge(b)
	got := a.Top(10)
	want := []Item{{Value: "y", Count: 3}, {Value: "x", Count: 2}, {Value: "z", Count: 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) || a.Total() != 6 || a.Bound() != 0 {
		t.Errorf("merged %v total %d bound %d, want %v total 6 bound 0", got, a.Total(), a.Bound(), want)
	}
}

// TestMergeCountsWhatAPartLeftOut: a value one part counted and the
// other let go of (it was seen there, then evicted) is counted at that
// part's bound, so its count is not under its true count.
func TestMergeCountsWhatAPartLeftOut(t *testing.T) {
	a, b := NewSummary(4), NewSummary(2)
	stream := map[*Summary][]string{
		a: {"a", "a", "a", "a", "a", "x", "x", "x"},
		b: {"x", "b", "b", "b", "b", "c", "c", "c", "c"},
	}
	for s, vs := range stream {
		for _, v := range vs {
			s.Add(v, 1)
		}
	}
	if rankOf(b.Top(2), "x") >= 0 {
		t.Fatalf("b still follows x: %v", b.Top(2))
	}
	a.Merge(b)
	truth := exact(append(stream[a], stream[b]...))
	checkGuarantees(t, a, truth)
	if r := rankOf(a.Top(4), "x"); r < 0 {
		t.Fatalf("x is not followed after the merge: %v", a.Top(4))
	}
}

// TestMergeKeepsThePartsBound: a full summary merged into one with room
// to spare leaves the bound it had (values it let go of may have been
// seen that often), and a value new after the merge starts there.
func TestMergeKeepsThePartsBound(t *testing.T) {
	part := NewSummary(2)
	var stream []string
	for i := range 30 {
		stream = append(stream, fmt.Sprint("v", i%10))
	}
	for _, v := range stream {
		part.Add(v, 1)
	}
	roomy := NewSummary(100)
	roomy.Merge(part)
	if roomy.Bound() != part.Bound() || roomy.Bound() == 0 {
		t.Fatalf("bound %d after the merge, %d before", roomy.Bound(), part.Bound())
	}
	roomy.Add("v9", 1)
	stream = append(stream, "v9")
	checkGuarantees(t, roomy, exact(stream))
}

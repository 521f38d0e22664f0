package dnstop

import (
	"container/heap"
	"slices"
	"strings"
)

// An Item is a value a Summary follows: its estimated count, and by how
// much that estimate may be over. The true count lies in
// [Count-Err, Count].
type Item struct {
	Value string
	Count int64
	Err   int64
}

// A Summary follows the most frequent values of a stream in at most a
// fixed number of counters: the Space-Saving algorithm (Metwally,
// Agrawal and El Abbadi, "Efficient computation of frequent and top-k
// elements in data streams", ICDT 2005). A value new to a full summary
// takes the counter of the least counted value and inherits its count
// as its error. What a summary guarantees, however it was made:
//
//   - a followed value's true count lies in [Count-Err, Count];
//   - a value not followed was seen at most Bound() times;
//   - counted as one stream with c counters, Bound() ≤ W/c for a stream
//     of total weight W, so every value seen more than W/c times is
//     followed.
//
// Summaries merge (Merge), so blocks and sites are counted apart and
// summed later; a merged summary keeps the first two guarantees, with
// errors at most the sum of its parts' bounds. The zero value is not
// usable; call NewSummary.
type Summary struct {
	cap   int
	total int64
	// floor is the most a value not followed may have been seen in the
	// summaries merged into this one: a value new to it may have been,
	// so it starts there.
	floor int64
	pos   map[string]int // value → index in h
	h     counterHeap
}

// NewSummary returns an empty summary of at most counters counters (at
// least 1).
func NewSummary(counters int) *Summary {
	counters = max(counters, 1)
	s := &Summary{cap: counters, pos: make(map[string]int, min(counters, 1024))}
	s.h.pos = s.pos
	return s
}

// Add counts n more of v (n > 0).
func (s *Summary) Add(v string, n int64) {
	if n <= 0 {
		return
	}
	s.total += n
	if i, ok := s.pos[v]; ok {
		s.h.c[i].Count += n
		heap.Fix(&s.h, i)
		return
	}
	if len(s.h.c) < s.cap {
		heap.Push(&s.h, Item{Value: v, Count: s.floor + n, Err: s.floor})
		return
	}
	// The least counted value gives its counter up.
	least := s.h.c[0]
	delete(s.pos, least.Value)
	s.h.c[0] = Item{Value: v, Count: least.Count + n, Err: least.Count}
	s.pos[v] = 0
	heap.Fix(&s.h, 0)
}

// Total is the weight of the stream counted.
func (s *Summary) Total() int64 { return s.total }

// Counters is how many counters the summary may hold.
func (s *Summary) Counters() int { return s.cap }

// Len is how many values the summary follows now.
func (s *Summary) Len() int { return len(s.h.c) }

// Bound is by how much any count may be over, and the most a value not
// followed may have been seen: while the summary has a free counter, 0
// for a summary of one stream (every count is exact then) or what the
// summaries merged into it did not follow; when full, its least count.
func (s *Summary) Bound() int64 {
	if len(s.h.c) < s.cap {
		return s.floor
	}
	return s.h.c[0].Count
}

// Top returns the n most counted values, most first, ties by value.
func (s *Summary) Top(n int) []Item {
	out := slices.Clone(s.h.c)
	sortItems(out)
	return out[:min(max(n, 0), len(out))]
}

// Merge adds o's stream to s's, so s summarizes both (o is unchanged).
// A value one summary does not follow may have been seen there up to
// that summary's Bound, so it is counted at that bound, with that bound
// as error (Cafaro, Pulimeno and Tempesta, "A parallel space saving
// algorithm for frequent items and the Hurwitz zeta distribution",
// 2016); of the union, the s.Counters() most counted are kept. Every
// error of the result is at most the sum of the two bounds, which is at
// most its Bound: the least count kept, which is at least what any
// value dropped or never followed was seen.
func (s *Summary) Merge(o *Summary) {
	b1, b2 := s.Bound(), o.Bound()
	joined := make([]Item, 0, len(s.h.c)+len(o.h.c))
	for _, c := range s.h.c {
		if j, ok := o.pos[c.Value]; ok {
			oc := o.h.c[j]
			c.Count += oc.Count
			c.Err += oc.Err
		} else {
			c.Count += b2
			c.Err += b2
		}
		joined = append(joined, c)
	}
	for _, c := range o.h.c {
		if _, ok := s.pos[c.Value]; ok {
			continue
		}
		c.Count += b1
		c.Err += b1
		joined = append(joined, c)
	}
	sortItems(joined)
	joined = joined[:min(len(joined), s.cap)]
	s.total += o.total
	s.floor = b1 + b2
	clear(s.pos)
	s.h.c = joined
	for i, c := range s.h.c {
		s.pos[c.Value] = i
	}
	heap.Init(&s.h)
}

// sortItems orders items most counted first, ties by value, so a
// summary's top reads the same whatever order its stream came in.
func sortItems(cs []Item) {
	slices.SortFunc(cs, func(a, b Item) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Value, b.Value)
	})
}

// counterHeap is a min-heap of counters by count that keeps pos (value →
// index) current as it moves them.
type counterHeap struct {
	c   []Item
	pos map[string]int
}

func (h *counterHeap) Len() int { return len(h.c) }
func (h *counterHeap) Less(i, j int) bool {
	if h.c[i].Count != h.c[j].Count {
		return h.c[i].Count < h.c[j].Count
	}
	// Among the least, the greatest value gives its counter up first,
	// so eviction does not depend on arrival order.
	return h.c[i].Value > h.c[j].Value
}
func (h *counterHeap) Swap(i, j int) {
	h.c[i], h.c[j] = h.c[j], h.c[i]
	h.pos[h.c[i].Value] = i
	h.pos[h.c[j].Value] = j
}
func (h *counterHeap) Push(x any) {
	c := x.(Item)
	h.pos[c.Value] = len(h.c)
	h.c = append(h.c, c)
}
func (h *counterHeap) Pop() any {
	c := h.c[len(h.c)-1]
	h.c = h.c[:len(h.c)-1]
	delete(h.pos, c.Value)
	return c
}

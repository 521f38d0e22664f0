package windowing

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Block is what the tracker knows of a block.
type Block struct {
	Instance string
	Seq      uint64
	Time     time.Time // event time (first packet)
	Arrived  time.Time // when the server stored it
	Name     string    // carried through to firings
}

// Kind classifies an arriving block.
type Kind string

// The kinds of Add's verdict.
const (
	InWindow   Kind = "in-window"
	InSeveral  Kind = "in-several-windows"
	LateBlock  Kind = "late"
	Duplicate  Kind = "duplicate"
	OutOfLeft  Kind = "out-of-left-boundary"
	OutOfRight Kind = "out-of-right-boundary"
	Unwanted   Kind = "unwanted"
	// TooLate is a block for a window past the late horizon: the tracker
	// no longer holds that window, so it is counted and dropped.
	TooLate Kind = "beyond-late-horizon"
)

// WindowID names a window: its site ("" when windows span all sites) and
// its index (time windows: k of Phase + k·Size; block windows: k of
// FirstSeq + k·SizeBlocks).
type WindowID struct {
	Instance string
	Index    int64
}

func (id WindowID) String() string {
	if id.Instance == "" {
		return fmt.Sprintf("all/%d", id.Index)
	}
	return fmt.Sprintf("%s/%d", id.Instance, id.Index)
}

// SeqRef names a block of a site.
type SeqRef struct {
	Instance string
	Seq      uint64
}

// Reason says why a window fired.
type Reason string

// Reasons.
const (
	Complete   Reason = "complete"
	MaxWait    Reason = "max_wait"
	MaxMissing Reason = "max_missing"
	Idle       Reason = "idle_timeout"
	Forced     Reason = "forced"
	Revised    Reason = "late_block"
)

// Firing is a window handed to its consumer.
type Firing struct {
	ID       WindowID
	From, To time.Time // time windows
	// FirstSeq and LastSeq bound a block window's sequence numbers.
	FirstSeq, LastSeq uint64
	Revision          int
	Reason            Reason
	Blocks            []Block  // in site and sequence order
	Missing           []SeqRef // known to be missing between the brackets
	Late              []SeqRef // arrived after an earlier firing
	At                time.Time
}

// Empty reports whether a firing has nothing for a program: no block,
// none missing, none late, and its first revision.
func (f Firing) Empty() bool {
	return len(f.Blocks) == 0 && len(f.Missing) == 0 && len(f.Late) == 0 && f.Revision == 1
}

// Follows reports whether f is the window right after prev, of the same
// site: the two belong to one stretch.
func (f Firing) Follows(prev Firing) bool {
	return f.ID.Instance == prev.ID.Instance && f.ID.Index == prev.ID.Index+1
}

// Status is an open window, for operators: what it holds and waits for.
type Status struct {
	ID       WindowID
	From, To time.Time
	Present  []SeqRef
	Missing  []SeqRef
	// Bracketed says a block beyond the end has arrived; WaitUntil is
	// when max_wait lets it fire (zero: no max_wait, or not bracketed).
	Bracketed bool
	WaitUntil time.Time
	// Blocked names the earlier window a strict ordering waits for.
	Blocked *WindowID
}

type site struct {
	name    string
	blocks  map[uint64]Block
	order   []uint64 // present seqs, sorted
	holes   map[uint64]struct{}
	maxSeq  uint64
	last    time.Time // last arrival
	lowOpen int64     // lowest window index not yet fired
	hasLow  bool
	dirty   bool      // a block came since the last evaluation
	wake    time.Time // when max_wait or idle_timeout may fire a window
	// floor is the lowest window whose blocks the site still holds (see
	// prune).
	floor    int64
	hasFloor bool
}

type window struct {
	id          WindowID
	beyond      time.Time // earliest arrival past the end, once known
	beyondKnown bool
	fired       bool
	revision    int
	members     []Block // at the last firing
	late        []SeqRef
	refire      bool
}

// Tracker follows arrivals and decides firings.
type Tracker struct {
	spec    Spec
	sites   map[string]*site
	windows map[WindowID]*window
	wanted  map[string]bool
	// replaying: blocks come again after a restart, their windows already
	// marked fired; they are not late.
	replaying bool
	tooLate   int64
	replayed  int
	// firedTop is the highest window fired, per site ("" for windows
	// across sites): what prune keeps is counted down from it.
	firedTop map[string]int64
}

// New returns a tracker for a valid spec.
func New(spec Spec) (*Tracker, error) {
	spec.Defaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	t := &Tracker{spec: spec, sites: map[string]*site{}, windows: map[WindowID]*window{}, firedTop: map[string]int64{}}
	if len(spec.Instances) > 0 {
		t.wanted = map[string]bool{}
		for _, i := range spec.Instances {
			t.wanted[i] = true
		}
	}
	return t, nil
}

// Spec returns the tracker's spec with defaults filled.
func (t *Tracker) Spec() Spec { return t.spec }

// index returns the window index holding event time tm.
func (t *Tracker) index(tm time.Time) int64 {
	d := tm.Sub(t.spec.Phase)
	idx := int64(d / t.spec.Size)
	if d < 0 && d%t.spec.Size != 0 {
		idx--
	}
	return idx
}

func (t *Tracker) bounds(idx int64) (time.Time, time.Time) {
	from := t.spec.Phase.Add(time.Duration(idx) * t.spec.Size)
	return from, from.Add(t.spec.Size)
}

func (t *Tracker) blockIndex(seq uint64) int64 {
	if seq < t.spec.FirstSeq {
		return -1
	}
	return int64((seq - t.spec.FirstSeq) / t.spec.SizeBlocks)
}

// inRange reports whether window idx lies inside the spec's range.
func (t *Tracker) inRange(idx int64) bool {
	if t.spec.SizeBlocks > 0 {
		return idx >= 0
	}
	from, to := t.bounds(idx)
	return (t.spec.From.IsZero() || !from.Before(t.spec.From)) && (t.spec.To.IsZero() || !to.After(t.spec.To))
}

func (t *Tracker) windowOf(instance string, idx int64) *window {
	if t.spec.AllInstances {
		instance = ""
	}
	id := WindowID{instance, idx}
	w := t.windows[id]
	if w == nil {
		w = &window{id: id}
		t.windows[id] = w
	}
	return w
}

// Add takes an arriving block and classifies it.
func (t *Tracker) Add(b Block) Kind {
	if t.wanted != nil && !t.wanted[b.Instance] {
		return Unwanted
	}
	s := t.sites[b.Instance]
	if s == nil {
		s = &site{name: b.Instance, blocks: map[uint64]Block{}, holes: map[uint64]struct{}{}}
		t.sites[b.Instance] = s
	}
	if _, dup := s.blocks[b.Seq]; dup {
		return Duplicate
	}
	if s.hasFloor && t.lastIndex(b) < s.floor {
		t.tooLate++
		return TooLate
	}
	s.blocks[b.Seq] = b
	i, _ := slices.BinarySearch(s.order, b.Seq)
	s.order = slices.Insert(s.order, i, b.Seq)
	switch {
	case len(s.order) == 1:
	case b.Seq > s.maxSeq:
		for q := s.maxSeq + 1; q < b.Seq && len(s.holes) < maxHoles; q++ {
			s.holes[q] = struct{}{}
		}
	default:
		delete(s.holes, b.Seq)
	}
	s.maxSeq = max(s.maxSeq, b.Seq)
	if b.Arrived.After(s.last) {
		s.last = b.Arrived
	}
	s.dirty = true
	// The block may be the first past the end of open windows.
	if s.hasLow && !t.spec.AllInstances {
		var top int64
		if t.spec.SizeBlocks > 0 {
			top = t.blockIndex(b.Seq) - 1
		} else {
			top = t.index(b.Time) - 1 // windows ending at or before b starts
		}
		for idx := s.lowOpen; idx <= top; idx++ {
			if w := t.windows[WindowID{b.Instance, idx}]; w != nil && w.beyondKnown && (w.beyond.IsZero() || b.Arrived.Before(w.beyond)) {
				w.beyond = b.Arrived
			}
		}
	}
	idxs := t.indexesOf(s, b)
	kind := InWindow
	if len(idxs) > 1 {
		kind = InSeveral
	}
	inside := false
	for _, idx := range idxs {
		if !t.inRange(idx) {
			continue
		}
		inside = true
		if s.hasFloor && idx < s.floor {
			kind = LateBlock // its window is past the horizon: held for the next, not refired
			continue
		}
		w := t.windowOf(b.Instance, idx)
		if w.fired {
			kind = LateBlock
			if t.replaying {
				continue
			}
			w.late = append(w.late, SeqRef{b.Instance, b.Seq})
			if t.spec.Late == LateRefire {
				w.refire = true
			}
			continue
		}
		if !s.hasLow || idx < s.lowOpen {
			s.lowOpen, s.hasLow = idx, true
		}
	}
	if !inside {
		if t.spec.SizeBlocks == 0 && !t.spec.From.IsZero() && b.Time.Before(t.spec.From) {
			return OutOfLeft
		}
		return OutOfRight
	}
	return kind
}

// lastIndex is the latest window a block may belong to, before the next
// block is known: the one it starts in, or under cutoff next/both the one
// after.
func (t *Tracker) lastIndex(b Block) int64 {
	if t.spec.SizeBlocks > 0 {
		return t.blockIndex(b.Seq)
	}
	idx := t.index(b.Time)
	if t.spec.Cutoff != CutoffStart {
		idx++
	}
	return idx
}

// maxHoles bounds the missing sequence numbers remembered per site, so a
// wild jump in numbering cannot exhaust memory.
const maxHoles = 1 << 20

// indexesOf returns the windows a block belongs to under the cutoff.
func (t *Tracker) indexesOf(s *site, b Block) []int64 {
	if t.spec.SizeBlocks > 0 {
		return []int64{t.blockIndex(b.Seq)}
	}
	idx := t.index(b.Time)
	if t.spec.Cutoff == CutoffStart {
		return []int64{idx}
	}
	// The block straddles a boundary when the next block starts in a later
	// window; while the next block is unknown, it counts where it starts.
	next, ok := s.blocks[b.Seq+1]
	if !ok || t.index(next.Time) == idx || next.Time.Equal(t.spec.Phase.Add(time.Duration(idx+1)*t.spec.Size)) {
		return []int64{idx}
	}
	if t.spec.Cutoff == CutoffNext {
		return []int64{idx + 1}
	}
	return []int64{idx, idx + 1}
}

// span is where a window stands: the sequence range (lo, hi) exclusive
// that must be present, whether its start and end are bracketed, and the
// earliest arrival of a block beyond its end (zero: none yet).
type span struct {
	li, ri      int // s.order[li:ri] start in the window (time windows)
	lo, hi      uint64
	left, right bool
	beyond      time.Time
}

// bracket finds a window's span on a site.
func (t *Tracker) bracket(s *site, w *window) span {
	idx := w.id.Index
	var sp span
	if t.spec.SizeBlocks > 0 {
		first := t.spec.FirstSeq + uint64(idx)*t.spec.SizeBlocks
		sp.lo, sp.hi, sp.left, sp.right = first-1, first+t.spec.SizeBlocks, true, true // the range is known: no brackets needed
		sp.ri = sort.Search(len(s.order), func(i int) bool { return s.order[i] >= sp.hi })
		sp.beyond = t.beyond(s, w, sp.ri)
		return sp
	}
	from, to := t.bounds(idx)
	// L: the last present block starting before from; R: the first
	// starting at or after to. Times grow with sequence numbers.
	sp.li = sort.Search(len(s.order), func(i int) bool { return !s.blocks[s.order[i]].Time.Before(from) })
	sp.ri = sort.Search(len(s.order), func(i int) bool { return !s.blocks[s.order[i]].Time.Before(to) })
	switch {
	case sp.li > 0:
		sp.lo, sp.left = s.order[sp.li-1], true
	case sp.li < len(s.order) && s.order[sp.li] == t.spec.FirstSeq:
		sp.lo, sp.left = t.spec.FirstSeq-1, true // the stream began in this window
	case sp.li < len(s.order):
		sp.lo = s.order[sp.li] - 1
	}
	if sp.ri < len(s.order) {
		sp.hi, sp.right = s.order[sp.ri], true
		sp.beyond = t.beyond(s, w, sp.ri)
	} else {
		sp.hi = s.maxSeq + 1
	}
	return sp
}

// beyond returns the earliest arrival of a block past a window's end. It
// is found once by a scan, then kept up to date by Add.
func (t *Tracker) beyond(s *site, w *window, ri int) time.Time {
	if !w.beyondKnown {
		w.beyondKnown = true
		for _, q := range s.order[ri:] {
			if a := s.blocks[q].Arrived; w.beyond.IsZero() || a.Before(w.beyond) {
				w.beyond = a
			}
		}
	}
	return w.beyond
}

// collect returns a window's blocks on a site.
func (t *Tracker) collect(s *site, idx int64, sp span) []Block {
	var blocks []Block
	if t.spec.SizeBlocks > 0 {
		for q := sp.lo + 1; q < sp.hi; q++ {
			if b, ok := s.blocks[q]; ok {
				blocks = append(blocks, b)
			}
		}
		return blocks
	}
	for _, q := range s.order[sp.li:sp.ri] {
		b := s.blocks[q]
		if t.spec.Cutoff == CutoffStart || slices.Contains(t.indexesOf(s, b), idx) {
			blocks = append(blocks, b)
		}
	}
	// Under cutoff next/both, the straddling block before from belongs
	// here too.
	if t.spec.Cutoff != CutoffStart && sp.li > 0 {
		b := s.blocks[s.order[sp.li-1]]
		if slices.Contains(t.indexesOf(s, b), idx) {
			blocks = append([]Block{b}, blocks...)
		}
	}
	return blocks
}

// members returns a site's blocks of window idx with its span.
func (t *Tracker) members(s *site, idx int64) (blocks []Block, lo, hi uint64, left, right bool, beyondSince time.Time) {
	w := t.windowOf(s.name, idx)
	if t.spec.AllInstances {
		// Windows across sites keep no per-site cache.
		w = &window{id: WindowID{s.name, idx}}
	}
	sp := t.bracket(s, w)
	return t.collect(s, idx, sp), sp.lo, sp.hi, sp.left, sp.right, sp.beyond
}

// missing returns the holes of a site strictly between lo and hi.
func (s *site) missing(lo, hi uint64) []SeqRef {
	var out []SeqRef
	if hi-lo > uint64(len(s.holes))*4 {
		for q := range s.holes {
			if q > lo && q < hi {
				out = append(out, SeqRef{s.name, q})
			}
		}
		slices.SortFunc(out, func(a, b SeqRef) int { return int(a.Seq) - int(b.Seq) })
		return out
	}
	for q := lo + 1; q < hi; q++ {
		if _, ok := s.blocks[q]; !ok {
			out = append(out, SeqRef{s.name, q})
		}
	}
	return out
}

// Due returns the windows that fire at now, each marked fired.
func (t *Tracker) Due(now time.Time) []Firing {
	var out []Firing
	names := make([]string, 0, len(t.sites))
	for n := range t.sites {
		names = append(names, n)
	}
	sort.Strings(names)
	if t.spec.AllInstances {
		out := t.dueAll(now, names)
		// Each site's lowest open window moves past those fired across
		// sites, so prune can count its horizon from there.
		for _, s := range t.sites {
			for s.hasLow && s.lowOpen <= t.topIndex(s) {
				if w := t.windows[WindowID{"", s.lowOpen}]; w == nil || !w.fired && t.inRange(s.lowOpen) {
					break
				}
				s.lowOpen++
			}
		}
		t.prune()
		return out
	}
	for _, n := range names {
		s := t.sites[n]
		if !s.hasLow || !s.dirty && (s.wake.IsZero() || now.Before(s.wake)) {
			continue // nothing came and no deadline passed
		}
		s.dirty, s.wake = false, time.Time{}
		top := t.topIndex(s)
		for idx := s.lowOpen; idx <= top; idx++ {
			w := t.windowOf(n, idx)
			if w.fired {
				if idx == s.lowOpen {
					s.lowOpen++
				}
				continue
			}
			if !t.inRange(idx) {
				if idx == s.lowOpen {
					s.lowOpen++
				}
				continue
			}
			f, ok := t.decide(s, w, now)
			if !ok {
				if t.spec.Ordering == StrictOrder {
					break
				}
				continue
			}
			out = append(out, f)
			if idx == s.lowOpen {
				s.lowOpen++
			}
		}
	}
	out = append(out, t.refires(now)...)
	t.prune()
	return out
}

// topIndex is the window of a site's latest block.
func (t *Tracker) topIndex(s *site) int64 {
	if len(s.order) == 0 {
		return s.lowOpen
	}
	last := s.blocks[s.order[len(s.order)-1]]
	if t.spec.SizeBlocks > 0 {
		return t.blockIndex(last.Seq)
	}
	return t.index(last.Time)
}

// decide fires a site's window if it may fire now; otherwise it notes
// when the clock alone may fire it.
func (t *Tracker) decide(s *site, w *window, now time.Time) (Firing, bool) {
	sp := t.bracket(s, w)
	miss := s.missing(sp.lo, sp.hi)
	var reason Reason
	switch {
	case sp.left && sp.right && len(miss) == 0:
		reason = Complete
	case sp.left && sp.right && t.allowedMissing(len(miss), int(sp.hi-sp.lo-1)):
		reason = MaxMissing
	case !sp.beyond.IsZero() && t.spec.MaxWait > 0 && !now.Before(sp.beyond.Add(t.spec.MaxWait)):
		reason = MaxWait
	case t.spec.IdleTimeout > 0 && sp.beyond.IsZero() && !now.Before(s.last.Add(t.spec.IdleTimeout)) && len(t.collect(s, w.id.Index, sp)) > 0:
		reason = Idle
	default:
		if !sp.beyond.IsZero() && t.spec.MaxWait > 0 {
			s.wakeAt(sp.beyond.Add(t.spec.MaxWait))
		}
		if t.spec.IdleTimeout > 0 && sp.beyond.IsZero() {
			s.wakeAt(s.last.Add(t.spec.IdleTimeout))
		}
		return Firing{}, false
	}
	return t.fire(w, t.collect(s, w.id.Index, sp), miss, reason, now), true
}

func (s *site) wakeAt(at time.Time) {
	if s.wake.IsZero() || at.Before(s.wake) {
		s.wake = at
	}
}

// allowedMissing reports whether a bracketed window may fire with n of
// its total sequence numbers missing.
func (t *Tracker) allowedMissing(n, total int) bool {
	if t.spec.MaxMissing > 0 && n <= t.spec.MaxMissing {
		return true
	}
	return t.spec.MaxMissingPct > 0 && total > 0 && float64(n) <= math.Floor(t.spec.MaxMissingPct/100*float64(total))
}

func (t *Tracker) fire(w *window, blocks []Block, miss []SeqRef, reason Reason, now time.Time) Firing {
	w.fired = true
	w.revision++
	w.members = blocks
	t.noteFired(w.id)
	f := Firing{ID: w.id, Revision: w.revision, Reason: reason, Blocks: blocks, Missing: miss, Late: slices.Clone(w.late), At: now}
	if t.spec.SizeBlocks > 0 {
		f.FirstSeq = t.spec.FirstSeq + uint64(w.id.Index)*t.spec.SizeBlocks
		f.LastSeq = f.FirstSeq + t.spec.SizeBlocks - 1
	} else {
		f.From, f.To = t.bounds(w.id.Index)
	}
	return f
}

// refires fires again the windows that late blocks changed, when the spec
// asks for it.
func (t *Tracker) refires(now time.Time) []Firing {
	var ids []WindowID
	for id, w := range t.windows {
		if w.refire {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b WindowID) int {
		if a.Instance != b.Instance {
			return cmpString(a.Instance, b.Instance)
		}
		return int(a.Index - b.Index)
	})
	var out []Firing
	for _, id := range ids {
		w := t.windows[id]
		w.refire = false
		var blocks []Block
		var miss []SeqRef
		for _, s := range t.sitesOf(id) {
			b, lo, hi, _, _, _ := t.members(s, id.Index)
			blocks = append(blocks, b...)
			miss = append(miss, s.missing(lo, hi)...)
		}
		out = append(out, t.fire(w, blocks, miss, Revised, now))
	}
	return out
}

func (t *Tracker) sitesOf(id WindowID) []*site {
	if id.Instance != "" {
		return []*site{t.sites[id.Instance]}
	}
	names := make([]string, 0, len(t.sites))
	for n := range t.sites {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*site, len(names))
	for i, n := range names {
		out[i] = t.sites[n]
	}
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// dueAll decides windows that span every site: complete when each site's
// part is; max_wait counts from the earliest arrival beyond the end at any
// site.
func (t *Tracker) dueAll(now time.Time, names []string) []Firing {
	low, top, any := int64(math.MaxInt64), int64(math.MinInt64), false
	for _, n := range names {
		s := t.sites[n]
		if !s.hasLow {
			continue
		}
		any = true
		low, top = min(low, s.lowOpen), max(top, t.topIndex(s))
	}
	if !any {
		return nil
	}
	var out []Firing
	for idx := low; idx <= top; idx++ {
		w := t.windowOf("", idx)
		if w.fired || !t.inRange(idx) {
			continue
		}
		var (
			blocks             []Block
			miss               []SeqRef
			complete, bracketd = true, true
			beyond             time.Time
			idle               = t.spec.IdleTimeout > 0
		)
		for _, n := range names {
			s := t.sites[n]
			b, lo, hi, left, right, bs := t.members(s, idx)
			m := s.missing(lo, hi)
			blocks, miss = append(blocks, b...), append(miss, m...)
			complete = complete && left && right && len(m) == 0
			bracketd = bracketd && right
			if right && (beyond.IsZero() || bs.Before(beyond)) {
				beyond = bs
			}
			idle = idle && now.Sub(s.last) >= t.spec.IdleTimeout
		}
		var reason Reason
		switch {
		case complete:
			reason = Complete
		case bracketd && t.allowedMissing(len(miss), 0):
			reason = MaxMissing
		case !beyond.IsZero() && t.spec.MaxWait > 0 && !now.Before(beyond.Add(t.spec.MaxWait)):
			reason = MaxWait
		case idle && len(blocks) > 0:
			reason = Idle
		default:
			if t.spec.Ordering == StrictOrder {
				return append(out, t.refires(now)...)
			}
			continue
		}
		out = append(out, t.fire(w, blocks, miss, reason, now))
	}
	return append(out, t.refires(now)...)
}

// WindowAt names the window of a site holding event time tm (time
// windows) or sequence number seq (block windows).
func (t *Tracker) WindowAt(instance string, tm time.Time, seq uint64) WindowID {
	if t.spec.AllInstances {
		instance = ""
	}
	if t.spec.SizeBlocks > 0 {
		return WindowID{instance, t.blockIndex(seq)}
	}
	return WindowID{instance, t.index(tm)}
}

// Force fires a window now, whatever it waits for.
func (t *Tracker) Force(id WindowID, now time.Time) (Firing, error) {
	w := t.windows[id]
	if w == nil || w.fired {
		return Firing{}, fmt.Errorf("window %s is not open", id)
	}
	var blocks []Block
	var miss []SeqRef
	for _, s := range t.sitesOf(id) {
		if s == nil {
			return Firing{}, fmt.Errorf("window %s: no such site", id)
		}
		b, lo, hi, _, _, _ := t.members(s, id.Index)
		blocks = append(blocks, b...)
		miss = append(miss, s.missing(lo, hi)...)
		// Windows behind this one (strict order) may be free to go now:
		// look at the site again at the next Due.
		s.dirty = true
	}
	return t.fire(w, blocks, miss, Forced, now), nil
}

// MarkFired records a window fired before (at revision), as after a
// restart replays the arrivals.
func (t *Tracker) MarkFired(id WindowID, revision int) {
	w := t.windows[id]
	if w == nil {
		w = &window{id: id}
		t.windows[id] = w
	}
	w.fired, w.revision, w.refire, w.late = true, revision, false, nil
	t.noteFired(id)
}

// noteFired remembers the highest window fired per site (every site for a
// window across sites), which bounds what prune keeps.
func (t *Tracker) noteFired(id WindowID) {
	if top, ok := t.firedTop[id.Instance]; !ok || id.Index > top {
		t.firedTop[id.Instance] = id.Index
	}
}

// Needed reports whether a block seen before a restart may still matter
// to the tracker, given the lowest block its site still owes: one in the
// late horizon (and a window more, for brackets) below low's window.
// Blocks it refuses need not be replayed; walking down a site, replay
// those it accepts and one more.
func (t *Tracker) Needed(low, b Block) bool {
	return t.lastIndex(b) >= t.lastIndex(low)-t.spec.LateHorizon-1
}

// Replay adds blocks seen before a restart, whose windows MarkFired has
// marked: a block of a fired window is not late, only held for the
// brackets and the horizon. Prune as it goes.
func (t *Tracker) Replay(b Block) Kind {
	t.replaying = true
	defer func() { t.replaying = false }()
	if t.replayed++; t.replayed%4096 == 0 {
		t.prune()
	}
	return t.Add(b)
}

// prune forgets what no window can need: per site, the blocks and fired
// windows more than LateHorizon windows below the lowest one still open
// (or the highest fired, when none is open), keeping the last block
// below them as the next window's left bracket. So the tracker holds the
// open windows and the horizon, whatever the history.
func (t *Tracker) prune() {
	floorAll, anyAll := int64(math.MaxInt64), false
	for _, s := range t.sites {
		key := s.name
		if t.spec.AllInstances {
			key = ""
		}
		top, fired := t.firedTop[key]
		var low int64
		switch {
		case s.hasLow && fired:
			low = min(s.lowOpen, top+1)
		case s.hasLow:
			low = s.lowOpen
		case fired:
			low = top + 1
		default:
			continue
		}
		floor := low - t.spec.LateHorizon
		if s.hasFloor && floor <= s.floor {
			if t.spec.AllInstances {
				floorAll, anyAll = min(floorAll, s.floor), true
			}
			continue
		}
		s.floor, s.hasFloor = floor, true
		if t.spec.AllInstances {
			floorAll, anyAll = min(floorAll, floor), true
		}
		// Blocks wholly below the floor go, but the last of them.
		k := 0
		for k < len(s.order) && t.lastIndex(s.blocks[s.order[k]]) < floor {
			if next, ok := s.blocks[s.order[k]+1]; ok && t.index(next.Time) >= floor && t.spec.Cutoff != CutoffStart {
				break // it may straddle into a held window
			}
			k++
		}
		if k > 1 {
			for _, q := range s.order[:k-1] {
				delete(s.blocks, q)
			}
			s.order = slices.Delete(s.order, 0, k-1)
			for q := range s.holes {
				if q < s.order[0] {
					delete(s.holes, q)
				}
			}
		}
		if !t.spec.AllInstances {
			for id := range t.windows {
				if id.Instance == s.name && id.Index < floor && t.windows[id].fired && !t.windows[id].refire {
					delete(t.windows, id)
				}
			}
		}
	}
	if anyAll {
		for id, w := range t.windows {
			if id.Index < floorAll && w.fired && !w.refire {
				delete(t.windows, id)
			}
		}
	}
}

// Held returns how many blocks and windows the tracker holds: what its
// memory is made of.
func (t *Tracker) Held() (blocks, windows int) {
	for _, s := range t.sites {
		blocks += len(s.blocks)
	}
	return blocks, len(t.windows)
}

// TooLateCount returns how many blocks came for windows past the late
// horizon and were dropped.
func (t *Tracker) TooLateCount() int64 { return t.tooLate }

// Open lists the windows waiting to fire, per site in index order.
func (t *Tracker) Open(now time.Time) []Status {
	var out []Status
	for _, s := range t.sitesOf(WindowID{}) {
		if !s.hasLow {
			continue
		}
		var blocked *WindowID
		for idx := s.lowOpen; idx <= t.topIndex(s); idx++ {
			w := t.windowOf(s.name, idx)
			if w.fired || !t.inRange(idx) {
				continue
			}
			blocks, lo, hi, _, right, beyond := t.members(s, idx)
			st := Status{ID: w.id, Missing: s.missing(lo, hi), Bracketed: right && !beyond.IsZero(), Blocked: blocked}
			if t.spec.SizeBlocks == 0 {
				st.From, st.To = t.bounds(idx)
			}
			for _, b := range blocks {
				st.Present = append(st.Present, SeqRef{b.Instance, b.Seq})
			}
			if !beyond.IsZero() && t.spec.MaxWait > 0 {
				st.WaitUntil = beyond.Add(t.spec.MaxWait)
			}
			out = append(out, st)
			if t.spec.Ordering == StrictOrder && blocked == nil {
				id := w.id
				blocked = &id
			}
		}
	}
	return out
}

// NextCheck returns when Due may next fire something by the clock alone
// (max_wait or idle_timeout), or zero when only arrivals can. It is
// accurate after a call of Due.
func (t *Tracker) NextCheck(now time.Time) time.Time {
	var next time.Time
	for _, s := range t.sites {
		if !s.wake.IsZero() && (next.IsZero() || s.wake.Before(next)) {
			next = s.wake
		}
	}
	if t.spec.AllInstances && t.spec.IdleTimeout > 0 {
		for _, s := range t.sites {
			if at := s.last.Add(t.spec.IdleTimeout); s.hasLow && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	return next
}

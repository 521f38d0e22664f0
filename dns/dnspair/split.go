package dnspair

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/dns/dnsrec"
)

// Blocks of one site are paired in parallel, each on its own, as dnsrec
// reads them (dnsrec.Extractor.SplitEdges), and a join takes what they
// leave in sequence order. What a block decides alone is what the uncut
// capture decides, because:
//
//   - A message dnsrec completes only at the join (a TCP stream begun in
//     an earlier block, any IP fragment) is between two hosts the block
//     saw an edge packet of. From that packet on, the block's messages
//     between those hosts, and its queries between them still waiting,
//     go to the join, which pairs them in packet order with what the
//     join completes (Taint).
//   - A query of an earlier block waits at most the window, so only the
//     block's messages of its first two windows can meet one (a
//     response answering it, a query resending it): they go to the
//     join, with every other message of their keys (Key) in the block,
//     to be paired with the queries carried there.
//   - A query the block has not seen answered when its window ends is
//     unanswered whatever comes after; those still waiting at the block's
//     end go on to the join and the next blocks.
//
// What goes to the join is bounded by a budget; past it the block
// decides alone and counts the decisions that may differ (Inexact). With
// more than MaxPending queries waiting, which are evicted may depend on
// the cut.

// hosts is an unordered pair of addresses.
type hosts struct{ a, b netip.Addr }

func hostsOf(x, y netip.Addr) hosts {
	if y.Less(x) {
		x, y = y, x
	}
	return hosts{x, y}
}

// held is a block's message, or one of its waiting queries, left to the
// join: its packet's place in the block and the packet clock there.
type held struct {
	idx   int
	clock time.Time
	rec   *dnsrec.Record // a copy; nil for a query taken from waiting
	key   Key
	q     Query
}

// clockAt is the block's packet clock at one of its edge packets.
type clockAt struct {
	idx   int
	clock time.Time
}

// splitState is a Pairer's block being paired on its own.
type splitState struct {
	t0      time.Time // the block's first message's time
	started bool
	tainted map[hosts]bool
	keys    map[Key]bool // keys whose messages go to the join
	// waiting are the queries waiting of each pair of hosts (a list
	// through entry.hnext), so a tainted pair's go to the join at once.
	waiting map[hosts]*entry
	held    []held
	bytes   int
	budget  int
	clocks  []clockAt
	inexact int64
}

// Edge is what a block paired on its own leaves to the join.
type Edge struct {
	held    []held
	waiting []*entry // the block's own queries still waiting, in arrival order
	clock   time.Time
	clocks  []clockAt
	tainted map[hosts]bool
	// Inexact counts decisions the block made alone past its budget that
	// the uncut capture may make otherwise.
	Inexact int64
}

// Split makes the Pairer pair one block on its own (see Edge): give it
// the block's records with AddAt and its edge packets with Taint, then
// take Edge. budget bounds the bytes of what it leaves to the join.
func (p *Pairer) Split(budget int) {
	p.split = &splitState{tainted: map[hosts]bool{}, keys: map[Key]bool{}, waiting: map[hosts]*entry{}, budget: budget}
}

// Taint says the block's packet idx, between a and b, goes to the
// block's edge: the join may complete messages between those hosts.
func (p *Pairer) Taint(idx int, a, b netip.Addr) {
	s := p.split
	s.clocks = append(s.clocks, clockAt{idx, p.clock})
	h := hostsOf(a, b)
	if s.tainted[h] {
		return
	}
	s.tainted[h] = true
	for e := s.waiting[h]; e != nil; {
		next := e.hnext
		if !s.hold(held{idx: e.idx, clock: e.at, key: e.key, q: e.q}, 128) {
			s.inexact++
			e = next
			continue
		}
		p.remove(e)
		e = next
	}
}

// hold keeps h for the join unless the budget is spent.
func (s *splitState) hold(h held, size int) bool {
	if s.bytes+size > s.budget {
		return false
	}
	s.bytes += size
	s.held = append(s.held, h)
	return true
}

// AddAt takes the block's next record, completed by its packet idx.
func (p *Pairer) AddAt(r *dnsrec.Record, idx int) {
	s := p.split
	if !s.started {
		s.t0, s.started = r.Time, true
	}
	if r.Size >= 12 {
		k := keyOf(r)
		if s.tainted[hostsOf(r.Src, r.Dst)] || s.keys[k] || !r.Time.After(s.t0.Add(2*p.window())) {
			if s.bytes+r.Size+256 > s.budget {
				s.inexact++ // past the budget: decided here, as if alone
				p.addAt(r, idx)
				return
			}
			at := p.clock
			p.advance(r.Time)
			p.taintKey(k)
			if s.hold(held{idx: idx, clock: at, rec: clone(r)}, r.Size+256) {
				return
			}
			s.inexact++
			p.addAt(r, idx)
			return
		}
	}
	p.addAt(r, idx)
}

// keyOf is the key a record's query and response share.
func keyOf(r *dnsrec.Record) Key {
	if r.Msg.QR {
		return Key{TCP: r.TCP, Client: r.Dst, Server: r.Src, ClientPort: r.DstPort, ServerPort: r.SrcPort, ID: r.Msg.ID}
	}
	return Key{TCP: r.TCP, Client: r.Src, Server: r.Dst, ClientPort: r.SrcPort, ServerPort: r.DstPort, ID: r.Msg.ID}
}

// taintKey sends k's messages to the join from here on, with its
// queries waiting now.
func (p *Pairer) taintKey(k Key) {
	s := p.split
	if s.keys[k] {
		return
	}
	s.keys[k] = true
	for e := p.pending[k]; e != nil; {
		next := e.same
		if s.hold(held{idx: e.idx, clock: e.at, key: e.key, q: e.q}, 128) {
			p.remove(e)
		} else {
			s.inexact++
		}
		e = next
	}
}

// clone copies what a transaction keeps of a record past the emit call.
func clone(r *dnsrec.Record) *dnsrec.Record {
	c := *r
	c.Msg.Answer = slices.Clone(r.Msg.Answer)
	c.Msg.Authority, c.Msg.Additional, c.Msg.Options, c.Msg.EDE = nil, nil, nil, nil
	return &c
}

// Edge returns what the block leaves to the join, once its last record
// is in; the queries still waiting go with it, and the Pairer is done
// with.
func (p *Pairer) Edge() *Edge {
	s := p.split
	slices.SortStableFunc(s.held, func(a, b held) int { return cmp.Compare(a.idx, b.idx) })
	e := &Edge{held: s.held, clock: p.clock, clocks: s.clocks, tainted: s.tainted, Inexact: s.inexact}
	for q := p.head; q != nil; q = q.next {
		e.waiting = append(e.waiting, q)
	}
	return e
}

// Joining is a block's edge being joined: the Pairer goes on from the
// state of the blocks before (LoadState) with what the block left, in
// packet order, between the records the join completes.
type Joining struct {
	p       *Pairer
	e       *Edge
	next    int
	clock   int
	Inexact int64
}

// Join starts joining a block's edge. Call Before with each edge
// packet's place as the join replays it (dnsrec.Joiner.Before), Add
// with the records it completes, and End.
func (p *Pairer) Join(e *Edge) *Joining {
	return &Joining{p: p, e: e, Inexact: e.Inexact}
}

// Before pairs what the block left before its packet idx.
func (j *Joining) Before(idx int) {
	for ; j.next < len(j.e.held) && j.e.held[j.next].idx < idx; j.next++ {
		h := &j.e.held[j.next]
		j.p.advance(h.clock)
		if h.rec != nil {
			j.p.Add(h.rec)
		} else {
			j.p.requeue(h.key, h.q)
		}
	}
	for ; j.clock < len(j.e.clocks) && j.e.clocks[j.clock].idx <= idx; j.clock++ {
		j.p.advance(j.e.clocks[j.clock].clock)
	}
}

// Add pairs a record the join completed.
func (j *Joining) Add(r *dnsrec.Record) {
	if !j.e.tainted[hostsOf(r.Src, r.Dst)] {
		j.Inexact++ // a message the block could not see coming (salvaged past a hole, in a tunnel)
	}
	j.p.Add(r)
}

// End pairs the rest of what the block left; the block's own queries
// still waiting wait on.
func (j *Joining) End() {
	j.Before(math.MaxInt)
	for _, e := range j.e.waiting {
		j.p.requeue(e.key, e.q)
	}
	j.p.advance(j.e.clock)
}

// advance moves the packet clock to t, if later, deciding the queries
// whose window passed.
func (p *Pairer) advance(t time.Time) {
	if t.After(p.clock) {
		p.clock = t
		p.expire()
	}
}

// requeue takes a waiting query back in arrival order.
func (p *Pairer) requeue(k Key, q Query) {
	if p.n >= p.maxPending() {
		p.drop(p.head, true)
	}
	p.push(&entry{key: k, q: q})
}

// Package dnstcp turns TCP segments into the DNS messages they carry
// (RFC 1035 §4.2.2: each message behind a two-byte length). It follows
// each direction of each connection on its own: in order, out of order,
// retransmitted or overlapping segments, several messages in a segment
// and one message across many, and connections that began before the
// capture. Memory is bounded: per stream, in total, and by an idle
// timeout in packet time.
//
// Holes: when a stream's missing bytes do not arrive while later data
// piles up (or by the end), the stream resumes at the next segment that
// starts with a plausible message, as tshark does by default. A message
// is plausible when its length is at least a DNS header and it parses.
package dnstcp

import (
	"container/heap"
	"container/list"
	"encoding/binary"
	"net/netip"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/pcap/netpkt"
)

// Key names one direction of a connection.
type Key struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
}

// Emit receives a message: the direction it travelled, the time of the
// segment that completed it, and its bytes (valid only during the call).
type Emit func(k Key, t time.Time, msg []byte)

// Reassembler follows TCP streams. The zero value is ready, with defaults.
type Reassembler struct {
	// MaxStreams bounds the streams followed at once; the least recently
	// active goes first. 65536 when zero.
	MaxStreams int
	// MaxPending bounds the out-of-order bytes one stream holds before it
	// gives up on its hole. 256 KiB when zero.
	MaxPending int
	// MaxSegments bounds the segments one stream holds beyond a hole
	// (1-byte segments would otherwise be 256 Ki of them). 4096 when zero.
	MaxSegments int
	// Idle drops streams without a segment for this long in packet time.
	// 2 minutes when zero.
	Idle time.Duration
	// MaxBytes bounds the bytes held by all streams together (in-order
	// bytes of unfinished messages and segments beyond holes). It is
	// checked before a segment's bytes are kept: the least recently
	// active streams are let go first. DefaultMaxBytes when zero.
	MaxBytes int
	// Expired, when set, receives what streams that ended idle held
	// beyond their holes, whichever packet found them idle; without it
	// the Emit of that packet does.
	Expired Emit
	// Lost, when set, receives the start of a message a bound made its
	// stream let go of (Why says which): the bytes held after its length,
	// the length it announced, and when the last of them came. Streams
	// let go for room also salvage, through Expired, the whole messages
	// they held beyond their holes. Without it the start is dropped
	// uncounted, as at a capture's end.
	Lost func(k Key, t time.Time, head []byte, want int, why Why)

	streams map[Key]*list.Element // of *stream
	check   dnsmsg.Parser         // of each stream's first message
	lru     list.List             // front: most recently active
	sweep   time.Time
	bytes   int // held by all streams

	// Counters for reports and tests.
	Evicted, Skipped int // streams evicted for room; holes given up on
}

// Why is the bound a message was let go of for.
type Why int

const (
	// ForRoom: its stream was let go to keep MaxBytes or MaxStreams.
	ForRoom Why = iota + 1
	// AtHole: its stream gave up on the hole after it, as MaxPending or
	// MaxSegments bytes or segments piled up behind the hole.
	AtHole
)

// DefaultMaxBytes is the bytes all streams of a Reassembler may hold
// together unless MaxBytes says otherwise: 256 streams each a whole
// message short, or a few dozen holding segments beyond a hole.
const DefaultMaxBytes = 16 << 20

type stream struct {
	key     Key
	started bool
	next    uint32 // the sequence number of the next in-order byte
	nextAbs int64  // the same, counted from the stream's start (no wrap)
	synced  bool   // buf starts at a message boundary
	buf     []byte // in-order bytes not yet made into messages
	times   []span // when buf's bytes came, in order
	// borrowed says buf is the bytes of the segment being added, not a
	// copy: most segments carry whole messages, which extract takes
	// from them in place; own copies what is left before Add returns.
	borrowed bool
	one      [1]span // times' room for one segment
	// pending holds segments beyond a hole, by offset: a heap, so each
	// segment costs O(log n) however many wait (a list made 300,000
	// one-byte segments quadratic); held dedupes retransmissions.
	pending      segHeap
	held         map[int64]int // offset → longest length held there
	pendingBytes int
	last         time.Time
	// synAt is when the stream's SYN (without ACK: the side that opened
	// the connection) came; rtt, once measured, the time from it to the
	// stream's first ACK, which acknowledges the SYN-ACK (tshark's
	// tcp.analysis.initial_rtt).
	synAt  time.Time
	rtt    time.Duration
	hasRTT bool
}

// span is a run of buf's bytes that came in one segment at t.
type span struct {
	n int
	t time.Time
}

type segment struct {
	off  int64 // absolute offset in the stream
	data []byte
	t    time.Time // when the segment came
}

type segHeap []segment

func (h segHeap) Len() int           { return len(h) }
func (h segHeap) Less(i, j int) bool { return h[i].off < h[j].off }
func (h segHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *segHeap) Push(x any)        { *h = append(*h, x.(segment)) }
func (h *segHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	*h = old[:len(old)-1]
	return g
}

func (r *Reassembler) init() {
	if r.streams != nil {
		return
	}
	r.streams = map[Key]*list.Element{}
	if r.MaxStreams == 0 {
		r.MaxStreams = 1 << 16
	}
	if r.MaxPending == 0 {
		r.MaxPending = 256 << 10
	}
	if r.MaxSegments == 0 {
		r.MaxSegments = 4096
	}
	if r.Idle == 0 {
		r.Idle = 2 * time.Minute
	}
	if r.MaxBytes == 0 {
		r.MaxBytes = DefaultMaxBytes
	}
}

// size is what a stream holds, for the byte budget.
func (s *stream) size() int { return cap(s.buf) + s.pendingBytes }

// Bytes returns the bytes all streams hold now.
func (r *Reassembler) Bytes() int { return r.bytes }

// RTT returns the handshake round-trip time of the stream k, from its
// SYN to its ACK of the SYN-ACK, when k opened its connection and both
// were seen. An Emit may ask it of the stream it is called for.
func (r *Reassembler) RTT(k Key) (time.Duration, bool) {
	if el := r.streams[k]; el != nil {
		s := el.Value.(*stream)
		return s.rtt, s.hasRTT
	}
	return 0, false
}

// Streams returns how many streams are followed now.
func (r *Reassembler) Streams() int { return len(r.streams) }

// Add takes one TCP segment seen at time now and emits the messages it
// completes.
func (r *Reassembler) Add(now time.Time, p *netpkt.Packet, emit Emit) {
	r.init()
	r.expire(now, emit)
	k := Key{p.Src, p.Dst, p.SrcPort, p.DstPort}
	el := r.streams[k]
	if el != nil && now.Sub(el.Value.(*stream).last) > r.Idle {
		// Idle for longer than Idle: over, whether or not a sweep came
		// by since. Deciding it here, for this stream alone, makes the
		// outcome independent of when sweeps ran, and so of where a
		// capture was cut.
		r.finish(el.Value.(*stream), r.expiredEmit(emit))
		r.remove(el)
		el = nil
	}
	if p.Flags&netpkt.FlagRST != 0 {
		if el != nil {
			r.remove(el)
		}
		return
	}
	if el == nil {
		if len(p.Payload) == 0 && p.Flags&netpkt.FlagSYN == 0 {
			return // a pure ACK or FIN must not start a stream
		}
		for len(r.streams) >= r.MaxStreams {
			r.evict(r.lru.Back(), emit)
		}
		el = r.lru.PushFront(&stream{key: k})
		r.streams[k] = el
	} else {
		r.lru.MoveToFront(el)
	}
	s := el.Value.(*stream)
	s.last = now
	before := s.size()
	seq := p.Seq
	if p.Flags&netpkt.FlagSYN != 0 {
		*s = stream{key: k, started: true, next: seq + 1, synced: true, last: now}
		if p.Flags&netpkt.FlagACK == 0 {
			s.synAt = now
		}
		seq++
	} else if p.Flags&netpkt.FlagACK != 0 && !s.synAt.IsZero() && !s.hasRTT {
		s.rtt, s.hasRTT = now.Sub(s.synAt), true
	}
	if len(p.Payload) > 0 {
		// The budget is checked before the bytes are kept: other streams
		// are let go, least recently active first, to make room.
		for r.bytes-before+s.size()+len(p.Payload) > r.MaxBytes && r.lru.Back() != el {
			r.evict(r.lru.Back(), emit)
		}
		if !s.started {
			s.started, s.next = true, seq
		}
		s.add(seq, p.Payload, now)
		if s.pendingBytes > r.MaxPending || len(s.pending) > r.MaxSegments {
			r.lose(s, AtHole)
			s.skipHole()
			r.Skipped++
		}
		s.extract(emit, &r.check)
		s.own()
	}
	r.bytes += s.size() - before
	if p.Flags&netpkt.FlagFIN != 0 && len(s.pending) == 0 {
		r.remove(el) // nothing more will come; what is left is a partial message
		return
	}
	if r.bytes > r.MaxBytes {
		// One stream alone is over the budget (a budget below
		// MaxPending): it goes too.
		r.evict(el, emit)
	}
}

// evict lets a stream go for room: the start of the message it was
// in the middle of is lost (Lost hears of it), the whole messages it
// held beyond its holes are salvaged, and then any start of one after
// them is lost too.
func (r *Reassembler) evict(el *list.Element, emit Emit) {
	s := el.Value.(*stream)
	r.lose(s, ForRoom)
	r.finish(s, r.expiredEmit(emit))
	r.lose(s, ForRoom)
	r.remove(el)
	r.Evicted++
}

// lose tells Lost of the start of a message a stream holds, which it is
// about to let go of.
func (r *Reassembler) lose(s *stream, why Why) {
	if r.Lost == nil || !s.synced || len(s.buf) < 2 {
		return
	}
	var t time.Time
	for _, sp := range s.times {
		if sp.t.After(t) {
			t = sp.t
		}
	}
	r.Lost(s.key, t, s.buf[2:], int(binary.BigEndian.Uint16(s.buf)), why)
	s.buf, s.times = s.buf[:0], s.times[:0]
}

// Reset ends the stream k at packet time now as a SYN that starts it
// again does: what it holds is let go, unless it was idle for longer
// than Idle, in which case it ended before and what lies beyond its
// holes is emitted.
func (r *Reassembler) Reset(now time.Time, k Key, emit Emit) {
	r.init()
	r.expire(now, emit)
	el := r.streams[k]
	if el == nil {
		return
	}
	if now.Sub(el.Value.(*stream).last) > r.Idle {
		r.finish(el.Value.(*stream), r.expiredEmit(emit))
	}
	r.remove(el)
}

// add places a segment that came at t: appended when in order (trimmed
// of bytes already seen), kept aside when beyond a hole.
func (s *stream) add(seq uint32, data []byte, t time.Time) {
	d := int32(seq - s.next)
	switch {
	case d > 0:
		off := s.nextAbs + int64(d)
		if n, ok := s.held[off]; ok && n >= len(data) {
			return // a retransmission of a segment already held
		}
		if s.held == nil {
			s.held = map[int64]int{}
		}
		s.held[off] = len(data)
		heap.Push(&s.pending, segment{off, slices.Clone(data), t})
		s.pendingBytes += len(data)
		return
	case d < 0:
		if int(-d) >= len(data) {
			return // all seen before
		}
		data = data[-d:]
	}
	s.append(data, t)
	s.drain()
}

// append adds in-order bytes that came at t.
func (s *stream) append(data []byte, t time.Time) {
	if len(s.buf) == 0 && len(s.pending) == 0 {
		s.buf, s.borrowed = data[:len(data):len(data)], true
	} else {
		s.buf = append(s.buf, data...)
	}
	if s.times == nil {
		s.times = s.one[:0]
	}
	s.times = append(s.times, span{len(data), t})
	s.next += uint32(len(data))
	s.nextAbs += int64(len(data))
}

// drain moves held segments that now continue the stream into it.
func (s *stream) drain() {
	for len(s.pending) > 0 && s.pending[0].off <= s.nextAbs {
		g := heap.Pop(&s.pending).(segment)
		s.pendingBytes -= len(g.data)
		if s.held[g.off] == len(g.data) {
			delete(s.held, g.off)
		}
		if over := s.nextAbs - g.off; over < int64(len(g.data)) {
			s.append(g.data[over:], g.t)
		}
	}
	if len(s.pending) == 0 {
		s.held = nil
	}
}

// skipHole gives up on the bytes missing before the earliest held
// segment: the partial message in buf is dropped and the stream resumes
// at that segment, looking for a message boundary.
func (s *stream) skipHole() {
	if len(s.pending) == 0 {
		return
	}
	first := s.pending[0].off
	s.buf, s.times = s.buf[:0], s.times[:0]
	s.next += uint32(first - s.nextAbs)
	s.nextAbs = first
	s.synced = false
	s.drain()
}

// take drops n bytes from the head of buf and returns when the last of
// them came: the latest segment among them, the one that completed them
// (as tshark places a reassembled message at the frame completing it).
func (s *stream) take(n int) time.Time {
	var t time.Time
	s.buf = s.buf[n:]
	for n > 0 && len(s.times) > 0 {
		sp := &s.times[0]
		if sp.t.After(t) {
			t = sp.t
		}
		k := min(n, sp.n)
		sp.n -= k
		n -= k
		if sp.n == 0 {
			s.times = s.times[1:]
		}
	}
	return t
}

// maxMessage is the largest message a two-byte length can announce.
const maxMessage = 65535

// extract emits every whole message at the head of the stream, each at
// the time of the segment that completed it.
func (s *stream) extract(emit Emit, check *dnsmsg.Parser) {
	for len(s.buf) >= 2 {
		l := int(binary.BigEndian.Uint16(s.buf))
		if !s.synced && l < dnsmsg.HeaderLen {
			s.buf, s.times = s.buf[:0], s.times[:0] // not a boundary; resume at the next segment
			return
		}
		if len(s.buf) < 2+l {
			return
		}
		msg := s.buf[2 : 2+l]
		if !s.synced {
			if err := check.Check(msg); err != nil {
				s.buf, s.times = s.buf[:0], s.times[:0]
				return
			}
			s.synced = true
		}
		t := s.take(2 + l)
		if l > 0 {
			emit(s.key, t, msg)
		}
	}
	if len(s.buf) == 0 {
		s.buf, s.times = nil, nil // let the backing arrays go between messages
	} else if cap(s.buf) > 2*maxMessage+4 {
		s.buf, s.times = slices.Clone(s.buf), slices.Clone(s.times)
	}
}

// own copies what is left of a borrowed segment (the start of a message
// the next segments continue): the packet's bytes are the caller's again
// once Add returns.
func (s *stream) own() {
	if !s.borrowed {
		return
	}
	s.borrowed = false
	if len(s.buf) == 0 {
		s.buf = nil
		return
	}
	s.buf = slices.Clone(s.buf)
}

func (r *Reassembler) remove(el *list.Element) {
	s := el.Value.(*stream)
	r.bytes -= s.size()
	delete(r.streams, s.key)
	r.lru.Remove(el)
}

// expire drops streams idle for longer than Idle, after giving up on
// their holes; it runs at most once a second of packet time.
func (r *Reassembler) expire(now time.Time, emit Emit) {
	if now.Sub(r.sweep) < time.Second && !now.Before(r.sweep) {
		return
	}
	r.sweep = now
	emit = r.expiredEmit(emit)
	for el := r.lru.Back(); el != nil; el = r.lru.Back() {
		s := el.Value.(*stream)
		if now.Sub(s.last) <= r.Idle {
			return
		}
		r.finish(s, emit)
		r.remove(el)
	}
}

// expiredEmit is where what idle streams held goes.
func (r *Reassembler) expiredEmit(emit Emit) Emit {
	if r.Expired != nil {
		return r.Expired
	}
	return emit
}

// finish salvages what a stream holds beyond its holes.
func (r *Reassembler) finish(s *stream, emit Emit) {
	before := s.size()
	for len(s.pending) > 0 {
		s.skipHole()
		r.Skipped++
		s.extract(emit, &r.check)
		s.own()
	}
	r.bytes += s.size() - before
}

// Expire ends the streams idle for longer than Idle at packet time now,
// emitting what lies beyond their holes: a block without segments of
// its own still moves time on for what earlier blocks left.
func (r *Reassembler) Expire(now time.Time, emit Emit) {
	r.init()
	r.sweep = time.Time{}
	r.expire(now, emit)
}

// Flush ends every stream, emitting the messages that lie beyond holes
// (at the end of a block, or of a capture).
func (r *Reassembler) Flush(emit Emit) {
	r.init()
	for el := r.lru.Back(); el != nil; el = r.lru.Back() {
		r.finish(el.Value.(*stream), emit)
		r.remove(el)
	}
}

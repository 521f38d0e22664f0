package dnstcp

import (
	"container/heap"
	"time"
)

// State is what a Reassembler holds between two parts of one capture
// (two blocks of a site): the streams, most recently active first. A
// Reassembler restored from it goes on as if the capture had not been
// cut.
type State struct {
	Streams []StreamState
	Sweep   time.Time
}

// StreamState is one direction of a connection as held.
type StreamState struct {
	Key             Key
	Started, Synced bool
	Next            uint32
	NextAbs         int64
	Buf             []byte
	Times           []SpanState
	Pending         []SegmentState
	Last            time.Time
	// SynAt, RTT and HasRTT are the handshake as far as it was seen
	// (see Reassembler.RTT).
	SynAt  time.Time
	RTT    time.Duration
	HasRTT bool
}

// SpanState is a run of a stream's bytes that came in one segment.
type SpanState struct {
	N int
	T time.Time
}

// SegmentState is a segment held beyond a hole.
type SegmentState struct {
	Off  int64
	Data []byte
	T    time.Time
}

// State returns what the reassembler holds; it shares no memory with it.
func (r *Reassembler) State() State {
	var st State
	st.Sweep = r.sweep
	for el := r.lru.Front(); el != nil; el = el.Next() {
		s := el.Value.(*stream)
		ss := StreamState{Key: s.key, Started: s.started, Synced: s.synced, Next: s.next, NextAbs: s.nextAbs,
			Buf: append([]byte(nil), s.buf...), Last: s.last, SynAt: s.synAt, RTT: s.rtt, HasRTT: s.hasRTT}
		for _, sp := range s.times {
			ss.Times = append(ss.Times, SpanState{sp.n, sp.t})
		}
		for _, g := range s.pending {
			ss.Pending = append(ss.Pending, SegmentState{g.off, append([]byte(nil), g.data...), g.t})
		}
		st.Streams = append(st.Streams, ss)
	}
	return st
}

// Restore replaces what the reassembler holds with st.
func (r *Reassembler) Restore(st State) {
	r.streams = nil
	r.lru.Init()
	r.bytes = 0
	r.init()
	r.sweep = st.Sweep
	r.Install(st.Streams)
}

// Install puts streams into the reassembler, replacing any it follows
// under the same keys, as the most recently active: what another
// Reassembler followed over the end of the same capture part.
func (r *Reassembler) Install(streams []StreamState) {
	r.init()
	for i := len(streams) - 1; i >= 0; i-- {
		ss := streams[i]
		if el := r.streams[ss.Key]; el != nil {
			r.remove(el)
		}
		s := &stream{key: ss.Key, started: ss.Started, synced: ss.Synced, next: ss.Next, nextAbs: ss.NextAbs, buf: ss.Buf, last: ss.Last,
			synAt: ss.SynAt, rtt: ss.RTT, hasRTT: ss.HasRTT}
		for _, sp := range ss.Times {
			s.times = append(s.times, span{sp.N, sp.T})
		}
		for _, g := range ss.Pending {
			s.pending = append(s.pending, segment{g.Off, g.Data, g.T})
			if s.held == nil {
				s.held = map[int64]int{}
			}
			s.held[g.Off] = max(s.held[g.Off], len(g.Data))
			s.pendingBytes += len(g.Data)
		}
		heap.Init(&s.pending)
		r.streams[ss.Key] = r.lru.PushFront(s)
		r.bytes += s.size()
	}
	for r.bytes > r.MaxBytes && r.lru.Len() > 0 {
		r.remove(r.lru.Back()) // over the budget together: the least recently active go
		r.Evicted++
	}
}

package dnsrec

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/dns/dnstcp"
	"github.com/plumb-dev/plumb/pcap/netpkt"
)

// Blocks of one capture are read in parallel, each on its own, and what
// a block cannot complete alone travels as its Edge to a Joiner, which
// takes the edges of a site's blocks in sequence order. The rule that
// makes the rows independent of where the capture was cut:
//
//   - A TCP stream (one direction of a connection) belongs to the block
//     from its SYN on: nothing before a SYN changes what follows it. Its
//     segments before the block's first SYN of it, and every segment of
//     a stream that began in an earlier block, are edge frames; a
//     stream still open at the block's end is handed on whole (Tail).
//   - Every IP fragment is an edge frame: a datagram's fragments may lie
//     in several blocks.
//   - Idle timeouts (TCP streams, fragments) are decided per stream and
//     per datagram at its next packet, not by when a sweep ran.
//
// So a Joiner that replays each block's edge frames, in order, after the
// state its previous blocks left, processes every packet exactly as a
// reader of the uncut capture would. Only the block a row comes out in
// changes: a row a neighbour completes comes out where it is joined,
// after the rows its block completed alone.

// Edge is what a block leaves to its neighbours.
type Edge struct {
	Version int
	Link    layers.LinkType
	// Frames are the block's packets a neighbour may change, in capture
	// order.
	Frames []EdgeFrame
	// Tail are the TCP streams the block started and left open.
	Tail []dnstcp.StreamState
	// End is the latest packet time of the block.
	End time.Time
	// Dropped counts frames let go, oldest first, to keep the frames
	// within the budget; DroppedBytes their bytes.
	Dropped      int
	DroppedBytes int64
}

// EdgeFrame is one packet a neighbour may change.
type EdgeFrame struct {
	T time.Time
	// Idx is the packet's place in its block, from 0: records the
	// joiner completes from it come between the block's own records of
	// earlier and later packets.
	Idx  int
	Data []byte // the frame; nil for a reset
	// Reset: the stream Key started again here, with a SYN the block
	// follows from on. What an earlier block left of it ends.
	Reset bool
	Key   dnstcp.Key
}

const edgeVersion = 1

// DefaultEdgeBudget bounds the bytes of a block's edge frames unless
// SplitEdges is told otherwise.
const DefaultEdgeBudget = 16 << 20

// splitter is an Extractor's edge being made.
type splitter struct {
	owned  map[dnstcp.Key]bool // streams the block follows from their SYN
	frames []EdgeFrame
	first  int // frames before it were let go
	bytes  int
	budget int
	end    time.Time
	drops  int
	dropB  int64
	onEdge func(idx int, a, b netip.Addr)
}

// SplitEdges makes the extractor read its block on its own: it emits
// what the block completes alone and keeps the rest for Edge. budget
// bounds the bytes of the edge's frames and, apart, those the block's
// own TCP streams hold (DefaultEdgeBudget when zero or less). Call it
// before the first packet.
func (x *Extractor) SplitEdges(budget int) {
	if budget <= 0 {
		budget = DefaultEdgeBudget
	}
	x.edge = &splitter{owned: map[dnstcp.Key]bool{}, budget: budget}
	x.tcp.MaxBytes = budget
}

// OnEdge calls fn with each packet of the block that goes to its edge
// (or ends a stream held there), by its place in the block and its two
// hosts, before the block's records of later packets: what a neighbour
// completes from it is between those hosts. It is for a stage built on
// the records (pairing) that must leave their messages to the join too.
// Call it after SplitEdges.
func (x *Extractor) OnEdge(fn func(idx int, a, b netip.Addr)) { x.edge.onEdge = fn }

// keep adds a frame to the edge, letting the oldest go past the budget.
func (s *splitter) keep(t time.Time, idx int, frame []byte) {
	s.frames = append(s.frames, EdgeFrame{T: t, Idx: idx, Data: bytes.Clone(frame)})
	s.bytes += len(frame)
	for s.bytes > s.budget && s.first < len(s.frames) {
		f := &s.frames[s.first]
		s.bytes -= len(f.Data)
		s.drops++
		s.dropB += int64(len(f.Data))
		*f = EdgeFrame{}
		s.first++
	}
	if s.first > len(s.frames)/2 && s.first > 64 {
		s.frames = append(s.frames[:0], s.frames[s.first:]...)
		s.first = 0
	}
}

// owns reports whether the block follows p's stream itself; when not,
// the frame goes to the edge.
func (s *splitter) owns(t time.Time, idx int, p *netpkt.Packet, frame []byte) bool {
	k := dnstcp.Key{Src: p.Src, Dst: p.Dst, SrcPort: p.SrcPort, DstPort: p.DstPort}
	if s.owned[k] {
		return true
	}
	if p.Flags&netpkt.FlagSYN != 0 && p.Flags&netpkt.FlagRST == 0 {
		s.owned[k] = true
		s.frames = append(s.frames, EdgeFrame{T: t, Idx: idx, Reset: true, Key: k})
		return true
	}
	if s.onEdge != nil {
		s.onEdge(idx, p.Src, p.Dst)
	}
	s.keep(t, idx, frame)
	return false
}

// Edge returns what the block leaves to its neighbours, once its last
// packet is in. The extractor is done with.
func (x *Extractor) Edge() *Edge {
	s := x.edge
	if s == nil {
		return nil
	}
	return &Edge{Version: edgeVersion, Link: x.link, Frames: s.frames[s.first:], Tail: x.tcp.State().Streams,
		End: s.end, Dropped: s.drops, DroppedBytes: s.dropB}
}

// Bytes is about what the edge holds: its frames and the streams it
// hands on.
func (e *Edge) Bytes() int {
	n := 0
	for _, f := range e.Frames {
		n += len(f.Data) + 64
	}
	for _, s := range e.Tail {
		n += len(s.Buf) + 64
		for _, g := range s.Pending {
			n += len(g.Data) + 32
		}
	}
	return n
}

// edgeWire is Edge without its methods, for gob.
type edgeWire Edge

// MarshalBinary encodes the edge to travel between a run and the join.
func (e *Edge) MarshalBinary() ([]byte, error) {
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode((*edgeWire)(e)) // not e: gob would call this method again
	return b.Bytes(), err
}

// UnmarshalBinary decodes what MarshalBinary wrote.
func (e *Edge) UnmarshalBinary(data []byte) error {
	*e = Edge{}
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode((*edgeWire)(e)); err != nil {
		return fmt.Errorf("DNS block edge: %w", err)
	}
	if e.Version != edgeVersion {
		return fmt.Errorf("DNS block edge of version %d; this server reads %d", e.Version, edgeVersion)
	}
	return nil
}

// Joiner completes what blocks leave at their edges. Give it the edges
// of one site's blocks in sequence order; its state between blocks is
// SaveState's, and is bounded by the reassembly budgets.
type Joiner struct {
	x *Extractor
	// Before, when set, is called before each edge frame is replayed
	// with the frame's place in its block, and with math.MaxInt before
	// what the block's end decides: a caller that holds records of the
	// same block puts them in order there.
	Before func(idx int)
}

// NewJoiner returns a joiner that emits the records the edges complete
// (each valid during the call).
func NewJoiner(ports []uint16, emit func(*Record)) *Joiner {
	return &Joiner{x: NewExtractor(layers.LinkTypeEthernet, ports, emit)}
}

// SetBudget bounds the bytes the joiner holds between blocks: TCP
// streams and fragments each (DefaultEdgeBudget when zero or less).
func (j *Joiner) SetBudget(n int) {
	if n <= 0 {
		n = DefaultEdgeBudget
	}
	j.x.tcp.MaxBytes, j.x.frag.MaxBytes = n, n
}

// ReadSections chooses the record sections read, as the blocks'
// extractors do (Extractor.ReadSections).
func (j *Joiner) ReadSections(s dnsmsg.Sections) { j.x.ReadSections(s) }

// Join takes the next block's edge.
func (j *Joiner) Join(e *Edge) {
	x := j.x
	x.link = e.Link
	for i := range e.Frames {
		f := &e.Frames[i]
		if j.Before != nil {
			j.Before(f.Idx)
		}
		if f.Reset {
			x.tcp.Reset(f.T, f.Key, x.tcpFlushed)
			continue
		}
		x.Packet(f.T, f.Data)
	}
	if j.Before != nil {
		j.Before(math.MaxInt)
	}
	x.tcp.Install(e.Tail)
	if !e.End.IsZero() {
		x.tcp.Expire(e.End, x.tcpFlushed)
		x.frag.Expire(e.End)
	}
	x.stats.EdgeDropped += int64(e.Dropped)
}

// Gap lets go of everything held: blocks between the last edge and the
// next are missing, so nothing held can be completed. What lies beyond
// TCP holes and the starts of datagrams are emitted, as at a capture's
// end.
func (j *Joiner) Gap() { j.x.Flush() }

// Flush emits everything held: the capture has ended.
func (j *Joiner) Flush() { j.x.Flush() }

// SaveState returns what the joiner holds between blocks.
func (j *Joiner) SaveState() ([]byte, error) { return j.x.SaveState() }

// LoadState goes on from what SaveState returned; empty is a start.
func (j *Joiner) LoadState(state []byte) error { return j.x.LoadState(state) }

// Stats returns what the joiner counted.
func (j *Joiner) Stats() Stats { return j.x.Stats() }

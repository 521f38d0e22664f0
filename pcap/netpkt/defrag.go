package netpkt

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// Defrag puts IPv4 and IPv6 fragments back together. Memory is bounded:
// datagrams unfinished for Timeout (in packet time) are dropped, and when
// the buffered bytes pass MaxBytes the oldest datagrams go first. Where
// fragments overlap, the bytes that arrived first win (what most stacks
// do, and what makes a duplicated fragment harmless).
type Defrag struct {
	Timeout  time.Duration // 30 s when zero
	MaxBytes int           // 32 MiB when zero

	pending    map[fragKey]*datagram
	bytes      int
	lastExpire time.Time
	// Dropped counts datagrams given up on (timed out, evicted, or
	// inconsistent).
	Dropped int
	// Partial, when set, is called with each datagram given up on whose
	// first fragment came: p holds its transport header and as much of
	// the payload as arrived in one run from the start, at the time the
	// first fragment was seen. A DNS reader can still read the header
	// and question of a response whose later fragments were lost.
	Partial func(t time.Time, p *Packet)
}

type fragKey struct {
	src, dst netip.Addr
	id       uint32
	proto    uint8
}

type datagram struct {
	first  time.Time
	head   time.Time // when the fragment at offset 0 came; zero before
	pieces []piece
	total  int // the datagram's length, once the last fragment arrived
	size   int
}

type piece struct {
	off  int
	data []byte
}

// maxDatagram bounds a reassembled datagram (an IP packet's payload).
const maxDatagram = 65535

// Add takes a fragment (p.Fragment set) seen at time now. When it
// completes its datagram, Add fills p with the whole datagram's transport
// header and payload and returns true; the payload is valid until the next
// call.
func (d *Defrag) Add(now time.Time, p *Packet) bool {
	d.init()
	d.expire(now)
	k := fragKey{p.Src, p.Dst, p.FragID, p.Proto}
	dg := d.pending[k]
	if dg != nil && now.Sub(dg.first) > d.Timeout {
		// Timed out, whether or not a sweep came by since: decided for
		// this datagram alone, so the outcome does not depend on when
		// sweeps ran, nor on where a capture was cut.
		d.drop(k, dg)
		dg = nil
	}
	if dg == nil {
		dg = &datagram{first: now, total: -1}
		d.pending[k] = dg
	}
	end := p.FragOffset + len(p.Payload)
	if end > maxDatagram || !p.MoreFrags && dg.total >= 0 && dg.total != end {
		d.drop(k, dg) // impossible or contradictory lengths
		return false
	}
	if !p.MoreFrags {
		dg.total = end
	}
	if p.FragOffset == 0 && dg.head.IsZero() {
		dg.head = now
	}
	dg.pieces = append(dg.pieces, piece{p.FragOffset, slices.Clone(p.Payload)})
	dg.size += len(p.Payload)
	d.bytes += len(p.Payload)
	for d.bytes > d.MaxBytes && len(d.pending) > 0 {
		d.evictOldest()
	}
	if d.pending[k] == nil || dg.total < 0 {
		return false
	}
	whole, ok := dg.assemble()
	if !ok {
		return false
	}
	d.bytes -= dg.size
	delete(d.pending, k)
	p.Fragment = false
	if p.IPVersion == 6 {
		// The fragmentable part may begin with extension headers (a
		// Destination Options header, RFC 8200 §4.1) before UDP or TCP.
		var err error
		if p.Proto, whole, err = extensions(p.Proto, whole); err != nil {
			return false
		}
	}
	if Transport(p, whole) != nil {
		return false
	}
	return true
}

func (d *Defrag) init() {
	if d.pending != nil {
		return
	}
	d.pending = map[fragKey]*datagram{}
	if d.Timeout == 0 {
		d.Timeout = 30 * time.Second
	}
	if d.MaxBytes == 0 {
		d.MaxBytes = 32 << 20
	}
}

// assemble returns the datagram when its pieces cover 0..total. Pieces
// are laid in arrival order and a byte once written stays: the first
// arrival wins an overlap.
func (dg *datagram) assemble() ([]byte, bool) {
	// Covered? The pieces' spans, in order of offset, leave no gap.
	spans := make([][2]int, 0, len(dg.pieces))
	for _, pc := range dg.pieces {
		if pc.off < dg.total {
			spans = append(spans, [2]int{pc.off, min(pc.off+len(pc.data), dg.total)})
		}
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	reach := 0
	for _, sp := range spans {
		if sp[0] > reach {
			return nil, false
		}
		reach = max(reach, sp[1])
	}
	if reach < dg.total {
		return nil, false
	}
	// Laid latest first, so each byte ends as its first arrival wrote it.
	out := make([]byte, dg.total)
	for i := len(dg.pieces) - 1; i >= 0; i-- {
		pc := dg.pieces[i]
		if pc.off < dg.total {
			copy(out[pc.off:], pc.data[:min(len(pc.data), dg.total-pc.off)])
		}
	}
	return out, true
}

func (d *Defrag) expire(now time.Time) {
	if now.Sub(d.lastExpire) < time.Second && !now.Before(d.lastExpire) {
		return // a sweep a second is enough
	}
	d.lastExpire = now
	d.dropWhere(func(dg *datagram) bool { return now.Sub(dg.first) > d.Timeout })
}

// dropWhere drops the datagrams that pass, oldest first (ties by key), so
// what Partial sees comes in the same order every time.
func (d *Defrag) dropWhere(pass func(*datagram) bool) {
	var keys []fragKey
	for k, dg := range d.pending {
		if pass(dg) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b fragKey) int {
		if c := d.pending[a].first.Compare(d.pending[b].first); c != 0 {
			return c
		}
		if c := a.src.Compare(b.src); c != 0 {
			return c
		}
		if c := a.dst.Compare(b.dst); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.proto, b.proto))
	})
	for _, k := range keys {
		d.drop(k, d.pending[k])
	}
}

func (d *Defrag) evictOldest() {
	var (
		oldK  fragKey
		oldDG *datagram
	)
	for k, dg := range d.pending {
		if oldDG == nil || dg.first.Before(oldDG.first) {
			oldK, oldDG = k, dg
		}
	}
	d.drop(oldK, oldDG)
}

func (d *Defrag) drop(k fragKey, dg *datagram) {
	d.bytes -= dg.size
	delete(d.pending, k)
	d.Dropped++
	if d.Partial == nil || dg.head.IsZero() {
		return
	}
	head := dg.prefix()
	p := Packet{Src: k.src, Dst: k.dst, Proto: k.proto, IPVersion: 4}
	if k.src.Is6() {
		p.IPVersion = 6
		var err error
		if p.Proto, head, err = extensions(p.Proto, head); err != nil {
			return
		}
	}
	if Transport(&p, head) == nil {
		d.Partial(dg.head, &p)
	}
}

// prefix returns the datagram's bytes from offset 0 up to its first
// hole, first arrival winning overlaps as in assemble.
func (dg *datagram) prefix() []byte {
	var out []byte
	for grew := true; grew; {
		grew = false
		for _, pc := range dg.pieces {
			if pc.off <= len(out) && pc.off+len(pc.data) > len(out) {
				out = append(out, pc.data[len(out)-pc.off:]...)
				grew = true
			}
		}
	}
	return out
}

// Flush gives up on every datagram still missing fragments: the capture
// ended, or the blocks that held the rest are gone.
func (d *Defrag) Flush() {
	d.dropWhere(func(*datagram) bool { return true })
}

// Pending returns how many datagrams wait for fragments.
func (d *Defrag) Pending() int { return len(d.pending) }

// Expire gives up on the datagrams unfinished for longer than Timeout at
// packet time now: a block without fragments of its own still moves
// time on for what earlier blocks left.
func (d *Defrag) Expire(now time.Time) {
	d.init()
	d.lastExpire = time.Time{}
	d.expire(now)
}

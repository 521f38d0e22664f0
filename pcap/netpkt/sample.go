package netpkt

import (
	"bytes"

	"github.com/gopacket/gopacket/layers"
)

// A PairSampler keeps the packets of one address pair in N, chosen by a
// hash of the two addresses that is the same in both directions and on
// any machine (FNV-1a), so what it keeps is whole: a client's queries
// and their responses, UDP and TCP alike, and every fragment of a
// datagram (fragments carry the addresses, not the ports). A packet
// that is not IP is kept. The zero PairSampler, and one of N ≤ 1, keeps
// everything.
type PairSampler struct {
	N uint32
	p Packet
}

// Keep reports whether the frame's address pair is one of those kept.
func (s *PairSampler) Keep(link layers.LinkType, frame []byte) bool {
	if s.N <= 1 {
		return true
	}
	if err := Decode(link, frame, &s.p); err != nil || !s.p.Src.IsValid() || !s.p.Dst.IsValid() {
		return true
	}
	return PairHash(s.p.Src.As16(), s.p.Dst.As16())%uint64(s.N) == 0
}

// PairHash hashes two addresses (as 16 bytes) the same whichever comes
// first.
func PairHash(a, b [16]byte) uint64 {
	if bytes.Compare(b[:], a[:]) < 0 {
		a, b = b, a
	}
	h := uint64(14695981039346656037)
	for _, c := range a {
		h = (h ^ uint64(c)) * 1099511628211
	}
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

package netpkt

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestAssembleFirstArrivalWins: a datagram is whole when its pieces
// cover it, and each byte is the first arrival's, whatever the pieces'
// order, overlaps, gaps and strays past the end; checked against laying
// the pieces byte by byte.
func TestAssembleFirstArrivalWins(t *testing.T) {
	rng := rand.New(rand.NewPCG(791, 1))
	for range 20000 {
		dg := &datagram{total: 1 + rng.IntN(64)}
		for p := range 1 + rng.IntN(6) {
			data := make([]byte, rng.IntN(40))
			for i := range data {
				data[i] = byte(p + 1)
			}
			dg.pieces = append(dg.pieces, piece{rng.IntN(dg.total + 8), data})
		}
		want := make([]byte, dg.total)
		have := make([]bool, dg.total)
		n := 0
		for _, pc := range dg.pieces {
			for i, c := range pc.data {
				if j := pc.off + i; j < dg.total && !have[j] {
					want[j], have[j] = c, true
					n++
				}
			}
		}
		got, ok := dg.assemble()
		if ok != (n == dg.total) || ok && !bytes.Equal(got, want) {
			t.Fatalf("pieces %+v of %d bytes: %v %v; byte by byte %v %v", dg.pieces, dg.total, got, ok, want, n == dg.total)
		}
	}
}

package engine_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/engine"
)

// FuzzStageArrivals drives builtin:dns, the parallel edged stage, with
// one site's blocks in a random arrival order, one of them damaged by
// the fuzzer (replaced, truncated or with bytes flipped). Whatever the
// damage: the process survives, every block either has its records or
// is set aside with its error, and only the damaged one may be.
func FuzzStageArrivals(f *testing.F) {
	blocks, _ := siteBlocks(f, 4)
	f.Add(uint64(1), uint8(2), uint8(0), []byte("\x00garbage, not a pcap\xff"))
	f.Add(uint64(7), uint8(3), uint8(1), []byte{40})
	f.Add(uint64(3), uint8(1), uint8(2), []byte{30, 0xff, 24, 0x80, 60, 0x01})
	f.Add(uint64(9), uint8(4), uint8(1), []byte{1})
	f.Fuzz(func(t *testing.T, order uint64, which, how uint8, junk []byte) {
		if len(junk) > 4<<10 {
			junk = junk[:4<<10]
		}
		damaged := int(which%4) + 1
		data := make([][]byte, len(blocks))
		copy(data, blocks)
		real := append([]byte(nil), blocks[damaged-1]...)
		switch how % 3 {
		case 0: // replaced
			data[damaged-1] = junk
		case 1: // truncated
			n := 0
			for _, b := range junk {
				n = n*251 + int(b)
			}
			data[damaged-1] = real[:n%(len(real)+1)]
		case 2: // flipped: pairs of (offset byte, xor mask)
			for i := 0; i+1 < len(junk); i += 2 {
				off := int(junk[i]) * len(real) / 256
				real[off] ^= junk[i+1]
			}
			data[damaged-1] = real
		}
		r := newRig(t, engine.Config{Slots: 3, GapWait: 50 * time.Millisecond, MaxAttempts: 2})
		r.mustAccept("job: dns\nfrom: earliest\nqueues: [pcap]\nstages:\n  - {name: d, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}\n")
		for _, i := range rand.New(rand.NewPCG(order, order)).Perm(len(data)) {
			r.put("pcap", uint64(i+1), data[i])
		}
		made := func(seq int) bool {
			_, err := r.db.Lookup(block.ID{Queue: "dns.arrow", Instance: "lax", Seq: uint64(seq)})
			return err == nil
		}
		r.wait("every block made or set aside", func() bool {
			fb, _ := r.db.Faulty("")
			n := len(fb)
			for seq := 1; seq <= len(data); seq++ {
				if made(seq) {
					n++
				}
			}
			return n == len(data)
		})
		fb, _ := r.db.Faulty("")
		for _, b := range fb {
			if n, _ := block.Parse(b.Block); n.Seq != uint64(damaged) {
				t.Errorf("block %s set aside (%s), but only block %d was damaged", b.Block, b.Error, damaged)
			}
		}
	})
}

package netpkt_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/netpkt"
)

// TestPairSamplerKeepsWholePairs: on every real capture of testdata
// (fragmented datagrams, TCP streams, both directions), a sampler keeps
// or drops all the packets of an address pair together, whichever way
// they go; of 1 it keeps everything.
func TestPairSamplerKeepsWholePairs(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/pcaps/*.pcap")
	if len(files) < 20 {
		t.Fatalf("%d captures", len(files))
	}
	pairs, kept := 0, 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []uint32{1, 3} {
			r, closer, err := pcap.NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			s := netpkt.PairSampler{N: n}
			decided := map[[32]byte]bool{}
			var p netpkt.Packet
			for {
				frame, _, err := r.Next()
				if err == io.EOF || errors.Is(err, pcap.ErrTruncated) {
					break
				}
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				keep := s.Keep(r.LinkType, frame)
				if n == 1 && !keep {
					t.Fatalf("%s: a sampler of 1 dropped a packet", f)
				}
				if netpkt.Decode(r.LinkType, frame, &p) != nil {
					continue
				}
				a, b := p.Src.As16(), p.Dst.As16()
				if string(b[:]) < string(a[:]) {
					a, b = b, a
				}
				var k [32]byte
				copy(k[:16], a[:])
				copy(k[16:], b[:])
				if d, ok := decided[k]; ok && d != keep {
					t.Fatalf("%s: the pair %s %s is kept and dropped", f, p.Src, p.Dst)
				} else if !ok && n == 3 {
					pairs++
					if keep {
						kept++
					}
				}
				decided[k] = keep
			}
			closer.Close()
		}
	}
	if kept == 0 || kept == pairs {
		t.Errorf("1/3 kept %d of %d address pairs", kept, pairs)
	}
	t.Logf("1/3 kept %d of %d address pairs", kept, pairs)
}

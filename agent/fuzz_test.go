package agent

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/pcap"
)

// countPackets reads packets until the end or the first error.
func countPackets(r io.Reader) int {
	rd, closer, err := pcap.NewReader(r)
	if err != nil {
		return 0
	}
	defer closer.Close()
	n := 0
	for {
		if _, _, err := rd.Next(); err != nil {
			return n
		}
		n++
	}
}

// FuzzCut: whatever bytes a source holds, cutting them never panics and
// the blocks hold exactly the packets a reader gets before the first
// fault, each block a valid capture.
func FuzzCut(f *testing.F) {
	for _, name := range []string{"dnscap__dns6.pcap", "dnscap__1qtcpnosyn.pcap", "tcpdump__LINKTYPE_IPV4.pcap"} {
		b, _ := os.ReadFile("../testdata/pcaps/" + name)
		f.Add(b, uint16(300))
	}
	f.Fuzz(func(t *testing.T, in []byte, blockSize uint16) {
		if len(in) > 64<<10 {
			return // a block costs file operations; keep each run quick
		}
		dir := t.TempDir()
		src := filepath.Join(dir, "in.pcap")
		os.WriteFile(src, in, 0o644)
		cfg := CutConfig{Queue: "pcap", Instance: "fz", Codec: codecs.None, MaxBytes: int64(max(blockSize, 1024)) + pcap.HeaderSize}
		blocks := cutFile(t, src, cfg)
		want := countPackets(bytes.NewReader(in))
		got := 0
		for i, b := range blocks {
			name, raw, _ := strings.Cut(b, "\n")
			if n, _ := block.Parse(name); n.Seq != uint64(i+1) {
				t.Fatalf("block %d is %s", i, name)
			}
			n := countPackets(strings.NewReader(raw))
			if n == 0 {
				t.Fatalf("block %s holds no packet", name)
			}
			got += n
		}
		if got != want {
			t.Fatalf("blocks hold %d packets; the reader finds %d", got, want)
		}
		// Copying runs of records must cut what packet by packet cuts.
		cfg.perPacket = true
		if slow := cutFile(t, src, cfg); !slices.Equal(blocks, slow) {
			t.Fatalf("runs cut %d blocks, packet by packet %d, and they differ", len(blocks), len(slow))
		}
	})
}

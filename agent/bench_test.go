package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// BenchmarkCut cuts a generated 256 MiB DNS capture into snappy blocks in
// a spool (with fsync), without shipping: the cutter's own speed.
func BenchmarkCut(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "in.pcap")
	f, _ := os.Create(src)
	w, _ := pcap.NewWriter(f, layers.LinkTypeEthernet, 65535, false)
	if _, err := synth.Generate(context.Background(), w, synth.Config{Seed: 1, MaxBytes: 256 << 20, TCP: 0.05, IPv6: 0.3, EDNS: 0.7}); err != nil {
		b.Fatal(err)
	}
	f.Close()
	fi, _ := os.Stat(src)
	b.SetBytes(fi.Size())
	b.ResetTimer()
	for i := range b.N {
		s, _, _ := OpenSpool(filepath.Join(dir, "spool", string(rune('a'+i%26))), "pcap.sz", "b")
		s.SetLastSeq(0, false)
		fs, _ := FileSource(src)
		cfg := CutConfig{Queue: "pcap.sz", Instance: "b", Codec: codecs.Snappy, MaxBytes: 64 << 20}
		if err := Cut(context.Background(), cfg, s, List(fs), quiet, &Counters{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(filepath.Join(dir, "spool"))
		b.StartTimer()
	}
}

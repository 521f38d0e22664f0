package dnsrec

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// BenchmarkExtract measures extraction and Arrow writing over a generated
// capture held in memory.
func BenchmarkExtract(b *testing.B) {
	var buf bytes.Buffer
	w, _ := pcap.NewWriter(&buf, layers.LinkTypeEthernet, 65535, false)
	if _, err := synth.Generate(context.Background(), w, synth.Config{Seed: 2, MaxBytes: 64 << 20}); err != nil {
		b.Fatal(err)
	}
	w.Flush()
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	var packets int64
	for range b.N {
		r, closer, err := pcap.NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		aw, _ := NewWriter(io.Discard, "bench", 1)
		x := NewExtractor(r.LinkType, nil, func(rec *Record) { aw.Add(rec) })
		for {
			d, ci, err := r.Next()
			if err != nil {
				break
			}
			x.Packet(ci.Timestamp, d)
		}
		x.Flush()
		aw.Close()
		closer.Close()
		packets += x.Stats().Packets
	}
	b.ReportMetric(float64(packets)/b.Elapsed().Seconds(), "packets/s")
}

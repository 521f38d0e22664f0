package dnsrec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
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
	benchExtract(b, buf.Bytes(), dnsmsg.AllSections, AllNames)
}

// benchExtract extracts the records of the capture data again and
// again, with the sections and names given, and writes them.
func benchExtract(b *testing.B, data []byte, sections dnsmsg.Sections, names Names) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	aw, _ := NewWriter(io.Discard, "bench", 1)
	aw.SetSections(sections)
	aw.SetNames(names)
	var packets int64
	for range b.N {
		r, closer, err := pcap.NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		x := NewExtractor(r.LinkType, nil, func(rec *Record) { aw.Add(rec) })
		x.ReadSections(sections)
		for {
			d, ci, err := r.Next()
			if err != nil {
				break
			}
			x.Packet(ci.Timestamp, d)
		}
		x.Flush()
		closer.Close()
		packets += x.Stats().Packets
	}
	aw.Close()
	b.ReportMetric(float64(packets)/b.Elapsed().Seconds(), "packets/s")
}

// BenchmarkRealSigned measures extraction and Arrow writing over zeek's
// capture of a signed authoritative server (DNSSEC signatures in most
// responses, TCP, client subnets) repeated to 16 MiB in memory, each copy
// later by the capture's span: with every section, with header and
// question only, and with those and no derived names. What real
// traffic costs differs from what the generated mixes cost.
func BenchmarkRealSigned(b *testing.B) {
	data := replicated(b, "../../testdata/pcaps/zeek__dns-edns-ecs.pcap", 16<<20)
	for _, c := range []struct {
		name     string
		sections dnsmsg.Sections
		names    Names
	}{{"all", dnsmsg.AllSections, AllNames}, {"question", 0, AllNames}, {"question-nonames", 0, 0}} {
		b.Run(c.name, func(b *testing.B) { benchExtract(b, data, c.sections, c.names) })
	}
}

// replicated returns the capture at path written again and again until
// it holds size bytes.
func replicated(b *testing.B, path string, size int) []byte {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r, closer, err := pcap.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	defer closer.Close()
	var cis []gopacket.CaptureInfo
	var frames [][]byte
	for {
		d, ci, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		cis, frames = append(cis, ci), append(frames, bytes.Clone(d))
	}
	span := cis[len(cis)-1].Timestamp.Sub(cis[0].Timestamp) + time.Second
	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf, r.LinkType, 262144, true)
	if err != nil {
		b.Fatal(err)
	}
	for round := 0; buf.Len() < size; round++ {
		for i, f := range frames {
			ci := cis[i]
			ci.Timestamp = ci.Timestamp.Add(time.Duration(round) * span)
			w.WritePacket(ci, f)
		}
		w.Flush()
	}
	return buf.Bytes()
}

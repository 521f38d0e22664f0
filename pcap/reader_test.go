package pcap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/internal/testenv"

	"github.com/plumb-dev/plumb/internal/hostile"
)

type pkt struct {
	ci   gopacket.CaptureInfo
	data []byte
}

func readAll(t testing.TB, r io.Reader) ([]pkt, *Reader, error) {
	t.Helper()
	rd, closer, err := NewReader(r)
	if err != nil {
		return nil, nil, err
	}
	defer closer.Close()
	var out []pkt
	for {
		data, ci, err := rd.Next()
		if err == io.EOF {
			return out, rd, nil
		}
		if err != nil {
			return out, rd, err
		}
		out = append(out, pkt{ci: ci, data: bytes.Clone(data)})
	}
}

// oracle returns the packet count tshark found in each real capture.
func oracle(t *testing.T) map[string]int {
	t.Helper()
	raw, err := os.ReadFile("../testdata/pcaps/ORACLE.tsv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	cols := strings.Split(lines[0], "\t")
	idx := -1
	for i, c := range cols {
		if c == "total_packets" {
			idx = i
		}
	}
	out := map[string]int{}
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		n, _ := strconv.Atoi(f[idx])
		out[f[0]] = n
	}
	return out
}

// TestRealCaptures reads every public capture in testdata and gets the
// packet count an independent decoder (tshark) got.
func TestRealCaptures(t *testing.T) {
	want := oracle(t)
	files, _ := filepath.Glob("../testdata/pcaps/*.pcap")
	if len(files) < 50 {
		t.Fatalf("only %d captures in testdata", len(files))
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		pkts, rd, err := readAll(t, bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if n, ok := want[filepath.Base(f)]; !ok || len(pkts) != n {
			t.Errorf("%s: %d packets, tshark found %d", f, len(pkts), n)
		}
		if rd.Format != FormatPcap || rd.Snaplen == 0 {
			t.Errorf("%s: format %s snaplen %d", f, rd.Format, rd.Snaplen)
		}
	}
}

// TestWriteRoundTrip writes every capture again and reads it back: same
// packets, same timestamps; tcpdump reads our files too.
func TestWriteRoundTrip(t *testing.T) {
	tcpdump := testenv.Tool(t, "tcpdump")
	files, _ := filepath.Glob("../testdata/pcaps/*.pcap")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		pkts, rd, err := readAll(t, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, rd.LinkType, rd.Snaplen, rd.Nanos)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			if err := w.WritePacket(p.ci, p.data); err != nil {
				t.Fatal(err)
			}
		}
		w.Flush()
		if w.Bytes != int64(buf.Len()) {
			t.Fatalf("%s: Writer.Bytes = %d, wrote %d", f, w.Bytes, buf.Len())
		}
		again, rd2, err := readAll(t, bytes.NewReader(buf.Bytes()))
		if err != nil || len(again) != len(pkts) || rd2.LinkType != rd.LinkType || rd2.Snaplen != rd.Snaplen {
			t.Fatalf("%s: read back %d of %d packets, %v", f, len(again), len(pkts), err)
		}
		for i := range pkts {
			if !bytes.Equal(again[i].data, pkts[i].data) || !again[i].ci.Timestamp.Equal(pkts[i].ci.Timestamp) || again[i].ci.Length != pkts[i].ci.Length {
				t.Fatalf("%s: packet %d differs after a round trip", f, i)
			}
		}
		out := filepath.Join(t.TempDir(), "x.pcap")
		os.WriteFile(out, buf.Bytes(), 0o644)
		if len(pkts) > 0 {
			got, err := testenv.Command(t, 2*time.Minute, tcpdump, "-n", "-r", out).Output()
			if n := strings.Count(string(got), "\n"); err != nil || n != len(pkts) {
				t.Fatalf("%s: tcpdump read %d packets of our file (%v), want %d", f, n, err, len(pkts))
			}
		}
	}
}

func TestCompressedInput(t *testing.T) {
	raw, _ := os.ReadFile("../testdata/pcaps/dnscap__dns.pcap")
	want, _, _ := readAll(t, bytes.NewReader(raw))
	for _, c := range codecs.All()[1:] {
		var buf bytes.Buffer
		w, _ := c.NewWriter(&buf)
		w.Write(raw)
		w.Close()
		got, _, err := readAll(t, &buf)
		if err != nil || len(got) != len(want) {
			t.Errorf("%s-compressed: %d packets, %v; want %d", c, len(got), err, len(want))
		}
	}
}

func TestNanosAndPcapNG(t *testing.T) {
	ts := time.Date(2025, 5, 5, 15, 11, 5, 123456789, time.UTC)
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: 3, Length: 3}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, layers.LinkTypeRaw, 65535, true)
	w.WritePacket(ci, []byte{1, 2, 3})
	w.Flush()
	got, rd, err := readAll(t, &buf)
	if err != nil || !rd.Nanos || len(got) != 1 || !got[0].ci.Timestamp.Equal(ts) {
		t.Fatalf("nanosecond pcap: %+v %v", got, err)
	}

	// pcapng with one link type reads; with two it is refused clearly.
	var ng bytes.Buffer
	nw, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	nw.WritePacket(ci, []byte{1, 2, 3})
	nw.Flush()
	got, rd, err = readAll(t, bytes.NewReader(ng.Bytes()))
	if err != nil || rd.Format != FormatPcapNG || len(got) != 1 || !got[0].ci.Timestamp.Equal(ts) {
		t.Fatalf("pcapng: %d packets, %v", len(got), err)
	}
	var mixed bytes.Buffer
	mw, _ := pcapgo.NewNgWriter(&mixed, layers.LinkTypeEthernet)
	id, _ := mw.AddInterface(pcapgo.NgInterface{LinkType: layers.LinkTypeRaw, SnapLength: 65535})
	mw.WritePacket(ci, []byte{1, 2, 3})
	ci.InterfaceIndex = id
	mw.WritePacket(ci, []byte{4, 5, 6})
	mw.Flush()
	_, _, err = readAll(t, bytes.NewReader(mixed.Bytes()))
	if err == nil || !strings.Contains(err.Error(), "link type") {
		t.Fatalf("pcapng with two link types: %v; want an error about link types", err)
	}
}

func TestBadInput(t *testing.T) {
	raw, _ := os.ReadFile("../testdata/pcaps/dnscap__dns.pcap")
	want, _, _ := readAll(t, bytes.NewReader(raw))

	// Truncated last record: the packets before it, then ErrTruncated.
	got, _, err := readAll(t, bytes.NewReader(raw[:len(raw)-10]))
	if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != len(want)-1 {
		t.Fatalf("truncated: %d packets, %v; want %d and ErrTruncated", len(got), err, len(want)-1)
	}
	// A record length no capture can have: an error naming the packet.
	bad := bytes.Clone(raw)
	off := HeaderSize
	for range 3 { // third record
		off += RecordHeaderSize + int(binary.LittleEndian.Uint32(bad[off+8:]))
	}
	binary.LittleEndian.PutUint32(bad[off+8:], 0x7fffffff)
	got, _, err = readAll(t, bytes.NewReader(bad))
	if err == nil || !strings.Contains(err.Error(), "packet 4") || len(got) != 3 {
		t.Fatalf("corrupt record length: %d packets, %v", len(got), err)
	}
	for name, in := range map[string][]byte{"empty": {}, "garbage": []byte("GET / HTTP/1.1\r\n\r\n"), "short": raw[:10]} {
		if _, _, err := readAll(t, bytes.NewReader(in)); !errors.Is(err, ErrNotCapture) {
			t.Errorf("%s input: %v; want ErrNotCapture", name, err)
		}
	}
}

// FuzzReader: no input makes the reader panic, hang or allocate without
// bound; whatever it reads, the writer writes and the reader reads again.
func FuzzReader(f *testing.F) {
	for _, name := range []string{"dnscap__dns6.pcap", "tcpdump__LINKTYPE_IPV4.pcap", "dnscap__sll2.pcap"} {
		b, _ := os.ReadFile("../testdata/pcaps/" + name)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		rd, closer, err := NewReader(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			return
		}
		defer closer.Close()
		var buf bytes.Buffer
		w, err := NewWriter(&buf, rd.LinkType, rd.Snaplen, rd.Nanos)
		if err != nil {
			return
		}
		n := 0
		for n < 10000 {
			data, ci, err := rd.Next()
			if err != nil {
				break
			}
			if err := w.WritePacket(ci, data); err != nil {
				return // e.g. a length field beyond what pcap can hold
			}
			n++
		}
		w.Flush()
		samePackets(t, in, n)
		written := bytes.Clone(buf.Bytes())
		again, _, err := readAll(t, &buf)
		if err != nil || len(again) != n {
			t.Fatalf("wrote %d packets, read back %d: %v", n, len(again), err)
		}
		if n == 10000 {
			return
		}
		// Runs copied whole, with Next for what NextRun leaves, write
		// the same file as Next alone, and end at the same error.
		rd2, closer2, err := NewReader(bytes.NewReader(in))
		if err != nil {
			t.Fatalf("read again: %v", err)
		}
		defer closer2.Close()
		var buf2 bytes.Buffer
		w2, _ := NewWriter(&buf2, rd2.LinkType, rd2.Snaplen, rd2.Nanos)
		for i := 0; ; i++ {
			lim := RunLimit{Bytes: int64(i%7) * 300}
			if i%3 == 0 {
				lim.Bytes = 1 << 30
			}
			if run, k := rd2.NextRun(lim); k > 0 {
				w2.WriteRun(run)
				continue
			}
			data, ci, err := rd2.Next()
			if err != nil {
				break
			}
			if err := w2.WritePacket(ci, data); err != nil {
				return
			}
		}
		w2.Flush()
		if rd2.Packets() != rd.Packets() || !bytes.Equal(written, buf2.Bytes()) {
			t.Fatalf("with runs: %d packets, %d bytes; packet by packet %d, %d", rd2.Packets(), buf2.Len(), rd.Packets(), len(written))
		}
	})
}

// samePackets: the first n packets Next reads from a pcap are what
// pcapgo reads from it alone (Next takes most records straight from its
// read buffer, without pcapgo).
func samePackets(t *testing.T, in []byte, n int) {
	t.Helper()
	rd, closer, err := NewReader(bytes.NewReader(in))
	if err != nil || rd.Format != FormatPcap {
		return
	}
	defer closer.Close()
	pr, err := pcapgo.NewReader(bytes.NewReader(in))
	if err != nil {
		t.Fatalf("pcapgo refuses what Next read: %v", err)
	}
	for i := range n {
		data, ci, err := rd.Next()
		want, wantCI, werr := pr.ReadPacketData()
		if err != nil || werr != nil {
			t.Fatalf("packet %d of %d: %v; pcapgo %v", i+1, n, err, werr)
		}
		if !bytes.Equal(data, want) || !ci.Timestamp.Equal(wantCI.Timestamp) || ci.CaptureLength != wantCI.CaptureLength || ci.Length != wantCI.Length {
			t.Fatalf("packet %d: %v %x; pcapgo %v %x", i+1, ci, data, wantCI, want)
		}
	}
}

// TestSamePacketsAsPcapgo: every pcap in testdata reads as pcapgo reads
// it, microsecond and nanosecond ones alike.
func TestSamePacketsAsPcapgo(t *testing.T) {
	captures, _ := filepath.Glob("../testdata/pcaps/*.pcap")
	checked := 0
	for _, c := range captures {
		in, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		rd, closer, err := NewReader(bytes.NewReader(in))
		if err != nil || rd.Format != FormatPcap {
			continue
		}
		n := 0
		for ; ; n++ {
			if _, _, err := rd.Next(); err != nil {
				break
			}
		}
		closer.Close()
		samePackets(t, in, n)
		checked++
	}
	if checked < 20 {
		t.Fatalf("%d pcap captures checked", checked)
	}
}

// TestHugeRecordRefused is issue 18's first attack: a 66 KB zstd pcap
// whose one record holds 2 GiB (snap length 0xFFFFFFFF) took 8.4 GB. The
// reader refuses the record past MaxRecord, naming the limit, having
// allocated little; a pcapng block of the same size likewise.
func TestHugeRecordRefused(t *testing.T) {
	for format, bomb := range map[string][]byte{"pcap": hostile.BigRecordPcap(2<<30 - 1), "pcapng": hostile.BigRecordPcapNG(2<<30 - 4)} {
		t.Run(format, func(t *testing.T) { refusesHugeRecord(t, bomb) })
	}
}

func refusesHugeRecord(t *testing.T, bomb []byte) {
	t.Logf("a 2 GiB record compresses to %d bytes", len(bomb))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rd, closer, err := NewReader(bytes.NewReader(bomb))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	_, _, err = rd.Next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrRecordTooLarge) || !strings.Contains(err.Error(), "packet 1") {
		t.Errorf("the 2 GiB record: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("refusing it allocated %d MiB", grew>>20)
	}
}

// TestWriteEmptyLike: the block that ends a capture is a capture of the
// same kind with no packet, whatever the capture it follows was written
// as.
func TestWriteEmptyLike(t *testing.T) {
	raw, err := os.ReadFile("../testdata/pcaps/dnscap__dns.pcap")
	if err != nil {
		t.Fatal(err)
	}
	var nanos bytes.Buffer
	w, _ := NewWriter(&nanos, layers.LinkTypeRaw, 1500, true)
	w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 2)}, []byte{1, 2, 3})
	w.Flush()
	var ng bytes.Buffer
	nw, _ := pcapgo.NewNgWriter(&ng, layers.LinkTypeLinuxSLL)
	nw.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 2), CaptureLength: 3, Length: 3}, []byte{1, 2, 3})
	nw.Flush()
	var zst bytes.Buffer
	zw, _ := codecs.Zstd.NewWriter(&zst)
	zw.Write(raw)
	zw.Close()

	for name, in := range map[string][]byte{"pcap": raw, "nanosecond pcap": nanos.Bytes(), "pcapng": ng.Bytes(), "zstd pcap": zst.Bytes()} {
		_, want, err := readAll(t, bytes.NewReader(in))
		if err != nil {
			t.Fatal(name, err)
		}
		var out bytes.Buffer
		if err := WriteEmptyLike(&out, bytes.NewReader(in)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pkts, got, err := readAll(t, &out)
		if err != nil || len(pkts) != 0 || got.Format != FormatPcap ||
			got.LinkType != want.LinkType || got.Snaplen != want.Snaplen || got.Nanos != want.Nanos {
			t.Errorf("%s: empty capture reads as %d packets, %v, link %v snaplen %d nanos %v; want none, link %v snaplen %d nanos %v",
				name, len(pkts), err, got.LinkType, got.Snaplen, got.Nanos, want.LinkType, want.Snaplen, want.Nanos)
		}
	}
	if err := WriteEmptyLike(io.Discard, strings.NewReader("not a capture at all")); !errors.Is(err, ErrNotCapture) {
		t.Errorf("text: %v; want ErrNotCapture", err)
	}
}

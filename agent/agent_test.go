package agent

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/pcap"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestSpoolRecovery plays the crash points of Finish: a pending temp file
// is promoted, any other temp file is discarded, and the state says where
// to go on.
func TestSpoolRecovery(t *testing.T) {
	dir := t.TempDir()
	s, rec, err := OpenSpool(dir, "pcap.sz", "lax")
	if err != nil || !rec.Fresh {
		t.Fatalf("open: %+v %v", rec, err)
	}
	if _, ok := s.NextSeq(); ok {
		t.Fatal("a fresh spool claims to know its next sequence")
	}
	s.SetLastSeq(41, true)
	n := block.Name{Time: time.Unix(1746457865, 0), Seq: 42, Instance: "lax", Queue: "pcap.sz"}
	f, _ := s.Create(n)
	f.WriteString("block 42")
	if err := s.Finish(f, n, map[string]SourcePos{"/a.pcap": {Packets: 10}}, Finished{}); err != nil {
		t.Fatal(err)
	}

	// Crash 1: state written with block 43 pending, rename not done.
	n43 := n
	n43.Seq = 43
	f, _ = s.Create(n43)
	f.WriteString("block 43")
	f.Close()
	s.mu.Lock() // Finish's state write, without the rename after it
	s.st.LastSeq, s.st.Pending, s.st.Sources["/a.pcap"] = 43, tempName(n43.String()), SourcePos{Packets: 20}
	s.markSource("/a.pcap", true)
	if err := s.saveLocked(); err != nil {
		t.Fatal(err)
	}
	s.mu.Unlock()
	// Crash 2: a block being cut, never finished.
	os.WriteFile(filepath.Join(dir, "tmp", "cut-20250505-151105-00000044.lax.pcap.sz"), []byte("partial"), 0o644)

	s, rec, err = OpenSpool(dir, "pcap.sz", "lax")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Promoted != 1 || rec.Discarded != 1 || rec.DiscardedSize != 7 {
		t.Fatalf("recovery = %+v; want 1 promoted, 1 discarded of 7 bytes", rec)
	}
	if next, ok := s.NextSeq(); !ok || next != 44 {
		t.Fatalf("next sequence = %d %v; want 44 (43 was finished, 44 never was)", next, ok)
	}
	if pos := s.Source("/a.pcap"); pos.Packets != 20 {
		t.Fatalf("source position = %+v; want 20 packets", pos)
	}
	ready, _ := s.Ready()
	if len(ready) != 2 || ready[0].Name.Seq != 42 || ready[1].Name.Seq != 43 || s.Bytes() != 16 {
		t.Fatalf("ready = %+v, %d bytes", ready, s.Bytes())
	}
	if err := s.Remove(ready[0]); err != nil || s.Bytes() != 8 {
		t.Fatalf("remove: %v, %d bytes left", err, s.Bytes())
	}
	if _, _, err := OpenSpool(dir, "pcap.sz", "nyc"); err == nil || !strings.Contains(err.Error(), "belongs to") {
		t.Fatalf("opening another instance's spool = %v", err)
	}
}

func writeCapture(t *testing.T, path string, link layers.LinkType, times []time.Time) {
	t.Helper()
	f, _ := os.Create(path)
	defer f.Close()
	w, _ := pcap.NewWriter(f, link, 65535, false)
	for i, ts := range times {
		data := bytes.Repeat([]byte{byte(i)}, 100)
		w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: 100, Length: 100}, data)
	}
	w.Flush()
}

// TestCutRules: blocks are cut at the size limit, at interval boundaries of
// packet time, and where the link type changes; names carry the first
// packet's time and consecutive sequence numbers.
func TestCutRules(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2025, 5, 5, 15, 4, 58, 0, time.UTC)
	var times []time.Time
	for i := range 10 {
		times = append(times, t0.Add(time.Duration(i)*time.Second)) // crosses 15:05:00
	}
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	writeCapture(t, a, layers.LinkTypeEthernet, times)
	writeCapture(t, b, layers.LinkTypeRaw, times[:2])
	s, _, _ := OpenSpool(filepath.Join(dir, "spool"), "pcap", "lax")
	s.SetLastSeq(0, false)
	srcA, _ := FileSource(a)
	srcB, _ := FileSource(b)
	cfg := CutConfig{Queue: "pcap", Instance: "lax", Codec: codecs.None, MaxBytes: pcap.HeaderSize + 5*116, Interval: time.Minute}
	if err := Cut(context.Background(), cfg, s, List(srcA, srcB), quiet, &Counters{}); err != nil {
		t.Fatal(err)
	}
	ready, _ := s.Ready()
	var got []string
	for _, r := range ready {
		raw, _ := os.ReadFile(r.Path)
		rd, closer, err := pcap.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			if _, _, err := rd.Next(); err != nil {
				break
			}
			n++
		}
		closer.Close()
		got = append(got, r.Name.String()+" "+rd.LinkType.String()+" "+string(rune('0'+n)))
	}
	want := []string{
		"20250505-150458-00000001.lax.pcap Ethernet 2", // cut at 15:05:00
		"20250505-150500-00000002.lax.pcap Ethernet 5", // cut at 5 packets
		"20250505-150505-00000003.lax.pcap Ethernet 3",
		"20250505-150458-00000004.lax.pcap Raw 2", // new link type
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("blocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if pos := s.Source(srcA.Name); !pos.Done || pos.Packets != 10 {
		t.Fatalf("source a position %+v", pos)
	}
}

// dropsReader is a capture whose kernel dropped packets between some of
// its packets, as a live capture's reports them.
type dropsReader struct {
	io.ReadCloser
	marks [][2]int64 // before packet [0], [1] dropped in all
}

func (d dropsReader) DropsAt(n int64) int64 {
	var total int64
	for _, m := range d.marks {
		if m[0] <= n {
			total = m[1]
		}
	}
	return total
}

// TestKernelDropsAreInBlocks: every drop the kernel reports is in one
// block, including those before a block's first packet and after the
// last packet of all. A live capture of one packet and 2,999 drops
// recorded none of them.
func TestKernelDropsAreInBlocks(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2025, 5, 5, 15, 4, 0, 0, time.UTC)
	var times []time.Time
	for i := range 10 {
		times = append(times, t0.Add(time.Duration(i)*time.Millisecond))
	}
	path := filepath.Join(dir, "live.pcap")
	writeCapture(t, path, layers.LinkTypeEthernet, times)
	// 7 dropped before the first packet, 5 after it, 3 before the eighth
	// and 4 after the last: 19.
	marks := [][2]int64{{0, 7}, {1, 12}, {7, 15}, {10, 19}}
	src := Source{Name: "live", Live: true, Open: func() (io.ReadCloser, error) {
		f, err := os.Open(path)
		return dropsReader{f, marks}, err
	}}
	s, _, _ := OpenSpool(filepath.Join(dir, "spool"), "pcap", "lax")
	s.SetLastSeq(0, false)
	cfg := CutConfig{Queue: "pcap", Instance: "lax", Codec: codecs.None, MaxBytes: pcap.HeaderSize + 5*116}
	if err := Cut(context.Background(), cfg, s, List(src), quiet, &Counters{}); err != nil {
		t.Fatal(err)
	}
	ready, _ := s.Ready()
	var got []int64
	for _, r := range ready {
		got = append(got, r.KernelDropped)
	}
	// The first block, packets 0–4, has what was dropped before packet
	// 5; the second the rest.
	if want := []int64{12, 7}; !slices.Equal(got, want) {
		t.Fatalf("kernel drops per block %v, want %v (19 in all)", got, want)
	}
}

// TestSpoolShipsAfterAnEndedCapture: when the server ended the site's
// capture with a block of the number the spool's next block would ship
// as, that block and every later one (cut already or not) ship one
// number up, and the state keeps it across a restart; an end at a
// number the spool shipped already moves nothing.
func TestSpoolShipsAfterAnEndedCapture(t *testing.T) {
	dir := t.TempDir()
	s, _, err := OpenSpool(dir, "pcap.sz", "lax")
	if err != nil {
		t.Fatal(err)
	}
	s.SetLastSeq(9, true)
	cut := func(seq uint64) {
		n := block.Name{Time: time.Unix(1746457865, 0), Seq: seq, Instance: "lax", Queue: "pcap.sz"}
		f, _ := s.Create(n)
		f.WriteString("block")
		if err := s.Finish(f, n, nil, Finished{}); err != nil {
			t.Fatal(err)
		}
	}
	ships := func() []uint64 {
		ready, err := s.Ready()
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, b := range ready {
			out = append(out, b.Ship.Seq)
		}
		return out
	}
	cut(10)
	cut(11)
	// 9 shipped (acknowledged, gone from the spool): nothing moves.
	if moved, err := s.AfterEnded(9); err != nil || moved {
		t.Fatalf("an end at a shipped number moved blocks: %v %v", moved, err)
	}
	if moved, err := s.AfterEnded(10); err != nil || !moved {
		t.Fatalf("an end at the next block's number: moved %v, %v", moved, err)
	}
	if got := ships(); !slices.Equal(got, []uint64{11, 12}) {
		t.Fatalf("after an end at 10 the blocks ship as %v; want 11, 12", got)
	}
	cut(12) // cut after: it follows
	s, _, err = OpenSpool(dir, "pcap.sz", "lax")
	if err != nil {
		t.Fatal(err)
	}
	if got := ships(); !slices.Equal(got, []uint64{11, 12, 13}) {
		t.Fatalf("after a restart the blocks ship as %v; want 11, 12, 13", got)
	}
	// Ended again (the agent away once more) before block 13 shipped.
	if moved, err := s.AfterEnded(13); err != nil || !moved {
		t.Fatalf("a second end: moved %v, %v", moved, err)
	}
	if got := ships(); !slices.Equal(got, []uint64{11, 12, 14}) {
		t.Fatalf("after a second end at 13 the blocks ship as %v; want 11, 12, 14", got)
	}
	if moved, _ := s.AfterEnded(13); moved {
		t.Fatal("the same end, told again, moved blocks again")
	}
}

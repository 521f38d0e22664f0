package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
)

// idPacket is a packet carrying its id, so a test can tell which arrived.
func idPacket(id uint64) (gopacket.CaptureInfo, []byte) {
	data := make([]byte, 64)
	binary.BigEndian.PutUint64(data, id)
	ts := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC).Add(time.Duration(id) * time.Millisecond)
	return gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: len(data)}, data
}

// idCapture is a capture of packets first..first+n-1.
func idCapture(first, n uint64) []byte {
	var buf bytes.Buffer
	w, _ := pcap.NewWriter(&buf, layers.LinkTypeEthernet, 65535, false)
	for id := first; id < first+n; id++ {
		w.WritePacket(idPacket(id))
	}
	w.Flush()
	return buf.Bytes()
}

// writeIDs writes packets first..first+n-1 as a capture, replacing the
// file in place as tcpdump does when its ring comes round (same inode).
func writeIDs(t *testing.T, path string, first, n uint64) {
	t.Helper()
	if err := os.WriteFile(path, idCapture(first, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

// appendIDs appends packets to a capture, as a writer that paused.
func appendIDs(t *testing.T, path string, first, n uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(idCapture(first, n)[pcap.HeaderSize:]); err != nil {
		t.Fatal(err)
	}
}

// spooledIDs returns the ids of the packets in the spool's blocks, in
// block order.
func spooledIDs(t *testing.T, s *Spool) []uint64 {
	t.Helper()
	ready, _ := s.Ready()
	var ids []uint64
	for _, r := range ready {
		raw, err := os.ReadFile(r.Path)
		if err != nil {
			t.Fatal(err)
		}
		rd, closer, err := pcap.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		for {
			data, _, err := rd.Next()
			if err != nil {
				break
			}
			ids = append(ids, binary.BigEndian.Uint64(data))
		}
		closer.Close()
	}
	return ids
}

// testSpool is a spool without fsync, numbering from 1.
func testSpool(t *testing.T, instance string) *Spool {
	t.Helper()
	s, _, err := OpenSpool(filepath.Join(t.TempDir(), "spool"), "pcap", instance)
	if err != nil {
		t.Fatal(err)
	}
	s.noSync = true
	s.SetLastSeq(0, false)
	return s
}

// startCut cuts srcs into s until the returned stop is called.
func startCut(t *testing.T, s *Spool, srcs Sources) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cfg := CutConfig{Queue: "pcap", Instance: s.st.Instance, Codec: codecs.None, MaxBytes: 1 << 20}
		done <- Cut(ctx, cfg, s, srcs, quiet, &Counters{})
	}()
	return func() {
		cancel()
		<-done
	}
}

// waitSpooled waits until the spool's blocks hold n packets.
func waitSpooled(t *testing.T, s *Spool, n int) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("%d packets spooled", n), func() bool { return len(spooledIDs(t, s)) >= n })
}

// inOrder fails unless ids are 0, 1, 2, … n-1.
func inOrder(t *testing.T, ids []uint64, n int) {
	t.Helper()
	for i, id := range ids {
		if id != uint64(i) {
			t.Fatalf("packet %d of %d is id %d: each must come once, in order", i, len(ids), id)
		}
	}
	if len(ids) != n {
		t.Fatalf("%d packets, want %d", len(ids), n)
	}
}

// TestWatchRingAndGrowth: a watched directory written like `tcpdump -C
// 1 -W 2` (two names reused in a ring, each rewritten in place) has every
// version of every file cut once; a finished file that grows has only its
// new packets cut; a file removed is forgotten by the spool.
func TestWatchRingAndGrowth(t *testing.T) {
	ring := t.TempDir()
	s := testSpool(t, "w")
	defer startCut(t, s, &Watch{Dir: ring, Settle: 150 * time.Millisecond, Poll: 10 * time.Millisecond, Spool: s})()
	r0, r1 := filepath.Join(ring, "cap0"), filepath.Join(ring, "cap1")

	writeIDs(t, r0, 0, 100)
	writeIDs(t, r1, 100, 120)
	waitSpooled(t, s, 220)
	// The ring comes round: both names rewritten with new packets.
	writeIDs(t, r0, 220, 90)
	writeIDs(t, r1, 310, 110)
	waitSpooled(t, s, 420)
	// cap1's writer resumes after a pause longer than the settle time.
	appendIDs(t, r1, 420, 30)
	waitSpooled(t, s, 450)
	if err := os.Remove(r0); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "cap0 to be forgotten", func() bool { return !slices.Contains(s.SourceNames(), r0) })

	time.Sleep(300 * time.Millisecond) // nothing more may come
	inOrder(t, spooledIDs(t, s), 450)
	if names := s.SourceNames(); len(names) != 1 || names[0] != r1 {
		t.Fatalf("the spool remembers %v, want only %s", names, r1)
	}
}

// TestWatchCompare: how a remembered file is judged, including one cut in
// part before a crash and replaced while the agent was down.
func TestWatchCompare(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cap")
	writeIDs(t, p, 0, 100)
	fi, _ := os.Stat(p)
	old := Stamp{Size: fi.Size(), ModTime: fi.ModTime(), Head: HeadOf(p)}
	stat := func() candidate {
		fi, _ := os.Stat(p)
		return candidate{path: p, mod: fi.ModTime(), size: fi.Size()}
	}
	w := &Watch{Dir: dir}
	for _, tc := range []struct {
		name string
		pos  SourcePos
		edit func()
		want change
	}{
		{"finished, untouched", SourcePos{Packets: 100, Done: true, Stamp: old}, func() {}, unchanged},
		{"remembered by an older agent", SourcePos{Packets: 100, Done: true}, func() { writeIDs(t, p, 500, 100) }, unchanged},
		{"finished, then grew", SourcePos{Packets: 100, Done: true, Stamp: old}, func() { appendIDs(t, p, 100, 5) }, grew},
		{"finished, then replaced", SourcePos{Packets: 100, Done: true, Stamp: old}, func() { writeIDs(t, p, 700, 100) }, replaced},
		{"finished, replaced by a shorter one", SourcePos{Packets: 100, Done: true, Stamp: old}, func() { writeIDs(t, p, 900, 3) }, replaced},
		{"cut in part, same file", SourcePos{Packets: 40, Stamp: old}, func() {}, unchanged},
		{"cut in part, replaced while down", SourcePos{Packets: 40, Stamp: old}, func() { writeIDs(t, p, 300, 100) }, replaced},
	} {
		writeIDs(t, p, 0, 100)
		os.Chtimes(p, old.ModTime, old.ModTime)
		tc.edit()
		if tc.name == "finished, then grew" || tc.name == "finished, then replaced" {
			later := old.ModTime.Add(time.Second)
			os.Chtimes(p, later, later)
		}
		if got := w.compare(stat(), tc.pos); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestWatchSaysOnce: a replaced file still being written is reported
// once, not at every look.
func TestWatchSaysOnce(t *testing.T) {
	dir := t.TempDir()
	s, _, _ := OpenSpool(filepath.Join(dir, "spool"), "pcap", "w")
	s.noSync = true
	p := filepath.Join(dir, "cap0")
	writeIDs(t, p, 0, 10)
	abs, _ := filepath.Abs(p)
	fi, _ := os.Stat(p)
	s.mu.Lock()
	s.st.Sources[abs] = SourcePos{Packets: 10, Done: true, Stamp: Stamp{Size: fi.Size(), ModTime: fi.ModTime(), Head: HeadOf(abs)}}
	s.mu.Unlock()
	writeIDs(t, p, 100, 3) // the ring came round; the writer is still at it
	var logged bytes.Buffer
	w := &Watch{Dir: dir, Settle: time.Hour, Spool: s, Log: slog.New(slog.NewTextHandler(&logged, nil))}
	w.taken, w.seen = map[string]bool{}, map[string]fileState{}
	for range 5 {
		if _, ok, err := w.ready(); ok || err != nil {
			t.Fatalf("took the file still being written (%v)", err)
		}
	}
	if n := strings.Count(logged.String(), "replaced under the same name"); n != 1 {
		t.Fatalf("said %d times that the file was replaced:\n%s", n, logged.String())
	}
}

// TestFollowReplaced: a followed file whose writer restarts — truncating
// it in place, or renaming a new file over it — is read again from the
// start of the new one: every packet of every version once, in order.
func TestFollowReplaced(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "live.pcap")
	writeIDs(t, p, 0, 100)
	s := testSpool(t, "f")
	src, err := GrowingSource(p, 10*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer startCut(t, s, List(src))()
	waitSpooled(t, s, 100)
	writeIDs(t, p, 100, 50) // truncated and rewritten in place
	waitSpooled(t, s, 150)
	tmp := filepath.Join(dir, "new.pcap")
	writeIDs(t, tmp, 150, 70)
	if err := os.Rename(tmp, p); err != nil { // a new file under the name
		t.Fatal(err)
	}
	waitSpooled(t, s, 220)
	appendIDs(t, p, 220, 10)
	waitSpooled(t, s, 230)
	// Restarted and already past where the reader was before it looks:
	// only the first bytes tell.
	big := idCapture(1000, 400)
	if err := os.WriteFile(p, big, 0o644); err != nil {
		t.Fatal(err)
	}
	waitSpooled(t, s, 630)
	got := spooledIDs(t, s)
	for i := range got[230:] {
		got[230+i] -= 1000 - 230 // ids 1000.. follow 0..229
	}
	inOrder(t, got, 630)
}

// TestFollowReplacedWhileDown: a followed file replaced while the agent
// is stopped is read from its start at the next start, not from where
// the old one was left.
func TestFollowReplacedWhileDown(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "live.pcap")
	writeIDs(t, p, 0, 100)
	s := testSpool(t, "f")
	follow := func(until int) {
		t.Helper()
		src, err := GrowingSource(p, 10*time.Millisecond, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		stop := startCut(t, s, List(src))
		waitSpooled(t, s, until)
		time.Sleep(100 * time.Millisecond) // a pause, so the head is learnt and saved
		appendIDs(t, p, uint64(until), 1)  // one more, cut into a block with the head
		waitSpooled(t, s, until+1)
		stop()
	}
	follow(100)
	if pos := s.Source(p); pos.Packets != 101 || pos.Head == "" {
		t.Fatalf("position after the first run: %+v", pos)
	}
	writeIDs(t, p, 101, 150) // the writer restarted while the agent was down
	follow(251)
	inOrder(t, spooledIDs(t, s), 252)
}

// gzipFile compresses path into path.gz and removes path, as tcpdump -z
// gzip does after each rotation.
func gzipFile(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw, _ := codecs.Gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	if err := os.WriteFile(path+".gz", buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// TestWatchCompressedAfter: files compressed after rotation (tcpdump -G
// -z gzip) are not shipped a second time as their .gz; a file cut short
// by a crash and compressed while the agent was down is read on from the
// .gz where it was left.
func TestWatchCompressedAfter(t *testing.T) {
	dir := t.TempDir()
	s := testSpool(t, "z")
	capFile := func(i int) string { return filepath.Join(dir, fmt.Sprintf("cap%d.pcap", i)) }
	stop := startCut(t, s, &Watch{Dir: dir, Settle: 150 * time.Millisecond, Poll: 10 * time.Millisecond, Spool: s})
	writeIDs(t, capFile(1), 0, 100)
	writeIDs(t, capFile(2), 100, 50)
	waitSpooled(t, s, 100)
	gzipFile(t, capFile(1))
	writeIDs(t, capFile(3), 150, 50)
	waitSpooled(t, s, 200)
	gzipFile(t, capFile(2))
	gzipFile(t, capFile(3))
	time.Sleep(400 * time.Millisecond) // longer than the settle time: a .gz taken would be cut by now
	stop()
	inOrder(t, spooledIDs(t, s), 200)
	names := s.SourceNames()
	slices.Sort(names)
	if want := []string{capFile(1) + ".gz", capFile(2) + ".gz", capFile(3) + ".gz"}; !slices.Equal(names, want) {
		t.Fatalf("the spool remembers %v, want %v", names, want)
	}

	// A crash left cap4 cut to packet 30; it was compressed meanwhile.
	writeIDs(t, capFile(4), 200, 80)
	abs, _ := filepath.Abs(capFile(4))
	s.mu.Lock()
	s.st.Sources[abs] = SourcePos{Packets: 30, Stamp: Stamp{Head: HeadOf(abs)}}
	s.mu.Unlock()
	gzipFile(t, capFile(4))
	// The spool's blocks hold ids 0..199; the 30 cut before the crash are
	// stood in for by the offset below.
	defer startCut(t, s, &Watch{Dir: dir, Settle: 150 * time.Millisecond, Poll: 10 * time.Millisecond, Spool: s})()
	waitSpooled(t, s, 250)
	time.Sleep(300 * time.Millisecond)
	got := spooledIDs(t, s)
	if len(got) != 250 || got[200] != 230 || got[249] != 279 {
		t.Fatalf("after the crash: %d packets, then ids %v", len(got), got[200:])
	}
}

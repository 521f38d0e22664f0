package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/block"
)

// importFiles finishes one block per file, as an import of many small
// captures does, and returns the spool's state bytes written per block
// after each of the given counts of files.
func importFiles(t *testing.T, s *Spool, files int, at ...int) []float64 {
	t.Helper()
	var out []float64
	for i := 1; i <= files; i++ {
		n := block.Name{Time: time.Unix(1746457865, 0), Seq: uint64(i), Instance: "lax", Queue: "pcap.sz"}
		f, err := s.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("block")
		src := fmt.Sprintf("/captures/2025/05/05/lax-%06d.pcap", i)
		if err := s.Finish(f, n, map[string]SourcePos{src: {Packets: 100, Done: true, Stamp: Stamp{Size: 4096, Head: "0123456789abcdef"}}}, Finished{KernelDropped: int64(i % 3)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Remove(ReadyBlock{Name: n, Path: filepath.Join(s.dir, "ready", n.String()), Size: 5}); err != nil {
			t.Fatal(err)
		}
		for _, a := range at {
			if i == a {
				out = append(out, float64(s.StateBytesWritten())/float64(i))
			}
		}
	}
	return out
}

// TestSpoolStateCostFlat: importing 20,000 files, the spool's state
// bytes written per block stay flat (they grew with every file finished
// when each block rewrote the whole state: about 1 MB per block here by
// the end), and a reopened spool has every source and drop count.
func TestSpoolStateCostFlat(t *testing.T) {
	dir := t.TempDir()
	s, _, err := OpenSpool(dir, "pcap.sz", "lax")
	if err != nil {
		t.Fatal(err)
	}
	s.noSync = true
	if err := s.SetLastSeq(0, false); err != nil {
		t.Fatal(err)
	}
	per := importFiles(t, s, 20000, 2000, 20000)
	t.Logf("state bytes written per block: %.0f after 2,000 files, %.0f after 20,000", per[0], per[1])
	if per[1] > 1.5*per[0] {
		t.Errorf("state bytes per block grew from %.0f to %.0f as files finished; want flat", per[0], per[1])
	}
	if per[1] > 2048 {
		t.Errorf("%.0f state bytes per block; a block's record is a few hundred", per[1])
	}
	// Every block was shipped: their drop counts are gone (the last
	// one's at the reopen, which finds its block no longer spooled).
	s2, rec, err := OpenSpool(dir, "pcap.sz", "lax")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Fresh || len(s2.st.Sources) != 20000 || s2.st.LastSeq != 20000 || !s2.st.Sources["/captures/2025/05/05/lax-012345.pcap"].Done {
		t.Fatalf("reopened: fresh %v, %d sources, last seq %d", rec.Fresh, len(s2.st.Sources), s2.st.LastSeq)
	}
	if len(s2.st.Dropped) != 0 {
		t.Errorf("drop counts of shipped blocks survive: %d", len(s2.st.Dropped))
	}
}

// TestSpoolJournalCrashes: a torn last line (a crash mid-append) is cut
// off and what came before stands; lines a snapshot already holds (a
// crash between the snapshot and emptying the journal) are not applied
// again over it; a damaged line in the middle is an error naming the
// file, not a silent loss.
func TestSpoolJournalCrashes(t *testing.T) {
	dir := t.TempDir()
	s, _, err := OpenSpool(dir, "pcap.sz", "lax")
	if err != nil {
		t.Fatal(err)
	}
	s.noSync = true
	s.SetLastSeq(0, false)
	importFiles(t, s, 10)
	journal := filepath.Join(dir, "state.log")
	before, _ := os.ReadFile(journal)
	if len(before) == 0 {
		t.Fatal("no journal lines after 10 blocks")
	}

	// Torn: half a line at the end.
	os.WriteFile(journal, append(before, []byte(`{"gen":999,"queue":"pcap.sz","instance":"lax","last_seq":77`)...), 0o640)
	s, _, err = OpenSpool(dir, "pcap.sz", "lax")
	if err != nil {
		t.Fatal(err)
	}
	if next, _ := s.NextSeq(); next != 11 {
		t.Errorf("after a torn line the next sequence is %d; want 11", next)
	}
	if after, _ := os.ReadFile(journal); string(after) != string(before) {
		t.Errorf("the torn line was not cut off:\n%s", after[len(before):])
	}

	// Folded: the snapshot holds everything; stale lines stay behind.
	s.noSync = true
	s.mu.Lock()
	if err := s.snapshotLocked(); err != nil {
		t.Fatal(err)
	}
	s.mu.Unlock()
	os.WriteFile(journal, before, 0o640) // as if the crash came before the journal was emptied
	s, _, err = OpenSpool(dir, "pcap.sz", "lax")
	if err != nil {
		t.Fatal(err)
	}
	if next, _ := s.NextSeq(); next != 11 || len(s.st.Sources) != 10 {
		t.Errorf("stale lines over the snapshot: next %d, %d sources; want 11 and 10", next, len(s.st.Sources))
	}

	// Damaged in the middle.
	lines := strings.SplitAfter(string(before), "\n")
	lines[1] = "{not json\n"
	os.WriteFile(filepath.Join(dir, "state.json"), []byte(`{"queue":"pcap.sz","instance":"lax"}`), 0o640)
	os.WriteFile(journal, []byte(strings.Join(lines, "")), 0o640)
	if _, _, err := OpenSpool(dir, "pcap.sz", "lax"); err == nil || !strings.Contains(err.Error(), "state.log is corrupt") {
		t.Errorf("a damaged journal line: %v", err)
	}
}

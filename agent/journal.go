package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The spool's state is a snapshot, DIR/state.json, and a journal of the
// changes since it, DIR/state.log: one JSON line per state write, holding
// the scalar fields and only the sources and kernel-drop counts that
// changed. A write appends a line and fsyncs it, so what a block costs to
// record does not grow with the sources already finished (a backfill of
// 100,000 files used to rewrite their whole list at every block). When
// the journal outgrows twice the snapshot it is folded into a new
// snapshot, whose cost spread over the lines before it stays a constant
// per write.
//
// Every write carries a generation. A snapshot is written (temp, fsync,
// rename, fsync dir) before the journal is emptied, so a crash between
// the two leaves lines the snapshot already holds: their generations are
// not above its own, and they are skipped. A crash while appending leaves
// at most a torn last line, which no caller was told was written; it is
// cut off at the next open.

// compactMin is the journal size below which it is never folded.
const compactMin = 64 << 10

// stateRecord is one journal line: the state's scalars, the sources and
// drop counts set since the last line, and those removed.
type stateRecord struct {
	spoolState
	Forget  []string `json:"forget,omitempty"`  // sources no longer remembered
	Shipped []string `json:"shipped,omitempty"` // blocks whose drop count is gone
}

func (s *Spool) journalPath() string { return filepath.Join(s.dir, "state.log") }

// markSource notes that a source's position changed (or, set false, that
// it was forgotten) for the next journal line.
func (s *Spool) markSource(name string, set bool) {
	if s.dirtySrc == nil {
		s.dirtySrc = map[string]bool{}
	}
	s.dirtySrc[name] = set
}

// markDropped does the same for a block's kernel-drop count.
func (s *Spool) markDropped(name string, set bool) {
	if s.dirtyDrop == nil {
		s.dirtyDrop = map[string]bool{}
	}
	s.dirtyDrop[name] = set
}

// changes splits what dirty marks into the entries of m set since the
// last write and the names removed.
func changes[V any](dirty map[string]bool, m map[string]V) (set map[string]V, gone []string) {
	for name, isSet := range dirty {
		if !isSet {
			gone = append(gone, name)
			continue
		}
		if set == nil {
			set = map[string]V{}
		}
		set[name] = m[name]
	}
	return set, gone
}

// saveLocked makes the state durable: a journal line, or a new snapshot
// when the journal has grown past twice the snapshot (or there is none).
func (s *Spool) saveLocked() error {
	s.st.Gen++
	rec := stateRecord{spoolState: s.st}
	rec.Sources, rec.Forget = changes(s.dirtySrc, s.st.Sources)
	rec.Dropped, rec.Shipped = changes(s.dirtyDrop, s.st.Dropped)
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if !s.hasSnapshot || s.logSize+int64(len(line)) > max(compactMin, 2*s.snapSize) {
		return s.snapshotLocked()
	}
	f, err := os.OpenFile(s.journalPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	if err := s.writeSynced(f, line); err != nil {
		return err
	}
	s.logSize += int64(len(line))
	s.written.Add(int64(len(line)))
	clear(s.dirtySrc)
	clear(s.dirtyDrop)
	return nil
}

// snapshotLocked writes the whole state as the snapshot and empties the
// journal.
func (s *Spool) snapshotLocked() error {
	raw, err := json.MarshalIndent(s.st, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.statePath() + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := s.writeSynced(f, raw); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.statePath()); err != nil {
		return err
	}
	if err := s.syncDir(s.dir); err != nil {
		return err
	}
	// The snapshot holds every line: the journal may go. A crash before
	// it does leaves lines of generations the snapshot has.
	if err := truncateSynced(s.journalPath(), 0, s); err != nil {
		return err
	}
	s.hasSnapshot = true
	s.snapSize, s.logSize = int64(len(raw)), 0
	s.written.Add(int64(len(raw)))
	clear(s.dirtySrc)
	clear(s.dirtyDrop)
	return nil
}

// writeSynced writes data to f, fsyncs and closes it.
func (s *Spool) writeSynced(f *os.File, data []byte) error {
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := s.fsync(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// truncateSynced cuts a file to size, durably; a missing file is fine.
func truncateSynced(path string, size int64, s *Spool) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := s.fsync(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replayJournal applies the journal's lines newer than the snapshot to
// s.st, cutting off a torn last line; it reports whether any applied.
func (s *Spool) replayJournal() (bool, error) {
	raw, err := os.ReadFile(s.journalPath())
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	applied := false
	good := 0
	for good < len(raw) {
		end := bytes.IndexByte(raw[good:], '\n')
		if end < 0 {
			break // torn: never acknowledged as written
		}
		var rec stateRecord
		if err := json.Unmarshal(raw[good:good+end], &rec); err != nil {
			if good+end+1 == len(raw) {
				break // a torn last line that happens to end in a newline
			}
			return false, fmt.Errorf("spool %s: state.log is corrupt at byte %d (%v); move the spool aside and start with a new --instance", s.dir, good, err)
		}
		good += end + 1
		if rec.Gen <= s.st.Gen {
			continue // already in the snapshot
		}
		s.apply(rec)
		applied = true
	}
	if good < len(raw) {
		if err := truncateSynced(s.journalPath(), int64(good), s); err != nil {
			return false, err
		}
	}
	s.logSize = int64(good)
	return applied, nil
}

// apply lays a journal line over the state.
func (s *Spool) apply(rec stateRecord) {
	sources, dropped := s.st.Sources, s.st.Dropped
	s.st = rec.spoolState
	s.st.Sources, s.st.Dropped = sources, dropped
	if s.st.Sources == nil {
		s.st.Sources = map[string]SourcePos{}
	}
	for name, pos := range rec.Sources {
		s.st.Sources[name] = pos
	}
	for _, name := range rec.Forget {
		delete(s.st.Sources, name)
	}
	if len(rec.Dropped) > 0 && s.st.Dropped == nil {
		s.st.Dropped = map[string]int64{}
	}
	for name, n := range rec.Dropped {
		s.st.Dropped[name] = n
	}
	for _, name := range rec.Shipped {
		delete(s.st.Dropped, name)
	}
}

// StateBytesWritten is how many bytes the spool has written to its state
// files (snapshot and journal) since it was opened.
func (s *Spool) StateBytesWritten() int64 { return s.written.Load() }

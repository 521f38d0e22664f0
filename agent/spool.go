// Package agent holds the capture-site agent: packet sources, the block
// cutter, the on-disk spool and the shipper that uploads spooled blocks
// to a Plumb server. The same code imports old captures for backfill.
package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plumb-dev/plumb/block"
)

// Spool is the agent's directory of finished blocks waiting for the
// server's acknowledgement, with the state that makes restarts exact.
//
// Layout: DIR/ready/NAME are finished blocks; DIR/tmp/ holds the block being
// cut; DIR/state.json and its journal DIR/state.log (see journal.go) are
// the last sequence number used and how far each source has been read
// into finished blocks.
//
// A block is finished in this order, so a crash at any point loses and
// doubles nothing: the temp file is fsynced; the state naming the new last
// sequence, the source positions after the block and the temp file as
// pending is written (temp, fsync, rename, fsync dir); the temp file is
// renamed into ready/ and the directory fsynced. On open, a pending temp
// file still in tmp/ is complete and moves to ready/; any other temp file
// is a block cut short by the crash and is discarded (its packets are read
// again from a file source, or counted as lost from stdin or a live
// interface).
type Spool struct {
	dir string
	// noSync skips fsync, for fuzzing only: the fuzzer needs speed, not
	// durability.
	noSync bool

	mu    sync.Mutex
	st    spoolState
	bytes int64 // size of ready/
	// sums are the SHA-256s of blocks finished since the spool was
	// opened, taken as they were written: shipping need not read a block
	// twice, and a block damaged in the spool is refused by the server
	// instead of stored damaged. Blocks from before a restart have none
	// and are hashed when shipped.
	sums  map[string]string
	ready chan struct{} // closed and replaced when a block is finished or removed

	// The journal (journal.go): what changed since the last state write,
	// and the sizes that decide when the journal is folded.
	dirtySrc, dirtyDrop map[string]bool
	hasSnapshot         bool
	snapSize, logSize   int64
	written             atomic.Int64
}

// SourcePos is how far a source has been read into finished blocks, and
// for files what the file was when read, so a file replaced under the
// same name (a `tcpdump -W` ring reuses its names) is read again.
type SourcePos struct {
	Packets int64 `json:"packets"`
	Done    bool  `json:"done,omitempty"`
	Stamp
}

// Stamp is what a capture file is recognised by: its size and time when
// taken, and a hash of its first bytes (see HeadOf).
type Stamp struct {
	Size    int64     `json:"size,omitempty"`
	ModTime time.Time `json:"mtime,omitzero"`
	Head    string    `json:"head,omitempty"`
}

type spoolState struct {
	// Gen counts state writes; a journal line older than the snapshot
	// is skipped.
	Gen      uint64               `json:"gen,omitempty"`
	Queue    string               `json:"queue"`
	Instance string               `json:"instance"`
	LastSeq  uint64               `json:"last_seq"`
	HasSeq   bool                 `json:"has_seq"` // LastSeq is meaningful
	Sources  map[string]SourcePos `json:"sources"`
	Pending  string               `json:"pending,omitempty"`
	// LostBytes counts bytes of blocks cut short by crashes whose source
	// could not be read again.
	LostBytes int64 `json:"lost_bytes,omitempty"`
	// Server is the identity of the server the spool ships to, learned at
	// the first contact: its sequence numbers and finished sources are
	// that server's.
	Server string `json:"server,omitempty"`
	// Provisional: the spool started while the server could not be asked
	// for the instance's last sequence number, so its blocks are numbered
	// from 1 on disk and nothing ships until the first contact sets
	// Offset, once: block p on disk ships as p+Offset. The rebase is one
	// state write, so a block has one identity whatever crashes when.
	Provisional bool   `json:"provisional,omitempty"`
	Offset      uint64 `json:"offset,omitempty"`
	// Skips are blocks on disk from which ship numbers move up by one
	// more each: the server ended the site's capture (its agent seemed
	// dead) with a block of the number the block would have shipped as.
	Skips []uint64 `json:"skips,omitempty"`
	// Dropped is, per block not yet acknowledged, what the kernel dropped
	// while it was cut; it ships in the block's header.
	Dropped map[string]int64 `json:"dropped,omitempty"`
	// Final is the sequence number (on disk) of the last block of a
	// finite source that ended, 0 for none: it ships marked final.
	Final uint64 `json:"final,omitempty"`
}

// Recovered says what OpenSpool found and did.
type Recovered struct {
	Fresh         bool  // no state: a new spool
	Promoted      int   // pending blocks moved to ready/
	Discarded     int   // partial blocks removed
	DiscardedSize int64 // their bytes
}

// OpenSpool opens (creating if needed) a spool for one queue and instance
// and recovers it after a crash. A spool holds one instance: opening it
// for another is an error, since sequence numbers are per instance.
func OpenSpool(dir, queue, instance string) (*Spool, Recovered, error) {
	var rec Recovered
	for _, d := range []string{"ready", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o750); err != nil {
			return nil, rec, fmt.Errorf("spool %s: %w", dir, err)
		}
	}
	s := &Spool{dir: dir, ready: make(chan struct{}), sums: map[string]string{}}
	s.st = spoolState{Queue: queue, Instance: instance, Sources: map[string]SourcePos{}}
	raw, err := os.ReadFile(s.statePath())
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, rec, err
	default:
		if err := json.Unmarshal(raw, &s.st); err != nil {
			return nil, rec, fmt.Errorf("spool %s: state.json is corrupt (%v); move the spool aside and start with a new --instance", dir, err)
		}
		s.hasSnapshot, s.snapSize = true, int64(len(raw))
		if s.st.Sources == nil {
			s.st.Sources = map[string]SourcePos{}
		}
	}
	applied, err := s.replayJournal()
	if err != nil {
		return nil, rec, err
	}
	rec.Fresh = !s.hasSnapshot && !applied
	if s.st.Queue != queue || s.st.Instance != instance {
		return nil, rec, fmt.Errorf("spool %s belongs to queue %s instance %s, not %s %s; use another --spool", dir, s.st.Queue, s.st.Instance, queue, instance)
	}
	tmps, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil {
		return nil, rec, err
	}
	for _, e := range tmps {
		p := filepath.Join(dir, "tmp", e.Name())
		if s.st.Pending != "" && e.Name() == filepath.Base(s.st.Pending) {
			if err := os.Rename(p, filepath.Join(dir, "ready", blockNameOfTemp(e.Name()))); err != nil {
				return nil, rec, err
			}
			rec.Promoted++
			continue
		}
		if fi, err := e.Info(); err == nil {
			rec.DiscardedSize += fi.Size()
		}
		os.Remove(p)
		rec.Discarded++
	}
	if err := syncDir(filepath.Join(dir, "ready")); err != nil {
		return nil, rec, err
	}
	s.st.Pending = ""
	ready, err := s.Ready()
	if err != nil {
		return nil, rec, err
	}
	here := map[string]bool{}
	for _, r := range ready {
		s.bytes += r.Size
		here[r.Name.String()] = true
	}
	for n := range s.st.Dropped {
		if !here[n] {
			delete(s.st.Dropped, n) // shipped before the crash
			s.markDropped(n, false)
		}
	}
	return s, rec, nil
}

// tempName is the temp file of a block: the block name with a prefix, so
// recovery knows the name without reading the file.
func tempName(name string) string         { return "cut-" + name }
func blockNameOfTemp(tmp string) string   { return tmp[len("cut-"):] }
func (s *Spool) statePath() string        { return filepath.Join(s.dir, "state.json") }
func (s *Spool) tempPath(n string) string { return filepath.Join(s.dir, "tmp", tempName(n)) }

// NextSeq returns the sequence number the next block will get, and
// whether the spool knows it (false for a fresh spool: the caller must
// learn it from the server).
func (s *Spool) NextSeq() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.st.HasSeq {
		return 0, false
	}
	return s.st.LastSeq + 1, true
}

// SetLastSeq records the last sequence number used by the instance, as
// learned from the server for a fresh spool.
func (s *Spool) SetLastSeq(seq uint64, known bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.LastSeq, s.st.HasSeq = seq, true
	if !known {
		// No block of this instance anywhere: the first block is seq 1.
		s.st.LastSeq = 0
	}
	return s.saveLocked()
}

// StartProvisional starts a fresh spool numbering its blocks from 1 on
// disk while the server cannot be asked where the instance stands; the
// first contact (Rebase) fixes the numbers they ship under.
func (s *Spool) StartProvisional() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.LastSeq, s.st.HasSeq, s.st.Provisional = 0, true, true
	return s.saveLocked()
}

// Provisional reports whether the spool waits for the first contact to
// know the sequence numbers its blocks ship under.
func (s *Spool) Provisional() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Provisional
}

// Rebase ends a provisional spool at the first contact: its blocks ship
// after the server's last sequence number of the instance (last, when
// found). It does nothing to a spool that is not provisional.
func (s *Spool) Rebase(last uint64, found bool) (offset uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.st.Provisional {
		return s.st.Offset, nil
	}
	if !found {
		last = 0
	}
	s.st.Offset, s.st.Provisional = last, false
	s.signalLocked() // the blocks may ship now
	return last, s.saveLocked()
}

// shipSeqLocked is the number block p on disk ships as.
func (s *Spool) shipSeqLocked(p uint64) uint64 {
	n := p + s.st.Offset
	for _, k := range s.st.Skips {
		if k <= p {
			n++
		}
	}
	return n
}

// AfterEnded takes in that the server ended the site's capture with a
// block numbered ended: the block that would have shipped under that
// number, and every later one, ship one number up, after it, as the
// start of a new capture. It reports whether a block moved; a number no
// block of the spool ships as (shipped already, or skipped) moves none.
func (s *Spool) AfterEnded(ended uint64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := uint64(0); k <= uint64(len(s.st.Skips)); k++ {
		if ended < s.st.Offset+k+1 {
			break
		}
		p := ended - s.st.Offset - k
		if s.shipSeqLocked(p) != ended {
			continue
		}
		// p is shipped unless it is waiting in ready/ or not cut yet.
		if p <= s.st.LastSeq && !s.readyHasLocked(p) {
			return false, nil
		}
		s.st.Skips = append(s.st.Skips, p)
		slices.Sort(s.st.Skips)
		s.signalLocked()
		return true, s.saveLocked()
	}
	return false, nil
}

// readyHasLocked says whether block p on disk waits in ready/.
func (s *Spool) readyHasLocked(p uint64) bool {
	ents, err := os.ReadDir(filepath.Join(s.dir, "ready"))
	if err != nil {
		return false
	}
	for _, e := range ents {
		if n, err := block.Parse(e.Name()); err == nil && n.Seq == p {
			return true
		}
	}
	return false
}

// Identity is the queue and instance the spool holds.
func (s *Spool) Identity() (queue, instance string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Queue, s.st.Instance
}

// ErrOtherServer: the spool belongs to another server.
var ErrOtherServer = errors.New("the spool belongs to another server")

// BindServer ties the spool to the server of identity id at the first
// contact, and refuses another server after that: the spool's sequence
// numbers and the sources it finished are the first server's, so shipping
// to another would skip what it never got and number blocks with gaps.
func (s *Spool) BindServer(id string) error {
	if id == "" {
		return nil // a server too old to say
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.st.Server {
	case id:
		return nil
	case "":
		s.st.Server = id
		return s.saveLocked()
	}
	return fmt.Errorf("%w: spool %s ships queue %s instance %s to server %s, and this server is %s; give this server its own --spool (or move %s aside to start over)",
		ErrOtherServer, s.dir, s.st.Queue, s.st.Instance, s.st.Server, id, s.dir)
}

// Source returns how far a source was read into finished blocks.
func (s *Spool) Source(name string) SourcePos {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Sources[name]
}

// Reopen has a source read again: from where it was left when it only
// grew (keep), or from its start when it was replaced.
func (s *Spool) Reopen(name string, keep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pos := s.st.Sources[name]
	pos.Done = false
	if !keep {
		pos = SourcePos{} // a new file: nothing of it read yet
	}
	s.st.Sources[name] = pos
	s.markSource(name, true)
}

// Carry moves what the spool remembers of a source to another name, with
// the stamp of the file now under it: the capture was compressed into
// a new file and the old one removed.
func (s *Spool) Carry(from, to string, stamp Stamp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pos, ok := s.st.Sources[from]
	if !ok {
		return
	}
	pos.Stamp = stamp
	s.st.Sources[to] = pos
	delete(s.st.Sources, from)
	s.markSource(to, true)
	s.markSource(from, false)
}

// Forget drops what the spool remembers of finished sources (files gone
// from a watched directory), so its state does not grow with every file
// ever shipped. A source not finished is kept.
func (s *Spool) Forget(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if s.st.Sources[n].Done {
			delete(s.st.Sources, n)
			s.markSource(n, false)
		}
	}
}

// SourceNames lists the sources the spool remembers.
func (s *Spool) SourceNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.st.Sources))
}

// AddLost records bytes lost with a block cut short.
func (s *Spool) AddLost(n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.LostBytes += n
	return s.saveLocked()
}

// Create opens the temp file for the block named n.
func (s *Spool) Create(n block.Name) (*os.File, error) {
	return os.OpenFile(s.tempPath(n.String()), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
}

// Finished says what the cutter knows of a block it finished.
type Finished struct {
	// SHA256, when not empty, is the SHA-256 (hex) of what was written.
	SHA256 string
	// KernelDropped is what the kernel dropped while the block was cut.
	KernelDropped int64
	// Final: the sources ended with this block and are finite.
	Final bool
}

// Finish makes the block in f durable and ready to ship, and records the
// source positions after it, as one step (see the type's comment). f is
// closed.
func (s *Spool) Finish(f *os.File, n block.Name, pos map[string]SourcePos, fin Finished) error {
	sum, dropped := fin.SHA256, fin.KernelDropped
	if err := s.fsync(f); err != nil {
		f.Close()
		return fmt.Errorf("spool: fsync block %s: %w", n, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.LastSeq, s.st.HasSeq = n.Seq, true
	for k, v := range pos {
		s.st.Sources[k] = v
		s.markSource(k, true)
	}
	s.st.Pending = tempName(n.String())
	if fin.Final {
		s.st.Final = n.Seq
	}
	if dropped > 0 {
		if s.st.Dropped == nil {
			s.st.Dropped = map[string]int64{}
		}
		s.st.Dropped[n.String()] = dropped
		s.markDropped(n.String(), true)
	}
	if err := s.saveLocked(); err != nil {
		return err
	}
	if err := os.Rename(s.tempPath(n.String()), filepath.Join(s.dir, "ready", n.String())); err != nil {
		return err
	}
	if err := s.syncDir(filepath.Join(s.dir, "ready")); err != nil {
		return err
	}
	s.bytes += fi.Size()
	if sum != "" {
		s.sums[n.String()] = sum
	}
	s.signalLocked()
	return nil
}

// MarkFinal marks the block with disk sequence number seq as the last of
// a finite source, for when it was finished before the source ended. A
// block already shipped is not marked again.
func (s *Spool) MarkFinal(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq == 0 || s.st.Final == seq {
		return nil
	}
	s.st.Final = seq
	return s.saveLocked()
}

// Discard removes an unfinished block's temp file.
func (s *Spool) Discard(f *os.File, n block.Name) {
	f.Close()
	os.Remove(s.tempPath(n.String()))
}

// ReadyBlock is a finished block in the spool.
type ReadyBlock struct {
	Name block.Name // as on disk
	// Ship is the name it ships under: Name, or after a provisional
	// start Name renumbered after the server's last block.
	Ship block.Name
	Path string
	Size int64
	// SHA256 (hex) when known without reading the block.
	SHA256 string
	// KernelDropped is what the kernel dropped while it was cut.
	KernelDropped int64
	// Final: the last block of a finite source (flight.Header.Final).
	Final bool
}

// Ready lists the finished blocks in sequence order.
func (s *Spool) Ready() ([]ReadyBlock, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "ready"))
	if err != nil {
		return nil, err
	}
	var out []ReadyBlock
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ents {
		n, err := block.Parse(e.Name())
		if err != nil {
			continue // not ours; leave it alone
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		ship := n
		ship.Seq = s.shipSeqLocked(n.Seq)
		out = append(out, ReadyBlock{Name: n, Ship: ship, Path: filepath.Join(s.dir, "ready", e.Name()), Size: fi.Size(), SHA256: s.sums[e.Name()],
			KernelDropped: s.st.Dropped[e.Name()], Final: s.st.Final != 0 && n.Seq == s.st.Final})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name.Seq < out[j].Name.Seq })
	return out, nil
}

// Remove deletes a block the server acknowledged.
func (s *Spool) Remove(b ReadyBlock) error {
	if err := os.Remove(b.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := s.syncDir(filepath.Dir(b.Path)); err != nil {
		return err
	}
	s.mu.Lock()
	s.bytes -= b.Size
	delete(s.sums, b.Name.String())
	if _, ok := s.st.Dropped[b.Name.String()]; ok {
		delete(s.st.Dropped, b.Name.String()) // saved with the next state write
		s.markDropped(b.Name.String(), false)
	}
	s.signalLocked()
	s.mu.Unlock()
	return nil
}

// Bytes is the size of the finished blocks waiting in the spool.
func (s *Spool) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Changed returns a channel closed at the next Finish or Remove.
func (s *Spool) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

func (s *Spool) signalLocked() {
	close(s.ready)
	s.ready = make(chan struct{})
}

// LostBytes returns the bytes lost to crashes from sources that cannot be
// read again.
func (s *Spool) LostBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.LostBytes
}

func (s *Spool) fsync(f *os.File) error {
	if s.noSync {
		return nil
	}
	return f.Sync()
}

func (s *Spool) syncDir(dir string) error {
	if s.noSync {
		return nil
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

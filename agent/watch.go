package agent

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/codecs"
)

// Sources yields the sources to cut, in order. Next returns io.EOF when
// there are no more, and ErrIdle when none is ready now (the cutter then
// finishes its open block so quiet periods do not hold packets back).
type Sources interface {
	Next(ctx context.Context) (Source, error)
}

// ErrIdle is returned by Sources.Next when no source is ready yet.
var ErrIdle = errors.New("no source ready")

// List yields a fixed list of sources.
func List(srcs ...Source) Sources { return &list{srcs: srcs} }

type list struct{ srcs []Source }

func (l *list) Next(context.Context) (Source, error) {
	if len(l.srcs) == 0 {
		return Source{}, io.EOF
	}
	s := l.srcs[0]
	l.srcs = l.srcs[1:]
	return s, nil
}

// Watch yields the capture files of a directory as they are closed, as
// from `tcpdump -G` rotation: a file is taken once a newer file exists or
// it has not grown for Settle. Files already cut into finished blocks (the
// spool remembers them across restarts) are not taken again, unless they
// changed: a file that grew is read on from where it was left, and one
// replaced under the same name (`tcpdump -C 100 -W 10` reuses its names
// in a ring) is read from its start. Files gone from the directory are
// forgotten. It never ends; stop it with the context.
type Watch struct {
	Dir     string
	Pattern string        // shell pattern of file names; all files when empty
	Settle  time.Duration // a file unchanged this long is closed
	Poll    time.Duration // how often to look; 1 s when zero
	Spool   *Spool
	Log     *slog.Logger // says when a known file is read again; none when nil

	taken map[string]bool
	seen  map[string]fileState // size and when it last changed
}

// A Watcher yields sources as they appear and never ends (Watch, a
// directory; Listed, the objects under a bucket's prefix); it remembers
// in the agent's spool which it cut whole.
type Watcher interface {
	Sources
	use(spool *Spool, log *slog.Logger)
}

func (w *Watch) use(spool *Spool, log *slog.Logger) {
	w.Spool = spool
	if w.Log == nil {
		w.Log = log
	}
}

// Listed yields the sources a listing names (the objects under an S3
// prefix, in key order) as they appear: each once, those the spool holds
// as cut whole skipped, so a restart goes on where the last run
// stopped. An object is whole once listed (S3 shows an upload only when
// it is complete), so none waits to settle. A listing that fails is
// logged and tried again. It never ends; stop it with the context.
type Listed struct {
	List   func(ctx context.Context) ([]Source, error)
	Poll   time.Duration // how often to list; 10 s when zero
	Settle time.Duration // with nothing new this long, ErrIdle (the open block ships)
	Spool  *Spool
	Log    *slog.Logger

	taken map[string]bool
}

func (l *Listed) use(spool *Spool, log *slog.Logger) {
	l.Spool = spool
	if l.Log == nil {
		l.Log = log
	}
}

// Next implements Sources.
func (l *Listed) Next(ctx context.Context) (Source, error) {
	if l.taken == nil {
		l.taken = map[string]bool{}
	}
	if l.Poll <= 0 {
		l.Poll = 10 * time.Second
	}
	idleSince := time.Now()
	for {
		srcs, err := l.List(ctx)
		if err != nil && ctx.Err() == nil && l.Log != nil {
			l.Log.Warn("listing the watched objects failed; trying again", "err", err, "in", l.Poll)
		}
		for _, s := range srcs {
			if l.taken[s.Name] || l.Spool.Source(s.Name).Done {
				continue
			}
			l.taken[s.Name] = true
			return s, nil
		}
		if time.Since(idleSince) >= l.Settle {
			return Source{}, ErrIdle
		}
		select {
		case <-ctx.Done():
			return Source{}, ctx.Err()
		case <-time.After(min(l.Poll, max(l.Settle-time.Since(idleSince), 10*time.Millisecond))):
		}
	}
}

type fileState struct {
	size    int64
	changed time.Time
}

// Next implements Sources.
func (w *Watch) Next(ctx context.Context) (Source, error) {
	if w.taken == nil {
		w.taken, w.seen = map[string]bool{}, map[string]fileState{}
	}
	if w.Poll <= 0 {
		w.Poll = time.Second
	}
	idleSince := time.Now()
	for {
		src, ok, err := w.ready()
		if err != nil {
			return Source{}, err
		}
		if ok {
			return src, nil
		}
		if time.Since(idleSince) >= w.Settle {
			return Source{}, ErrIdle
		}
		select {
		case <-ctx.Done():
			return Source{}, ctx.Err()
		case <-time.After(w.Poll):
		}
	}
}

type candidate struct {
	path string
	mod  time.Time
	size int64
}

// ready returns the oldest file not yet taken if it is closed.
func (w *Watch) ready() (Source, bool, error) {
	ents, err := os.ReadDir(w.Dir)
	if err != nil {
		return Source{}, false, err
	}
	var files []candidate
	for _, e := range ents {
		if e.IsDir() || e.Name()[0] == '.' {
			continue
		}
		if w.Pattern != "" {
			if ok, _ := filepath.Match(w.Pattern, e.Name()); !ok {
				continue
			}
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return Source{}, false, err
		}
		abs, err := filepath.Abs(filepath.Join(w.Dir, e.Name()))
		if err != nil {
			return Source{}, false, err
		}
		files = append(files, candidate{abs, fi.ModTime(), fi.Size()})
	}
	sort.Slice(files, func(i, j int) bool {
		if !files[i].mod.Equal(files[j].mod) {
			return files[i].mod.Before(files[j].mod)
		}
		return files[i].path < files[j].path
	})
	listed := make(map[string]bool, len(files))
	for _, f := range files {
		listed[f.path] = true
	}
	w.forgetGone(listed)
	now := time.Now()
	for i, f := range files {
		if !w.sameAsPlain(f, listed) {
			continue
		}
		pos := w.Spool.Source(f.path)
		if w.taken[f.path] {
			if !pos.Done {
				continue // the cutter has it
			}
			delete(w.taken, f.path)
		}
		switch w.compare(f, pos) {
		case unchanged:
			if pos.Done {
				continue
			}
		case grew:
			w.Spool.Reopen(f.path, true)
			w.log("capture file grew after it was shipped; shipping the rest", f.path, pos)
		case replaced:
			w.Spool.Reopen(f.path, false)
			w.log("capture file replaced under the same name (a rotation ring?); shipping the new one from its start", f.path, pos)
		}
		st, ok := w.seen[f.path]
		if !ok || st.size != f.size {
			st = fileState{size: f.size, changed: now}
			w.seen[f.path] = st
		}
		newer := i+1 < len(files)
		if !newer && now.Sub(st.changed) < w.Settle {
			return Source{}, false, nil // the newest file may still be written
		}
		w.taken[f.path] = true
		delete(w.seen, f.path)
		path := f.path
		stamp := Stamp{Size: f.size, ModTime: f.mod, Head: HeadOf(path)}
		return Source{Name: path, Rereadable: true, Size: f.size, Stamp: stamp, Open: func() (io.ReadCloser, error) { return os.Open(path) }}, true, nil
	}
	return Source{}, false, nil
}

func (w *Watch) log(msg, path string, was SourcePos) {
	if w.Log != nil {
		w.Log.Info(msg, "source", path, "packets_before", was.Packets)
	}
}

// sameAsPlain handles a compressed file whose plain form (its name
// without the codec's extension) the watch has met, as `tcpdump -G 300
// -z gzip` leaves them: while the plain file is still there (being
// compressed) or being cut, the compressed one waits; once the plain one
// is gone, a compressed file holding the same capture takes over its
// place in the spool: skipped if it was cut whole, read on from where it
// was left if a crash cut it short. It reports whether f may be
// considered now.
func (w *Watch) sameAsPlain(f candidate, listed map[string]bool) bool {
	c := codecs.FromExt(f.path)
	if c == codecs.None {
		return true
	}
	plain := strings.TrimSuffix(f.path, c.Ext())
	if listed[plain] {
		return false // still being compressed, or both kept: the plain one is taken
	}
	pos := w.Spool.Source(plain)
	if w.taken[plain] && !pos.Done {
		return false // the cutter is reading the plain one
	}
	if pos.Head == "" || HeadOf(f.path, pos.Head) != pos.Head {
		return true // another capture, or one the watch never read
	}
	delete(w.taken, plain)
	w.Spool.Carry(plain, f.path, Stamp{Size: f.size, ModTime: f.mod, Head: pos.Head})
	return true // Done: skipped below as unchanged; otherwise resumed
}

// forgetGone drops what the spool and the watch remember of files no
// longer in the directory (a file whose compressed form is there is still
// remembered: sameAsPlain needs it).
func (w *Watch) forgetGone(here map[string]bool) {
	dir, err := filepath.Abs(w.Dir)
	if err != nil {
		return
	}
	compressed := func(n string) bool {
		for _, c := range codecs.All() {
			if c != codecs.None && here[n+c.Ext()] {
				return true
			}
		}
		return false
	}
	var gone []string
	for _, n := range w.Spool.SourceNames() {
		if filepath.Dir(n) == dir && !here[n] && !compressed(n) {
			gone = append(gone, n)
		}
	}
	w.Spool.Forget(gone...)
	for p := range w.taken {
		if !here[p] && !compressed(p) {
			delete(w.taken, p)
		}
	}
	for p := range w.seen {
		if !here[p] {
			delete(w.seen, p)
		}
	}
}

type change int

const (
	unchanged change = iota // or never seen
	grew
	replaced
)

// compare tells how a file differs from what the spool remembers of it.
// Size and time decide without reading when nothing changed; otherwise
// the file's first bytes tell a file that grew from a new one.
func (w *Watch) compare(f candidate, pos SourcePos) change {
	if pos.Head == "" {
		return unchanged // never read, or remembered by an older agent
	}
	if pos.Done && f.size == pos.Size && f.mod.Equal(pos.ModTime) {
		return unchanged
	}
	if f.size < pos.Size || HeadOf(f.path, pos.Head) != pos.Head {
		return replaced
	}
	if pos.Done {
		return grew
	}
	return unchanged // cut in part before a restart, and the same file
}

// headLength is how many bytes a HeadOf result hashed (0 for none).
func headLength(head string) int {
	l, _, _ := strings.Cut(head, ":")
	if v, err := strconv.Atoi(l); err == nil && v >= 0 && v <= headLen {
		return v
	}
	return 0
}

// headLen is how much of a file's start HeadOf hashes.
const headLen = 4096

// HeadOf hashes the first bytes of a capture file (decompressed, if it
// is compressed), as "LENGTH:SHA256" (hex). With
// like, an earlier result, it hashes as many bytes as that did, so a file
// that only grew gives the same answer. An unreadable file gives "".
func HeadOf(path string, like ...string) string {
	n := headLen
	if len(like) > 0 {
		n = headLength(like[0])
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	// The capture's bytes, not the file's: a capture compressed after it
	// was shipped (tcpdump -z gzip) is known by the same head.
	var r io.Reader = bufio.NewReader(f)
	if peek, _ := r.(*bufio.Reader).Peek(codecs.SniffLen); codecs.Sniff(peek) != codecs.None {
		dec, err := codecs.Sniff(peek).NewReader(r)
		if err != nil {
			return ""
		}
		defer dec.Close()
		r = dec
	}
	buf := make([]byte, n)
	got, err := io.ReadFull(r, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return ""
	}
	if len(like) > 0 && got < n {
		return "" // shorter than it was: not the same file
	}
	sum := sha256.Sum256(buf[:got])
	return strconv.Itoa(got) + ":" + hex.EncodeToString(sum[:])
}

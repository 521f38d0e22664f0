package agent

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
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
// spool remembers them across restarts) are not taken again. It never
// ends; stop it with the context.
type Watch struct {
	Dir     string
	Pattern string        // shell pattern of file names; all files when empty
	Settle  time.Duration // a file unchanged this long is closed
	Poll    time.Duration // how often to look; 1 s when zero
	Spool   *Spool

	taken map[string]bool
	seen  map[string]fileState // size and when it last changed
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
	now := time.Now()
	for i, f := range files {
		if w.taken[f.path] || w.Spool.Source(f.path).Done {
			continue
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
		return Source{Name: path, Rereadable: true, Size: f.size, Open: func() (io.ReadCloser, error) { return os.Open(path) }}, true, nil
	}
	return Source{}, false, nil
}

package engine

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// scratchPrefixes start what runs make in a scratch directory.
var scratchPrefixes = []string{"run-", "stream-", "window-", "out-"}

// scratchSet is the scratch entries of runs alive now.
type scratchSet struct{ m sync.Map }

// make creates a run's scratch directory and claims it until done.
func (s *scratchSet) make(dir, prefix string) (string, error) {
	p, err := os.MkdirTemp(dir, prefix)
	if err == nil {
		s.m.Store(p, true)
	}
	return p, err
}

func (s *scratchSet) done(p string) {
	os.RemoveAll(p)
	s.m.Delete(p)
}

func (s *scratchSet) live(p string) bool { _, ok := s.m.Load(p); return ok }

// DeadScratch finds what runs left in dir that live does not claim (runs
// killed with their process leave their scratch behind), and with remove
// deletes it. It returns the entries and bytes found.
func DeadScratch(dir string, live func(path string) bool, remove bool) (entries int, bytes int64, err error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, ent := range ents {
		p := filepath.Join(dir, ent.Name())
		if !hasScratchPrefix(ent.Name()) || live != nil && live(p) {
			continue
		}
		entries++
		filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, err := d.Info(); err == nil {
					bytes += fi.Size()
				}
			}
			return nil
		})
		if remove {
			if rerr := os.RemoveAll(p); rerr != nil && err == nil {
				err = rerr
			}
		}
	}
	return entries, bytes, err
}

func hasScratchPrefix(name string) bool {
	for _, p := range scratchPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Scratch reports what dead runs left in the engine's scratch directory
// and, with remove, deletes it; runs alive now are left alone.
func (e *Engine) Scratch(remove bool) (entries int, bytes int64, err error) {
	return DeadScratch(e.cfg.Scratch, e.scratch.live, remove)
}

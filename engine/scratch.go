package engine

import (
	"os"
	"sync"

	"github.com/plumb-dev/plumb/stage/program"
)

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

// Scratch reports what dead runs left in the engine's scratch directory
// and, with remove, deletes it; runs alive now are left alone.
func (e *Engine) Scratch(remove bool) (entries int, bytes int64, err error) {
	return program.DeadScratch(e.cfg.Scratch, e.scratch.live, remove)
}

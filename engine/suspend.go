package engine

import (
	"maps"
	"strings"
)

// Suspend sets which accepted jobs are suspended, and why (their owners
// lost a right they need): the stages only they own start no runs
// (streams stop at their last checkpoint), and their consumer groups
// keep their place, so a job whose rights return resumes where it
// stopped. Runs in flight finish.
func (e *Engine) Suspend(suspended map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.suspended = maps.Clone(suspended)
	e.markSuspended()
	e.poke()
}

// markSuspended sets each stage's suspension from its owners': a stage
// shared with a job that still runs keeps running. Called with e.mu held.
func (e *Engine) markSuspended() {
	for _, st := range e.stages {
		var whys []string
		for _, o := range st.node.Owners {
			why, ok := e.suspended[o.Job]
			if !ok {
				whys = nil
				break
			}
			whys = append(whys, "job "+o.Job+": "+why)
		}
		was := st.suspended
		st.suspended = strings.Join(whys, "; ")
		if st.suspended != "" {
			st.stopStreams()
			if was == "" {
				e.log.Warn("stage suspended", "stage", st.node.Name, "why", st.suspended)
			}
		}
	}
}

package engine

import (
	"fmt"
	"maps"
	"strings"

	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

// RightsCheck answers, for an accepted job, whether its owner may still
// run it: an error says what right is missing (the owner was removed, or
// may no longer read an input or write an output), and trusted says
// whether the owner may still name unregistered executables.
type RightsCheck func(owner string, job *pipeline.Job) (trusted bool, err error)

// Recheck asks check about every accepted job. A job whose owner lost a
// right it needs is suspended, with the reason shown in the job list; its
// stages start no runs (streams stop at their last checkpoint) while
// every job owning them is suspended, and their consumer groups keep
// their place, so a job whose rights return resumes where it stopped.
// Runs in flight finish. Call it whenever the users file changes.
func (e *Engine) Recheck(check RightsCheck) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	all, err := e.db.Jobs()
	if err != nil {
		return err
	}
	changed := false
	for _, sj := range all {
		if sj.State != state.JobAccepted {
			continue
		}
		job, err := pipeline.ParseJobBytes("job "+sj.Name, []byte(sj.Source))
		if err != nil {
			continue // load demoted it already
		}
		job.Owner, job.OwnerID = sj.Owner, sj.OwnerID
		why := ""
		trusted, err := check(sj.Owner, job)
		if err == nil && sj.Trusted && !trusted {
			if perr := e.checkPrograms("job "+sj.Name, job, false); perr != nil {
				err = fmt.Errorf("its owner %s is no longer an admin, and an admin's job may name unregistered executables: %w", sj.Owner, perr)
			}
		}
		if err != nil {
			why = err.Error()
		}
		if why == sj.Suspended {
			continue
		}
		sj.Suspended = why
		if _, err := e.db.PutJob(sj); err != nil {
			return err
		}
		if why != "" {
			e.suspended[sj.Name] = why
			e.log.Warn("job suspended: its owner lost a right it needs; it resumes when the right returns", "job", sj.Name, "owner", sj.Owner, "why", why)
		} else {
			delete(e.suspended, sj.Name)
			e.log.Info("job resumed: its owner's rights returned", "job", sj.Name, "owner", sj.Owner)
		}
		changed = true
	}
	if changed {
		e.markSuspended()
		e.poke()
	}
	return nil
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

// Suspended returns the accepted jobs that are suspended, with why.
func (e *Engine) Suspended() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.suspended)
}

// Package jobs is the control plane of pipelines: it admits the jobs
// users submit (parse, authorize, check their programs, merge them with
// the jobs accepted before), keeps them in the metadata, suspends those
// whose owners lost a right, and gives the engine the merged graph. The
// engine schedules that graph and never calls back up.
package jobs

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

// SubmitResult is what submitting a job answers, as the protocol defines it.
type SubmitResult = flight.SubmitResult

// Config tunes admission.
type Config struct {
	// MaxPerOwner caps the accepted jobs of one owner, so one user's
	// submissions cannot fill the metadata; 64 when 0.
	MaxPerOwner int
	// NoDedup runs every job's stages on their own, sharing nothing.
	NoDedup bool
	// Logger receives accepted, rejected, retracted and suspended jobs;
	// slog.Default when nil.
	Logger *slog.Logger
}

// Control admits, retracts and suspends jobs, and keeps the engine's
// graph that of the accepted ones. Its methods are safe to call at once:
// each change reads the jobs, merges, stores and applies under one lock,
// so two submissions cannot both merge against the jobs before the other.
type Control struct {
	db  *state.DB
	eng *engine.Engine
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	version   uint64            // the jobs' version the graph was built at
	suspended map[string]string // accepted jobs suspended, and why
}

// New returns the control plane of eng's jobs, having given eng the
// graph of the jobs accepted before. A stored job that no longer fits
// the server (a built-in removed, a program unregistered) is marked
// rejected with the reason rather than keeping the server from starting.
func New(db *state.DB, eng *engine.Engine, cfg Config) (*Control, error) {
	if cfg.MaxPerOwner <= 0 {
		cfg.MaxPerOwner = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Control{db: db, eng: eng, cfg: cfg, log: cfg.Logger.With("component", "jobs"), suspended: map[string]string{}}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// Submit parses, validates and merges a job. An accepted job takes
// effect at once (between block runs); a job of the same name replaces
// the earlier one only if the new version is accepted. A job refused for
// what it says comes back with State rejected and every problem in
// Reason, and err nil; err is for failures of the server.
func (c *Control) Submit(file string, src []byte, owner string) (SubmitResult, error) {
	return c.SubmitChecked(file, src, owner, true, nil)
}

// SubmitChecked is Submit with a check of the parsed job, such as whether
// its owner may read its inputs and write its outputs; an error from
// authorize rejects the job with that reason. A job that is not trusted
// (an admin's, or any on a server without users) may run only built-ins
// and registered programs.
func (c *Control) SubmitChecked(file string, src []byte, owner string, trusted bool, authorize func(*pipeline.Job) error) (SubmitResult, error) {
	job, err := pipeline.ParseJobBytes(file, src)
	if err != nil {
		if !errors.Is(err, pipeline.ErrInvalidJob) {
			return SubmitResult{}, err
		}
		// The rights and programs of the stages that could be read are
		// checked too: one answer names every problem, not the next round
		// after a fix.
		errs := []error{err}
		if job != nil {
			if owner != "" {
				job.Owner = owner
			}
			if authorize != nil {
				if aerr := authorize(job); aerr != nil {
					errs = append(errs, aerr)
				}
			}
			if perr := c.eng.CheckPrograms(file, job, trusted); perr != nil {
				errs = append(errs, perr)
			}
		}
		return c.reject(jobName(src), owner, joinProblems(errs))
	}
	if owner != "" {
		job.Owner = owner // the authenticated user wins over the file
	}
	// Every problem in one answer: rights, programs and the merge are all
	// checked before the verdict, so a fix is not followed by a second
	// round of errors.
	var refused []error
	if authorize != nil {
		if err := authorize(job); err != nil {
			refused = append(refused, err)
		}
	}
	if err := c.eng.CheckPrograms(file, job, trusted); err != nil {
		refused = append(refused, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	jobs, at, err := c.acceptedWithout(job.Name)
	if err != nil {
		return SubmitResult{}, err
	}
	if mine := countOwned(jobs, job.Owner); job.Owner != "" && mine >= c.cfg.MaxPerOwner {
		refused = append(refused, fmt.Errorf("user %s has %d accepted jobs, the most one user may have; retract one (plumb job retract NAME) or replace one by submitting under its name", job.Owner, mine))
	}
	// A job submitted again keeps its place in the merge (state.PutJob
	// keeps its order), so the stages it shares keep their names and
	// their metrics' labels; a new one merges last.
	g, warns, err := pipeline.Merge(slices.Insert(jobs, at, job), c.mergeOptions())
	if err != nil {
		refused = append(refused, err)
	}
	if len(refused) > 0 {
		return c.reject(job.Name, job.Owner, joinProblems(refused))
	}
	var mine []string
	for _, w := range warns {
		if w.Job == job.Name {
			mine = append(mine, w.What)
		}
	}
	for _, s := range job.Stages {
		if s.Retention != pipeline.UntilConsumed {
			continue
		}
		for _, q := range s.Outputs {
			if len(g.Readers(q)) == 0 {
				mine = append(mine, fmt.Sprintf("queue %s: no stage reads it and stage %s gives it no retention; %s. Say retention: forever to keep them, or a retention such as 7d",
					q, s.Name, c.eng.DerivedFate()))
			}
		}
	}

	if _, err := c.db.PutJob(state.Job{Name: job.Name, Owner: job.Owner, OwnerID: job.OwnerID, State: state.JobAccepted, Source: string(src), Warnings: mine, Trusted: trusted}); err != nil {
		return SubmitResult{}, err
	}
	delete(c.suspended, job.Name) // its owner's rights were just checked
	if err := c.apply(g); err != nil {
		return SubmitResult{}, err
	}
	res := SubmitResult{Job: job.Name, State: string(state.JobAccepted), Warnings: mine}
	for _, n := range g.Stages {
		for _, o := range n.Owners {
			if o.Job == job.Name {
				res.Stages = append(res.Stages, n.Name)
				break
			}
		}
	}
	c.log.Info("job accepted", "job", job.Name, "owner", job.Owner, "stages", res.Stages, "warnings", len(mine))
	return res, nil
}

// Retract withdraws a job. Its stages stop unless another job still owns
// them.
func (c *Control) Retract(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, err := c.db.GetJob(name)
	if err != nil {
		return err
	}
	if old.State != state.JobAccepted {
		return fmt.Errorf("job %q is %s, not accepted; nothing to retract", name, old.State)
	}
	jobs, _, err := c.acceptedWithout(name)
	if err != nil {
		return err
	}
	g, _, err := pipeline.Merge(jobs, c.mergeOptions())
	if err != nil {
		return fmt.Errorf("the jobs left after retracting %q no longer merge: %w", name, err)
	}
	old.State, old.Suspended = state.JobRetracted, ""
	if _, err := c.db.PutJob(old); err != nil {
		return err
	}
	c.log.Info("job retracted", "job", name)
	delete(c.suspended, name)
	return c.apply(g)
}

// Jobs lists the jobs submitted, accepted ones first in merge order.
func (c *Control) Jobs() ([]state.Job, error) { return c.db.Jobs() }

// Follow builds the graph again when the jobs changed through another
// server sharing the metadata. A server that shares it calls Follow now
// and then, and before it starts scheduling.
func (c *Control) Follow() error {
	v, err := c.db.JobsVersion()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v == c.version {
		return nil
	}
	return c.load()
}

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
func (c *Control) Recheck(check RightsCheck) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	all, err := c.db.Jobs()
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
			if perr := c.eng.CheckPrograms("job "+sj.Name, job, false); perr != nil {
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
		if _, err := c.db.PutJob(sj); err != nil {
			return err
		}
		if why != "" {
			c.suspended[sj.Name] = why
			c.log.Warn("job suspended: its owner lost a right it needs; it resumes when the right returns", "job", sj.Name, "owner", sj.Owner, "why", why)
		} else {
			delete(c.suspended, sj.Name)
			c.log.Info("job resumed: its owner's rights returned", "job", sj.Name, "owner", sj.Owner)
		}
		changed = true
	}
	if changed {
		c.eng.Suspend(c.suspended)
	}
	return nil
}

// Suspended returns the accepted jobs that are suspended, with why.
func (c *Control) Suspended() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.suspended)
}

// load builds the graph of the accepted jobs as the metadata has them
// and applies it. Called with c.mu held.
func (c *Control) load() error {
	version, err := c.db.JobsVersion()
	if err != nil {
		return err
	}
	all, err := c.db.Jobs()
	if err != nil {
		return err
	}
	jobs, _, err := accepted(all, "")
	if err != nil {
		return err
	}
	c.suspended = map[string]string{}
	trusted := map[string]bool{}
	for _, sj := range all {
		trusted[sj.Name] = sj.Trusted
		if sj.State == state.JobAccepted && sj.Suspended != "" {
			c.suspended[sj.Name] = sj.Suspended
		}
	}
	var keep []*pipeline.Job
	for _, j := range jobs {
		if err := c.eng.CheckPrograms("job "+j.Name, j, trusted[j.Name]); err != nil {
			c.demote(j.Name, err)
			continue
		}
		if _, _, err := pipeline.Merge(append(slices.Clone(keep), j), pipeline.Options{NoDedup: c.cfg.NoDedup}); err != nil {
			c.demote(j.Name, err)
			continue
		}
		keep = append(keep, j)
	}
	g, _, err := pipeline.Merge(keep, pipeline.Options{NoDedup: c.cfg.NoDedup})
	if err != nil {
		return err
	}
	if err := c.apply(g); err != nil {
		return err
	}
	c.version = version
	return nil
}

// apply gives the engine g with the jobs suspended now. Called with c.mu
// held, so the engine's graph changes in the order the jobs did.
func (c *Control) apply(g *pipeline.Graph) error {
	return c.eng.Apply(g, c.suspended)
}

// demote marks an accepted job that no longer fits rejected, with why.
// Called with c.mu held.
func (c *Control) demote(name string, why error) {
	c.log.Error("accepted job no longer fits the server; marked rejected", "job", name, "err", why)
	delete(c.suspended, name)
	if old, err := c.db.GetJob(name); err == nil {
		old.State, old.Reason = state.JobRejected, "on restart: "+why.Error()
		if _, err := c.db.PutJob(old); err != nil {
			c.log.Error("marking a job rejected", "job", name, "err", err)
		}
	}
}

// acceptedWithout parses the accepted jobs in merge order, leaving out
// one by name (being replaced or retracted), and says where it stood
// among them (the end when it is not an accepted job).
func (c *Control) acceptedWithout(except string) ([]*pipeline.Job, int, error) {
	all, err := c.db.Jobs()
	if err != nil {
		return nil, 0, err
	}
	return accepted(all, except)
}

func accepted(all []state.Job, except string) ([]*pipeline.Job, int, error) {
	var out []*pipeline.Job
	at := -1
	for _, sj := range all {
		if sj.State == state.JobAccepted && sj.Name == except {
			at = len(out)
		}
		if sj.State != state.JobAccepted || sj.Name == except {
			continue
		}
		j, err := pipeline.ParseJobBytes("job "+sj.Name, []byte(sj.Source))
		if err != nil {
			return nil, 0, fmt.Errorf("stored job %q no longer parses: %w", sj.Name, err)
		}
		j.Owner, j.OwnerID = sj.Owner, sj.OwnerID // the authenticated submitter, not what the file says
		out = append(out, j)
	}
	if at < 0 {
		at = len(out)
	}
	return out, at, nil
}

func (c *Control) mergeOptions() pipeline.Options {
	return pipeline.Options{NoDedup: c.cfg.NoDedup, Exists: func(q string) bool {
		_, err := c.db.Queue(q)
		return err == nil
	}}
}

func (c *Control) reject(name, owner string, why error) (SubmitResult, error) {
	// Nothing of a refused job is stored: the submitter has the reason,
	// and a refused file (perhaps hostile, perhaps huge) takes no room.
	// An accepted job of the same name keeps running.
	res := SubmitResult{Job: name, State: string(state.JobRejected), Reason: why.Error()}
	c.log.Info("job rejected", "job", truncate(name), "owner", owner, "reason", truncate(res.Reason))
	return res, nil
}

// joinProblems puts the problems of several checks into one list, one
// per line in file order where they have positions.
func joinProblems(errs []error) error {
	var ps pipeline.Problems
	var other []error
	for _, err := range errs {
		var p pipeline.Problems
		if errors.As(err, &p) {
			ps = append(ps, p...)
		} else {
			other = append(other, err)
		}
	}
	if len(other) == 0 {
		slices.SortStableFunc(ps, func(a, b pipeline.Problem) int { return a.Line - b.Line })
		return ps
	}
	if len(ps) > 0 {
		other = append([]error{ps}, other...)
	}
	return errors.Join(other...)
}

func countOwned(jobs []*pipeline.Job, owner string) int {
	n := 0
	for _, j := range jobs {
		if j.Owner == owner {
			n++
		}
	}
	return n
}

// jobName digs the job's name out of a file that does not parse, so the
// rejection can be listed under it.
func jobName(src []byte) string {
	for _, line := range strings.Split(string(src), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "job:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}

// truncate keeps what a log line echoes of a submitter's text short.
func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

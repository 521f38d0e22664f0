package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/stage/program"

	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
)

// SubmitResult is what submitting a job answers, as the protocol defines it.
type SubmitResult = flight.SubmitResult

// Submit parses, validates and merges a job. An accepted job takes
// effect at once (between block runs); a job of the same name replaces
// the earlier one only if the new version is accepted. A job refused for
// what it says comes back with State rejected and every problem in
// Reason, and err nil; err is for failures of the server.
func (e *Engine) Submit(file string, src []byte, owner string) (SubmitResult, error) {
	return e.SubmitChecked(file, src, owner, true, nil)
}

// SubmitChecked is Submit with a check of the parsed job, such as whether
// its owner may read its inputs and write its outputs; an error from
// authorize rejects the job with that reason. A job that is not trusted
// (an admin's, or any on a server without users) may run only built-ins
// and registered programs.
func (e *Engine) SubmitChecked(file string, src []byte, owner string, trusted bool, authorize func(*pipeline.Job) error) (SubmitResult, error) {
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
			if perr := e.checkPrograms(file, job, trusted); perr != nil {
				errs = append(errs, perr)
			}
		}
		return e.reject(jobName(src), owner, joinProblems(errs))
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
	if err := e.checkPrograms(file, job, trusted); err != nil {
		refused = append(refused, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	jobs, at, err := e.acceptedJobsWithout(job.Name)
	if err != nil {
		return SubmitResult{}, err
	}
	if mine := countOwned(jobs, job.Owner); job.Owner != "" && mine >= e.cfg.MaxJobsPerOwner {
		refused = append(refused, fmt.Errorf("user %s has %d accepted jobs, the most one user may have; retract one (plumb job retract NAME) or replace one by submitting under its name", job.Owner, mine))
	}
	// A job submitted again keeps its place in the merge (state.PutJob
	// keeps its order), so the stages it shares keep their names and
	// their metrics' labels; a new one merges last.
	g, warns, err := pipeline.Merge(slices.Insert(jobs, at, job), e.mergeOptions())
	if err != nil {
		refused = append(refused, err)
	}
	if len(refused) > 0 {
		return e.reject(job.Name, job.Owner, joinProblems(refused))
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
					q, s.Name, e.derivedFate()))
			}
		}
	}

	if _, err := e.db.PutJob(state.Job{Name: job.Name, Owner: job.Owner, OwnerID: job.OwnerID, State: state.JobAccepted, Source: string(src), Warnings: mine, Trusted: trusted}); err != nil {
		return SubmitResult{}, err
	}
	delete(e.suspended, job.Name) // its owner's rights were just checked
	if err := e.apply(g); err != nil {
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
	e.log.Info("job accepted", "job", job.Name, "owner", job.Owner, "stages", res.Stages, "warnings", len(mine))
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

func (e *Engine) reject(name, owner string, why error) (SubmitResult, error) {
	// Nothing of a refused job is stored: the submitter has the reason,
	// and a refused file (perhaps hostile, perhaps huge) takes no room.
	// An accepted job of the same name keeps running.
	res := SubmitResult{Job: name, State: string(state.JobRejected), Reason: why.Error()}
	e.log.Info("job rejected", "job", truncateName(name), "owner", owner, "reason", truncateName(res.Reason))
	return res, nil
}

// truncateName keeps what a log line echoes of a submitter's text short.
func truncateName(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// checkPrograms resolves every step now, so a job naming a built-in or an
// executable the server lacks is refused at once, with the stage's line.
func (e *Engine) checkPrograms(file string, job *pipeline.Job, trusted bool) error {
	var problems pipeline.Problems
	for _, s := range job.Stages {
		if len(s.Program.Steps) == 0 {
			continue // its program did not parse; that problem is told already
		}
		field := "program"
		steps, err := program.Resolve(e.reg, e.lookup, s.Program, trusted)
		if err == nil {
			err = e.checkExecutables(s, steps)
		}
		if err == nil {
			if err = checkOutputs(steps, s.Outputs); err != nil {
				field = "outputs"
			}
		}
		if err == nil && s.Abstraction == pipeline.Window {
			field = "window"
			if _, err = WindowSpec(s.Window); err == nil && len(s.Inputs) != 1 {
				field, err = "inputs", errors.New("a window stage reads one input queue")
			}
		}
		if err == nil && s.Abstraction == pipeline.Stream && (len(s.Inputs) != 1 || len(steps) != 1 || steps[0].Argv == nil) {
			err = errors.New("a stream stage runs one executable over one input queue")
		}
		if err != nil {
			at := s.At(field)
			problems = append(problems, pipeline.Problem{File: file, Line: at.Line, Column: at.Column, Field: fmt.Sprintf("stage %q.%s", s.Name, field), What: err.Error()})
		}
	}
	if len(problems) > 0 {
		return problems
	}
	return nil
}

// Retract withdraws a job. Its stages stop unless another job still owns
// them.
func (e *Engine) Retract(name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	old, err := e.db.GetJob(name)
	if err != nil {
		return err
	}
	if old.State != state.JobAccepted {
		return fmt.Errorf("job %q is %s, not accepted; nothing to retract", name, old.State)
	}
	jobs, err := e.acceptedJobs(name)
	if err != nil {
		return err
	}
	g, _, err := pipeline.Merge(jobs, e.mergeOptions())
	if err != nil {
		return fmt.Errorf("the jobs left after retracting %q no longer merge: %w", name, err)
	}
	old.State, old.Suspended = state.JobRetracted, ""
	if _, err := e.db.PutJob(old); err != nil {
		return err
	}
	e.log.Info("job retracted", "job", name)
	delete(e.suspended, name)
	return e.apply(g)
}

// Jobs lists the jobs submitted, accepted ones first in merge order.
func (e *Engine) Jobs() ([]state.Job, error) { return e.db.Jobs() }

// acceptedJobs parses the accepted jobs in merge order, leaving out one
// by name (being replaced or retracted).
func (e *Engine) acceptedJobs(except string) ([]*pipeline.Job, error) {
	jobs, _, err := e.acceptedJobsWithout(except)
	return jobs, err
}

// acceptedJobsWithout is acceptedJobs, and where except stood among them
// (the end when it is not an accepted job).
func (e *Engine) acceptedJobsWithout(except string) ([]*pipeline.Job, int, error) {
	all, err := e.db.Jobs()
	if err != nil {
		return nil, 0, err
	}
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

func (e *Engine) mergeOptions() pipeline.Options {
	return pipeline.Options{NoDedup: e.cfg.NoDedup, Exists: func(q string) bool {
		_, err := e.db.Queue(q)
		return err == nil
	}}
}

// load builds the graph of the accepted jobs at start. A job that no
// longer merges (a built-in removed, say) is marked rejected with the
// reason rather than keeping the server from starting.
func (e *Engine) load() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loadGraph()
}

// loadGraph builds the graph of the accepted jobs as the metadata has
// them, keeping the stages that stay. Called with e.mu held.
func (e *Engine) loadGraph() error {
	version, err := e.db.JobsVersion()
	if err != nil {
		return err
	}
	jobs, err := e.acceptedJobs("")
	if err != nil {
		return err
	}
	e.suspended = map[string]string{}
	var keep []*pipeline.Job
	for _, j := range jobs {
		if err := e.checkPrograms("job "+j.Name, j, e.trusted(j.Name)); err != nil {
			e.demote(j.Name, err)
			continue
		}
		if _, _, err := pipeline.Merge(append(slices.Clone(keep), j), pipeline.Options{NoDedup: e.cfg.NoDedup}); err != nil {
			e.demote(j.Name, err)
			continue
		}
		keep = append(keep, j)
		if sj, err := e.db.GetJob(j.Name); err == nil && sj.Suspended != "" {
			e.suspended[j.Name] = sj.Suspended
		}
	}
	g, _, err := pipeline.Merge(keep, pipeline.Options{NoDedup: e.cfg.NoDedup})
	if err != nil {
		return err
	}
	if err := e.apply(g); err != nil {
		return err
	}
	e.jobsVersion = version
	return nil
}

// Follow builds the graph again when the jobs changed through another
// server sharing the metadata (or through this one's watch of rights).
// A server calls it now and then; Run calls it each tick.
func (e *Engine) Follow() error {
	v, err := e.db.JobsVersion()
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if v == e.jobsVersion {
		return nil
	}
	if err := e.loadGraph(); err != nil {
		return err
	}
	e.poke()
	return nil
}

// resetInterrupted gives back the blocks of runs that died with the
// process that ran them: this one's before a restart, or the server that
// scheduled before this one took over.
func (e *Engine) resetInterrupted() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Runs of the previous process died with it. Its own runs count as
	// attempts: a SIGTERM released them, so it crashed, perhaps because
	// of the block it was running.
	const why = "the server stopped during this run (a crash, an out-of-memory kill or SIGKILL); if it happens again with this block, the block is the cause"
	crashed := func(reserver string) bool { return !strings.HasPrefix(reserver, leasePrefix) }
	for _, st := range e.stages {
		reset, faulty, err := e.db.ResetReservations(st.group, st.node.Inputs, crashed, why, e.cfg.MaxAttempts)
		if err != nil {
			return err
		}
		if reset > 0 {
			e.log.Info("reset reservations of runs interrupted by a restart", "stage", st.node.Name, "runs", reset)
		}
		if faulty > 0 {
			e.log.Error("blocks set aside as faulty: the server stopped during each of their attempts; list with `plumb faulty`",
				"stage", st.node.Name, "blocks", faulty)
		}
	}
	return nil
}

func (e *Engine) demote(name string, why error) {
	e.log.Error("accepted job no longer fits the server; marked rejected", "job", name, "err", why)
	if old, err := e.db.GetJob(name); err == nil {
		old.State, old.Reason = state.JobRejected, "on restart: "+why.Error()
		e.db.PutJob(old)
	}
}

// derivedFate says what becomes of the blocks of an output queue whose
// stage gives no retention.
func (e *Engine) derivedFate() string {
	if e.cfg.DerivedRetention < 0 {
		return "its blocks stay until a consumer group takes them, for ever if none does (the server runs with --derived-retention off)"
	}
	return fmt.Sprintf("its blocks stay until a consumer group takes them, at most %s (the server's --derived-retention)", pipeline.Duration(e.cfg.DerivedRetention))
}

// derivedPolicyBy marks the retention the engine gives a derived queue
// by default, so an operator's or a stage's own is never overwritten.
const derivedPolicyBy = "server default (--derived-retention)"

// QueueWarning says what an operator should know of a queue that no
// consumer group reads (readers false): a stage's output whose blocks
// pile up until --derived-retention lets them go, or for ever. "" for a
// source queue, or one that is read.
func (e *Engine) QueueWarning(queue string, readers bool) string {
	if readers {
		return ""
	}
	g := e.Graph()
	if g == nil {
		return ""
	}
	for _, n := range g.Stages {
		if !slices.Contains(n.Outputs, queue) {
			continue
		}
		if n.Retention != pipeline.UntilConsumed {
			return "" // its stage said how long to keep them
		}
		return fmt.Sprintf("nothing reads it and stage %s gives it no retention: %s", n.Name, e.derivedFate())
	}
	return ""
}

// apply makes g the graph in force: new stages subscribe to their inputs,
// stages that left the graph unsubscribe. Runs in flight finish under the
// graph they started with. Called with e.mu held.
func (e *Engine) apply(g *pipeline.Graph) error {
	if e.graphChanged != nil {
		close(e.graphChanged)
	}
	e.graphChanged = make(chan struct{})
	next := map[string]*graphStage{}
	policies, err := e.db.Policies()
	if err != nil {
		return err
	}
	for _, n := range g.Stages {
		// A derived queue keeps its blocks as its producing stage says;
		// the retention sweep acts on it.
		if l, err := n.Retention.Limits(); err == nil && n.Retention != pipeline.UntilConsumed {
			for _, q := range n.Outputs {
				if err := e.db.SetPolicy(q, state.Policy{Retention: string(n.Retention), MaxAge: l.MaxAge, MaxBytes: l.MaxBytes, By: "stage " + n.Name}); err != nil {
					return fmt.Errorf("stage %s: retention of %s: %w", n.Name, q, err)
				}
			}
		} else if n.Retention == pipeline.UntilConsumed && e.cfg.DerivedRetention > 0 {
			// Until consumed, but not for ever: what no one reads goes
			// after --derived-retention (a block still owed stays). An
			// operator's own retention stands.
			for _, q := range n.Outputs {
				if p, ok := policies[q]; ok && p.By != derivedPolicyBy {
					continue
				}
				p := state.Policy{Retention: "until consumed, at most " + pipeline.Duration(e.cfg.DerivedRetention).String(), MaxAge: e.cfg.DerivedRetention, By: derivedPolicyBy}
				if err := e.db.SetPolicy(q, p); err != nil {
					return fmt.Errorf("stage %s: default retention of %s: %w", n.Name, q, err)
				}
			}
		}
		id := n.ID()
		if old := e.stages[id]; old != nil {
			old.node = n // owners and program may have changed
			if steps, trusted, err := e.resolveNode(n); err == nil {
				old.steps, old.trusted = steps, trusted
				old.sequential = isSequential(n, steps)
				old.edged = isEdged(old.sequential, steps)
			}
			next[id] = old
			continue
		}
		steps, trusted, err := e.resolveNode(n)
		if err != nil {
			return fmt.Errorf("stage %s: %w", n.Name, err)
		}
		for _, q := range n.Inputs {
			if _, err := e.db.EnsureGroup(q, groupOf(n), state.From(n.From)); err != nil {
				return fmt.Errorf("stage %s: subscribe to %s: %w", n.Name, q, err)
			}
		}
		st := &graphStage{node: n, group: groupOf(n), steps: steps, trusted: trusted, metrics: e.metrics.graphStage(n.Name)}
		st.sequential = isSequential(n, steps)
		st.edged = isEdged(st.sequential, steps)
		switch n.Abstraction {
		case pipeline.Window:
			if st.win, err = e.newWindowState(n, st.group); err != nil {
				return err
			}
		case pipeline.Stream:
			if len(n.Inputs) != 1 {
				return fmt.Errorf("stage %s: a stream stage reads one input queue", n.Name)
			}
			st.stream = &streamState{queue: n.Inputs[0], running: map[string]bool{}}
		}
		next[id] = st
		e.metrics.info.WithLabelValues(n.Name, n.Program.String(), detail(steps)).Set(1)
	}
	for id, old := range e.stages {
		if next[id] != nil {
			continue
		}
		for _, q := range old.node.Inputs {
			if err := e.db.DeleteGroup(q, old.group); err != nil {
				return fmt.Errorf("stage %s left the graph: unsubscribe from %s: %w", old.node.Name, q, err)
			}
		}
		e.parts.drop(old.group, &e.scratch)
		e.dropRemoteParts(old.group)
		if old.sequential {
			if err := e.db.DeleteCarries(old.group); err != nil {
				return fmt.Errorf("stage %s left the graph: forget its carried state: %w", old.node.Name, err)
			}
		}
		old.stopStreams()
		e.metrics.info.DeleteLabelValues(old.node.Name, old.node.Program.String(), detail(old.steps))
		e.log.Info("stage left the graph", "stage", old.node.Name)
	}
	e.graph, e.stages = g, next
	e.markSuspended()
	e.poke()
	return nil
}

// isSequential reports whether a stage's program ends in a Sequential
// built-in over one input, run per site in sequence order: alone, or
// after steps that turn the block into what it reads (a chain such as
// [builtin:decode, builtin:dns] gets the same guarantee).
func isSequential(n *pipeline.Node, steps []program.Step) bool {
	if len(steps) == 0 || len(n.Inputs) != 1 {
		return false
	}
	if n.Abstraction != "" && n.Abstraction != pipeline.Block {
		return false
	}
	for _, st := range steps[:len(steps)-1] {
		if _, ok := st.Builtin.(stage.Sequential); ok {
			return false // only the last step can carry state
		}
	}
	_, ok := steps[len(steps)-1].Builtin.(stage.Sequential)
	return ok
}

// isEdged reports whether a sequential stage's runs split in two (see
// Edged).
func isEdged(sequential bool, steps []program.Step) bool {
	if !sequential || len(steps) != 1 {
		return false // a chain runs whole, in sequence
	}
	_, ok := steps[0].Builtin.(stage.Edged)
	return ok
}

// checkOutputs refuses built-ins asked for outputs they cannot write.
func checkOutputs(steps []program.Step, outputs []string) error {
	if len(outputs) <= 1 {
		return nil
	}
	for _, st := range steps {
		if st.Builtin == nil {
			continue
		}
		sp, ok := st.Builtin.(stage.Splitter)
		if !ok || len(steps) > 1 {
			return fmt.Errorf("%s writes one output; %d are listed", st.Name, len(outputs))
		}
		return sp.CheckOutputs(outputs)
	}
	return nil
}

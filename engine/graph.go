package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/plumb-dev/plumb/stage/program"

	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
)

// CheckPrograms resolves every step of a job's stages now, so a job
// naming a built-in or an executable the server lacks is refused at
// once, with the stage's line: a pipeline.Problems, or nil. trusted lets
// the job name unregistered executables.
func (e *Engine) CheckPrograms(file string, job *pipeline.Job, trusted bool) error {
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
		if err == nil {
			err = checkCarried(s, steps)
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

// DerivedFate says what becomes of the blocks of an output queue whose
// stage gives no retention, for a warning to the job that makes it.
func (e *Engine) DerivedFate() string {
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
		return fmt.Sprintf("nothing reads it and stage %s gives it no retention: %s", n.Name, e.DerivedFate())
	}
	return ""
}

// Apply makes g, the merged graph of the accepted jobs, the graph in
// force, with the jobs suspended (and why) left out of scheduling: new
// stages subscribe to their inputs, stages that left the graph
// unsubscribe. Runs in flight finish under the graph they started with.
func (e *Engine) Apply(g *pipeline.Graph, suspended map[string]string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.suspended = maps.Clone(suspended)
	return e.apply(g)
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
				if old.win != nil {
					old.win.carried = carriesWindows(n, steps)
				}
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
			st.win.carried = carriesWindows(n, steps)
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
		if old.sequential || (old.win != nil && old.win.carried) {
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
	if n.Abstraction != "" && n.Abstraction != pipeline.Block {
		return false
	}
	return endsSequential(n, steps)
}

// carriesWindows reports whether a window stage's program ends in a
// Sequential built-in: its state goes from window to window.
func carriesWindows(n *pipeline.Node, steps []program.Step) bool {
	return n.Abstraction == pipeline.Window && endsSequential(n, steps)
}

// endsSequential reports whether a program over one input ends in a
// Sequential built-in, the only step that may carry state.
func endsSequential(n *pipeline.Node, steps []program.Step) bool {
	if len(steps) == 0 || len(n.Inputs) != 1 {
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

// checkCarried refuses a program that would run a built-in needing its
// carry (stage.Remembering) where it gets none: anywhere but the last
// step of a stage over one input. It would write nothing at all.
func checkCarried(s *pipeline.Stage, steps []program.Step) error {
	for i, st := range steps {
		if _, ok := st.Builtin.(stage.Remembering); !ok {
			continue
		}
		if i < len(steps)-1 {
			return fmt.Errorf("%s remembers from block to block, which it does only as its stage's last step; give it a stage of its own after %s", st.Name, steps[i+1].Name)
		}
		if len(s.Inputs) != 1 {
			return fmt.Errorf("%s remembers from block to block, which it does only over one input queue; %d are listed", st.Name, len(s.Inputs))
		}
		for _, prev := range steps[:i] {
			if _, ok := prev.Builtin.(stage.Sequential); ok {
				return fmt.Errorf("%s and %s both carry state from block to block, which only a stage's last step does; give %s a stage of its own reading %s's output", prev.Name, st.Name, st.Name, prev.Name)
			}
		}
	}
	return nil
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

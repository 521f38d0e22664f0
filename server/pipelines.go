package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/every"
	"github.com/plumb-dev/plumb/jobs"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

func (s *Service) engine() (*engine.Engine, error) {
	if s.eng == nil {
		return nil, status.Error(codes.Unimplemented, "this server runs no pipelines")
	}
	return s.eng, nil
}

// control is the control plane of the jobs, or why there is none.
func (s *Service) control() (*jobs.Control, error) {
	if s.jobs == nil {
		return nil, status.Error(codes.Unimplemented, "this server runs no pipelines")
	}
	return s.jobs, nil
}

func (s *Service) submitJob(ctx context.Context, body []byte) (any, error) {
	ctl, err := s.control()
	if err != nil {
		return nil, err
	}
	req, err := decode[flight.SubmitJobRequest](flight.ActSubmitJob, body, nil)
	if err != nil {
		return nil, err
	}
	if req.File == "" {
		req.File = "job.yaml"
	}
	if s.authz == nil {
		return ctl.Submit(req.File, []byte(req.YAML), "")
	}
	owner := caller(ctx)
	// An admin may name any executable on the server, as registering it
	// would; others only registered programs.
	trusted := s.may(ctx, auth.Admin, "")
	id, _ := AuthFromContext(ctx)
	return ctl.SubmitChecked(req.File, []byte(req.YAML), owner, trusted, func(job *pipeline.Job) error {
		job.OwnerID = id.ID
		var ps pipeline.Problems
		if old, err := s.db.GetJob(job.Name); err == nil && !ownedBy(old.Owner, old.OwnerID, id) && old.State == state.JobAccepted && !s.may(ctx, auth.Admin, "") {
			// Not who: another user's jobs are not the caller's to learn.
			ps = append(ps, pipeline.Problem{File: req.File, Line: 1, Column: 1, Field: "job",
				What: fmt.Sprintf("job %s belongs to another user; choose another name", job.Name)})
		}
		ps = append(ps, s.queueRights(req.File, id, job)...)
		if len(ps) > 0 {
			s.audit.Warn("denied", "audit", true, "user", owner, "action", flight.ActSubmitJob.Name, "job", job.Name, "why", ps.Error())
			return ps
		}
		return nil
	})
}

// ownedBy reports whether what the user name owner and the stable id
// ownerID own belongs to id: the same name, and the same user behind it
// (a name removed and added again is someone else). Records and users
// files from before ids compare names.
func ownedBy(owner, ownerID string, id auth.Identity) bool {
	return owner == id.User && (ownerID == "" || id.ID == "" || ownerID == id.ID)
}

// queueRights lists the inputs id may not read, the outputs it may not
// write and the anonymization keys it may not use, as problems at the
// fields that name them.
func (s *Service) queueRights(file string, id auth.Identity, job *pipeline.Job) pipeline.Problems {
	var ps pipeline.Problems
	for _, st := range job.Stages {
		for _, q := range st.Inputs {
			if !s.authz.Allowed(id, auth.Read, q) {
				at := st.At("inputs")
				ps = append(ps, pipeline.Problem{File: file, Line: at.Line, Column: at.Column, Field: fmt.Sprintf("stage %q.inputs", st.Name),
					What: fmt.Sprintf("user %s may not read queue %s; an admin grants it with a rule in the users file", id.User, q)})
			}
		}
		for _, q := range st.Outputs {
			if !s.authz.Allowed(id, auth.Write, q) {
				at := st.At("outputs")
				ps = append(ps, pipeline.Problem{File: file, Line: at.Line, Column: at.Column, Field: fmt.Sprintf("stage %q.outputs", st.Name),
					What: fmt.Sprintf("user %s may not write queue %s; an admin grants it with a rule in the users file", id.User, q)})
			}
		}
		for _, step := range st.Program.Steps {
			// Only builtin:anonymize takes a key; any other built-in
			// refuses key= as an unknown argument.
			if key := step.Args.Get("key"); step.Builtin == "anonymize" && key != "" && !s.authz.MayUseKey(id, key) {
				at := st.At("program")
				ps = append(ps, pipeline.Problem{File: file, Line: at.Line, Column: at.Column, Field: fmt.Sprintf("stage %q.program", st.Name),
					What: fmt.Sprintf("user %s may not use anonymization key %s; an admin grants it under anon_keys in the users file", id.User, key)})
			}
		}
	}
	return ps
}

// jobRights is the engine's recheck of an accepted job against the users
// file as it is now.
func (s *Service) jobRights(owner string, job *pipeline.Job) (trusted bool, err error) {
	if owner == "" {
		return true, nil // submitted before users were configured
	}
	id, err := s.authz.Identify(owner, "job")
	if err != nil {
		return false, fmt.Errorf("its owner %s is no longer in the users file", owner)
	}
	if !ownedBy(owner, job.OwnerID, id) {
		return false, fmt.Errorf("its owner %s was removed from the users file; the user of that name now is someone else (resubmit the job as them, or an admin retracts it)", owner)
	}
	if ps := s.queueRights("job "+job.Name, id, job); len(ps) > 0 {
		return false, ps
	}
	return s.authz.Allowed(id, auth.Admin, ""), nil
}

// watchRights rechecks the accepted jobs whenever the users file changes
// (a SIGHUP reload, or a change noticed on disk), so that a removed owner's
// jobs stop and resume when the rights return.
func (s *Service) watchRights(ctx context.Context, period time.Duration) {
	var seen uint64
	every.RunNow(ctx, period, func() {
		if v := s.authz.Refresh(); v != seen {
			if err := s.jobs.Recheck(s.jobRights); err != nil {
				s.log.Error("rechecking the jobs' rights after the users file changed", "err", err)
			} else {
				seen = v
			}
		}
	})
}

func (s *Service) retractJob(ctx context.Context, body []byte) (any, error) {
	ctl, err := s.control()
	if err != nil {
		return nil, err
	}
	req, err := decode[struct {
		Job string `json:"job"`
	}](flight.ActRetractJob, body, nil)
	if err != nil {
		return nil, err
	}
	if s.authz != nil {
		id, _ := AuthFromContext(ctx)
		if old, err := s.db.GetJob(req.Job); err == nil && !ownedBy(old.Owner, old.OwnerID, id) {
			// The refusal does not name the owner: who owns another's job
			// is not the caller's to learn.
			if err := s.allow(ctx, auth.Admin, "", "retract job "+req.Job+" (another user's)"); err != nil {
				return nil, err
			}
		}
	}
	if err := ctl.Retract(req.Job); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "%v; list jobs with `plumb job list`", err)
		}
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return map[string]string{"retracted": req.Job}, nil
}

func (s *Service) listJobs(ctx context.Context, _ []byte) (any, error) {
	ctl, err := s.control()
	if err != nil {
		return nil, err
	}
	list, err := ctl.Jobs()
	if s.authz != nil && !s.may(ctx, auth.Admin, "") {
		list = slices.DeleteFunc(list, func(j state.Job) bool { return j.Owner != caller(ctx) })
	}
	return listOf(list), err
}

// readable reports whether the caller may read every input of a stage,
// which is what it takes to see the stage.
func (s *Service) readable(ctx context.Context, inputs []string) bool {
	for _, q := range inputs {
		if !s.may(ctx, auth.Read, q) {
			return false
		}
	}
	return true
}

// visibleGraph is the part of the merged graph the caller may see.
func (s *Service) visibleGraph(ctx context.Context, g *pipeline.Graph) *pipeline.Graph {
	if s.authz == nil || g == nil {
		return g
	}
	out := &pipeline.Graph{}
	for _, n := range g.Stages {
		if s.readable(ctx, n.Inputs) {
			out.Stages = append(out.Stages, n)
		}
	}
	return out
}

func (s *Service) graph(ctx context.Context, body []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	req, err := decodeOptional[flight.GraphRequest](flight.ActGraph, body)
	if err != nil {
		return nil, err
	}
	g := s.visibleGraph(ctx, eng.Graph())
	switch req.Format {
	case "", "yaml":
		return flight.GraphResult{YAML: string(g.YAML())}, nil
	case "dot":
		notes := map[string]pipeline.Annotation{}
		for _, st := range eng.Stats() {
			notes[st.ID] = pipeline.Annotation{Backlog: st.Backlog, Workers: st.Workers, Faulty: st.Faulty}
		}
		return flight.GraphResult{DOT: string(g.DOT(notes))}, nil
	}
	return nil, badBody(flight.ActGraph.Name, body, fmt.Errorf("format %q: want yaml or dot", req.Format))
}

func (s *Service) stageStats(ctx context.Context, _ []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	stats := slices.DeleteFunc(eng.Stats(), func(st engine.StageStats) bool { return !s.readable(ctx, st.Inputs) })
	return listOf(stats), nil
}

func (s *Service) faulty(ctx context.Context, body []byte) (any, error) {
	req, err := decodeOptional[flight.QueueRequest](flight.ActFaulty, body)
	if err != nil {
		return nil, err
	}
	if err := s.knownQueue(req.Queue); err != nil {
		return nil, err
	}
	fb, err := s.db.Faulty(req.Queue)
	fb = slices.DeleteFunc(fb, func(b state.FaultyBlock) bool { return !s.may(ctx, auth.Read, b.Queue) })
	if s.eng != nil {
		for i := range fb {
			fb[i].Stage, _ = s.eng.StageOf(fb[i].Group)
		}
	}
	return listOf(fb), err
}

func (s *Service) retry(ctx context.Context, body []byte) (any, error) {
	req, err := decodeOptional[flight.RetryRequest](flight.ActRetry, body)
	if err != nil {
		return nil, err
	}
	if req.Block != "" {
		n, err := block.Parse(req.Block)
		if err != nil {
			return nil, badBody(flight.ActRetry.Name, body, err)
		}
		req.Queue = n.Queue
	}
	if err := s.allow(ctx, auth.Admin, req.Queue, flight.ActRetry.Name); err != nil {
		return nil, err
	}
	if err := s.knownQueue(req.Queue); err != nil {
		return nil, err
	}
	n, err := s.db.Retry(req.Queue, req.Block)
	return map[string]int{"requeued": n}, err
}

// stageInputs maps each stage's name and ID to its inputs.
func (s *Service) stageInputs() map[string][]string {
	in := map[string][]string{}
	if g := s.eng.Graph(); g != nil {
		for _, n := range g.Stages {
			in[n.Name], in[n.ID()] = n.Inputs, n.Inputs
		}
	}
	return in
}

func (s *Service) windows(ctx context.Context, body []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	req, err := decodeOptional[flight.WindowsRequest](flight.ActWindows, body)
	if err != nil {
		return nil, err
	}
	f, err := windowFilter(req)
	if err != nil {
		return nil, badBody(flight.ActWindows.Name, body, err)
	}
	in := s.stageInputs()
	ws, err := eng.WindowsMatching(f, func(stage string) bool { return s.readable(ctx, in[stage]) })
	if errors.Is(err, engine.ErrNotScheduling) {
		return nil, s.notScheduling(flight.ActWindows.Name, "ask that server")
	}
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	return listOf(ws), nil
}

// windowFilter reads a windows request's narrowing fields.
func windowFilter(req flight.WindowsRequest) (engine.WindowFilter, error) {
	f := engine.WindowFilter{Stage: req.Stage, Site: req.Site, State: req.State, Limit: req.Limit}
	if req.State != "" && req.State != "waiting" && req.State != "fired" && req.State != "faulty" {
		return f, fmt.Errorf("state %q: want waiting, fired or faulty", req.State)
	}
	if req.Limit < 0 {
		return f, fmt.Errorf("limit %d: want 0 (all) or more", req.Limit)
	}
	for _, t := range []struct {
		v   string
		out *time.Time
	}{{req.From, &f.From}, {req.To, &f.To}} {
		if t.v == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			return f, fmt.Errorf("%q: want an RFC 3339 time such as 2025-05-05T00:00:00Z", t.v)
		}
		*t.out = v
	}
	return f, nil
}

func (s *Service) fireWindow(ctx context.Context, body []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	req, err := decode[struct {
		Stage  string `json:"stage"`
		Window string `json:"window"`
	}](flight.ActFireWindow, body, nil)
	if err != nil {
		return nil, err
	}
	in, ok := s.stageInputs()[req.Stage]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no window stage %q; `plumb windows` lists them", req.Stage)
	}
	if s.authz != nil {
		for _, q := range in {
			if err := s.allow(ctx, auth.Admin, q, "fire window "+req.Window+" of "+req.Stage); err != nil {
				return nil, err
			}
		}
	}
	if err := eng.FireWindow(req.Stage, req.Window); errors.Is(err, engine.ErrNotScheduling) {
		return nil, s.notScheduling(flight.ActFireWindow.Name, "ask that server")
	} else if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return map[string]string{"fired": req.Window}, nil
}

func (s *Service) status(ctx context.Context, _ []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	rows, err := eng.Status(ctx)
	// A stage is shown to whoever may read all its inputs, as in stats:
	// its row names one of them, and reading that one is not enough.
	inputs := map[string][]string{}
	for _, st := range eng.Stats() {
		inputs[st.Stage] = st.Inputs
	}
	rows = slices.DeleteFunc(rows, func(r engine.StatusRow) bool {
		if r.Stage != "" && inputs[r.Stage] != nil && !s.readable(ctx, inputs[r.Stage]) {
			return true
		}
		return !s.may(ctx, auth.Read, r.Queue)
	})
	return listOf(rows), err
}

func listOf[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

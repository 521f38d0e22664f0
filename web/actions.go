package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

// The dashboard's admin actions: retry faulty blocks, fire a waiting
// window, retract a job. They are what `plumb retry`, `plumb window fire`
// and `plumb job retract` do, with the same rights.
//
// A browser sends a page's Basic credentials with any request to the
// server, including one a hostile page makes it send: so actions are
// POSTs with a JSON body (a form on another site cannot send one without
// a preflight the server never grants), and net/http's cross-origin
// protection refuses a request the browser marks as cross-site.

// maxActionBody bounds an action's JSON body.
const maxActionBody = 4 << 10

// Me is who the dashboard is shown to, so the page shows the actions
// the user may take.
type Me struct {
	User  string `json:"user,omitempty"`
	Admin bool   `json:"admin"`
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	me := Me{User: userOf(r), Admin: s.may(r, auth.Admin, "")}
	reply(w, me, nil)
}

func (s *Server) faulty(w http.ResponseWriter, r *http.Request) {
	fb, err := s.db.Faulty(r.URL.Query().Get("queue"))
	fb = slices.DeleteFunc(fb, func(b state.FaultyBlock) bool { return !s.may(r, auth.Read, b.Queue) })
	if s.eng != nil {
		for i := range fb {
			fb[i].Stage, _ = s.eng.StageOf(fb[i].Group)
		}
	}
	if fb == nil {
		fb = []state.FaultyBlock{}
	}
	reply(w, fb, err)
}

func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	jobs, err := s.db.Jobs()
	if !s.may(r, auth.Admin, "") {
		user := userOf(r)
		jobs = slices.DeleteFunc(jobs, func(j state.Job) bool { return j.Owner != user })
	}
	for i := range jobs {
		jobs[i].Source = "" // the page lists jobs; their files stay with `plumb job list`
	}
	if jobs == nil {
		jobs = []state.Job{}
	}
	reply(w, jobs, err)
}

// actionError is an action refused, with the status it answers.
type actionError struct {
	code int
	msg  string
}

func (e *actionError) Error() string { return e.msg }

func refuse(code int, format string, args ...any) error {
	return &actionError{code, fmt.Sprintf(format, args...)}
}

// action wraps an admin action: a JSON body decoded strictly into a
// fresh T, and an answer in JSON.
func action[T any](s *Server, name string, run func(r *http.Request, req T) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			http.Error(w, name+": send the body as application/json", http.StatusUnsupportedMediaType)
			return
		}
		var req T
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxActionBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, fmt.Sprintf("%s: the body is not the request: %v", name, err), http.StatusBadRequest)
			return
		}
		res, err := run(r, req)
		var ae *actionError
		switch {
		case errors.As(err, &ae):
			http.Error(w, name+": "+ae.msg, ae.code)
		case err != nil:
			http.Error(w, name+": "+err.Error(), http.StatusInternalServerError)
		default:
			s.log.Info("dashboard action", "log", "audit", "audit", true, "action", name, "user", userOf(r), "request", fmt.Sprintf("%+v", req))
			reply(w, res, nil)
		}
	}
}

// userOf names the logged-in user ("" without a login).
func userOf(r *http.Request) string {
	if id, ok := r.Context().Value(identityKey{}).(auth.Identity); ok {
		return id.User
	}
	return ""
}

// RetryRequest names one faulty block, or a queue's.
type RetryRequest struct {
	Queue string `json:"queue"`
	Block string `json:"block,omitempty"`
}

func (s *Server) retry(r *http.Request, req RetryRequest) (any, error) {
	if req.Block != "" {
		n, err := block.Parse(req.Block)
		if err != nil {
			return nil, refuse(http.StatusBadRequest, "%v", err)
		}
		req.Queue = n.Queue
	}
	if req.Queue == "" {
		return nil, refuse(http.StatusBadRequest, "name a queue or a block")
	}
	if !s.may(r, auth.Admin, req.Queue) {
		return nil, refuse(http.StatusForbidden, "retrying blocks of %s needs admin on it", req.Queue)
	}
	n, err := s.db.Retry(req.Queue, req.Block)
	return map[string]int{"requeued": n}, err
}

// FireRequest names a waiting window of a window stage.
type FireRequest struct {
	Stage  string `json:"stage"`
	Window string `json:"window"`
}

func (s *Server) fireWindow(r *http.Request, req FireRequest) (any, error) {
	if s.eng == nil {
		return nil, refuse(http.StatusNotFound, "this server runs no pipelines")
	}
	var n *pipeline.Node
	if g := s.graphOrNil(); g != nil {
		n = g.Node(req.Stage)
	}
	if n == nil {
		return nil, refuse(http.StatusNotFound, "no stage %q", req.Stage)
	}
	for _, q := range n.Inputs {
		if !s.may(r, auth.Admin, q) {
			return nil, refuse(http.StatusForbidden, "firing a window of %s needs admin on its input %s", req.Stage, q)
		}
	}
	if err := s.eng.FireWindow(req.Stage, req.Window); err != nil {
		return nil, refuse(http.StatusConflict, "%v", err)
	}
	return map[string]string{"fired": req.Window}, nil
}

// RetractRequest names a job.
type RetractRequest struct {
	Job string `json:"job"`
}

func (s *Server) retract(r *http.Request, req RetractRequest) (any, error) {
	if s.ctl == nil {
		return nil, refuse(http.StatusNotFound, "this server runs no pipelines")
	}
	j, err := s.db.GetJob(req.Job)
	if errors.Is(err, state.ErrNotFound) {
		return nil, refuse(http.StatusNotFound, "no job %q", req.Job)
	}
	if err != nil {
		return nil, err
	}
	if j.Owner != userOf(r) && !s.may(r, auth.Admin, "") {
		return nil, refuse(http.StatusForbidden, "job %s belongs to %s; retracting it needs admin", req.Job, j.Owner)
	}
	if err := s.ctl.Retract(req.Job); err != nil {
		return nil, refuse(http.StatusConflict, "%v", err)
	}
	return map[string]string{"retracted": req.Job}, nil
}

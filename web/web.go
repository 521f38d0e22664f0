// Package web is the operator dashboard: a small embedded web UI and the
// JSON it reads (the merged graph with backlog and workers, queues,
// windows, latency), plus /metrics, /healthz and /readyz, all on one
// listener. The UI is plain HTML, CSS and JavaScript with no outside
// libraries, so it works offline.
package web

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/fdlimit"
	"github.com/plumb-dev/plumb/jobs"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

//go:embed ui
var ui embed.FS

// Server serves the dashboard.
type Server struct {
	eng    *engine.Engine
	ctl    *jobs.Control
	db     *state.DB
	gather prometheus.Gatherer
	log    *slog.Logger

	authz  *auth.Authority // nil: no login
	logins loginCache

	silentAfter time.Duration // see WithSilentAfter
	hosts       []string      // see WithHosts

	mu      sync.Mutex
	history []point // latency samples for the chart, oldest first
}

// point is the status of every stage at one moment.
type point struct {
	At   time.Time          `json:"at"`
	Rows []engine.StatusRow `json:"rows"`
	// Counts are the stages' cumulative counts, for the rates.
	Counts []stageCount `json:"-"`
}

// historyKeep bounds the latency chart: a sample a minute for a day.
const historyKeep = 24 * 60

// New returns a dashboard over a running engine and the control plane of
// its jobs (both nil when the server runs no pipelines) and its
// metadata. gather serves /metrics; nil serves the default registry.
func New(eng *engine.Engine, ctl *jobs.Control, db *state.DB, gather prometheus.Gatherer, log *slog.Logger) *Server {
	if gather == nil {
		gather = prometheus.DefaultGatherer
	}
	return &Server{eng: eng, ctl: ctl, db: db, gather: gather, log: log}
}

// Handler returns the dashboard's routes.
func (s *Server) Handler() http.Handler {
	mux, open := http.NewServeMux(), http.NewServeMux()
	static, _ := fs.Sub(ui, "ui")
	mux.Handle("GET /", http.FileServerFS(static))
	metrics := promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if !s.may(r, auth.Admin, "") {
			http.Error(w, "metrics name every stage and queue: they need admin on \"*\"", http.StatusForbidden)
			return
		}
		metrics.ServeHTTP(w, r)
	})
	open.Handle("/", s.requireLogin(mux))
	// Probes need no login.
	open.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	open.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.db.Queues(); err != nil {
			http.Error(w, "metadata: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /api/graph", s.graph)
	mux.HandleFunc("GET /api/queues", s.queues)
	mux.HandleFunc("GET /api/queue/{name}", s.queue)
	mux.HandleFunc("GET /api/windows", s.windows)
	mux.HandleFunc("GET /api/status", s.status)
	mux.HandleFunc("GET /api/latency", s.latency)
	mux.HandleFunc("GET /api/workers", s.workers)
	mux.HandleFunc("GET /api/rates", s.rates)
	mux.HandleFunc("GET /api/sites", s.sites)
	mux.HandleFunc("GET /api/faulty", s.faulty)
	mux.HandleFunc("GET /api/jobs", s.jobs)
	mux.HandleFunc("GET /api/me", s.me)
	// Actions change things: see actions.go for why these three hold
	// against cross-site requests.
	guard := http.NewCrossOriginProtection()
	mux.Handle("POST /api/retry", guard.Handler(action(s, flight.ActRetry.Name, s.retry)))
	mux.Handle("POST /api/fire-window", guard.Handler(action(s, flight.ActFireWindow.Name, s.fireWindow)))
	mux.Handle("POST /api/retract", guard.Handler(action(s, "retract", s.retract)))
	return s.checkHost(open)
}

// Serve serves on lis until ctx ends, sampling latency every interval (a
// minute when zero) for the chart. The samples are kept in the metadata,
// so the chart goes on across restarts.
func (s *Server) Serve(ctx context.Context, lis net.Listener, every time.Duration) error {
	if every <= 0 {
		every = time.Minute
	}
	s.load(time.Now().Add(-historyKeep * every))
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	lis = netutil.LimitListener(lis, fdlimit.Fit(fdlimit.HTTPConns, "the dashboard", "max_conns", s.log))
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.sample(ctx, every) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		return err
	}
}

func (s *Server) sample(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	if s.eng == nil {
		return
	}
	for {
		if rows, err := s.eng.Status(ctx); err == nil {
			if rows == nil {
				rows = []engine.StatusRow{} // no stages yet
			}
			p := point{At: time.Now().UTC(), Rows: rows, Counts: countsOf(s.eng.Stats())}
			s.mu.Lock()
			s.history = append(s.history, p)
			if len(s.history) > historyKeep {
				s.history = slices.Delete(s.history, 0, len(s.history)-historyKeep)
			}
			s.mu.Unlock()
			if raw, err := json.Marshal(p); err == nil {
				if err := s.db.PutSample(p.At, raw, p.At.Add(-historyKeep*every)); err != nil {
					s.log.Warn("dashboard sample not kept; the chart loses it at restart", "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// load takes the samples kept since from. Their rates start again: the
// stages' counts began anew with the process.
func (s *Server) load(from time.Time) {
	raws, err := s.db.Samples(from)
	if err != nil {
		s.log.Warn("dashboard history not read; the chart starts empty", "err", err)
		return
	}
	var h []point
	for _, raw := range raws {
		var p point
		if json.Unmarshal(raw, &p) == nil {
			h = append(h, p)
		}
	}
	s.mu.Lock()
	s.history = append(h, s.history...)
	s.mu.Unlock()
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// GraphStage is a stage as the graph page draws it.
type GraphStage struct {
	Name        string   `json:"name"`
	ID          string   `json:"id"`
	Inputs      []string `json:"inputs"`
	Outputs     []string `json:"outputs"`
	Program     string   `json:"program"`
	Abstraction string   `json:"abstraction"`
	Owners      []string `json:"owners"`
	Merged      bool     `json:"merged"`
	Backlog     int64    `json:"backlog"`
	Waiting     int64    `json:"waiting_for_window"`
	Workers     int      `json:"workers"`
	Faulty      int64    `json:"faulty"`
}

// Graph is the merged graph with live numbers.
type Graph struct {
	Stages []GraphStage `json:"stages"`
	Queues []string     `json:"queues"`
}

func (s *Server) graph(w http.ResponseWriter, r *http.Request) {
	if s.eng == nil {
		reply(w, Graph{Queues: []string{}, Stages: []GraphStage{}}, nil)
		return
	}
	g := s.eng.Graph()
	stats := map[string]engine.StageStats{}
	for _, st := range s.eng.Stats() {
		stats[st.ID] = st
	}
	out := Graph{Queues: []string{}, Stages: []GraphStage{}}
	visible := &pipeline.Graph{}
	if g != nil {
		for _, n := range g.Stages {
			if s.readsAll(r, n.Inputs) { // a user sees the stages over data it may read
				visible.Stages = append(visible.Stages, n)
			}
		}
	}
	g = visible
	out.Queues = append(out.Queues, g.Queues()...)
	for _, n := range g.Stages {
		st := stats[n.ID()]
		gs := GraphStage{Name: n.Name, ID: n.ID(), Inputs: n.Inputs, Outputs: n.Outputs, Program: n.Program.String(),
			Abstraction: n.Abstraction, Merged: n.Merged, Backlog: st.Backlog, Waiting: st.Waiting, Workers: st.Workers, Faulty: st.Faulty}
		for _, o := range n.Owners {
			owner := o.Job + "/" + o.Stage
			if o.User != "" {
				owner += " (" + o.User + ")"
			}
			gs.Owners = append(gs.Owners, owner)
		}
		if gs.Outputs == nil {
			gs.Outputs = []string{}
		}
		out.Stages = append(out.Stages, gs)
	}
	reply(w, out, nil)
}

func (s *Server) queues(w http.ResponseWriter, r *http.Request) {
	qs, err := s.db.Queues()
	qs = slices.DeleteFunc(qs, func(q state.Queue) bool { return !s.may(r, auth.Read, q.Name) })
	if qs == nil {
		qs = []state.Queue{}
	}
	reply(w, qs, err)
}

// QueuePage is one queue: its newest blocks, its readers and retention.
type QueuePage struct {
	Queue     state.Queue `json:"queue"`
	Retention string      `json:"retention"`
	Producer  string      `json:"producer,omitempty"`
	Readers   []string    `json:"readers"`
	// Names gives the stage behind each stage's subscription, whose group
	// name is the stage's identity.
	Names  map[string]string  `json:"names"`
	Groups []state.GroupStats `json:"groups"`
	Blocks []QueueBlock       `json:"blocks"` // the newest first, up to 200
}

// QueueBlock is a block with where it stands with each subscriber.
type QueueBlock struct {
	state.Block
	States map[string]state.Delivery `json:"states"` // by group
}

// queuePageBlocks bounds the queue page.
const queuePageBlocks = 200

func (s *Server) queue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !s.may(r, auth.Read, name) {
		http.Error(w, "you may not read queue "+name, http.StatusForbidden)
		return
	}
	q, err := s.db.Queue(name)
	if errors.Is(err, state.ErrNotFound) {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if err != nil {
		reply(w, nil, err)
		return
	}
	page := QueuePage{Queue: q, Retention: "kept (source queue)", Readers: []string{}, Names: map[string]string{}}
	if g := s.graphOrNil(); g != nil {
		for _, n := range g.Stages {
			if slices.Contains(n.Outputs, name) {
				page.Producer = n.Name
				page.Retention = string(n.Retention)
				if n.Retention == pipeline.UntilConsumed {
					page.Retention = "until every reader is done"
				}
			}
		}
		for _, n := range g.Readers(name) {
			page.Readers = append(page.Readers, n.Name)
			page.Names[n.ID()] = n.Name
		}
	}
	if page.Groups, err = s.db.Groups(name); err != nil {
		reply(w, nil, err)
		return
	}
	last, err := s.db.LastSerial(name)
	if err != nil {
		reply(w, nil, err)
		return
	}
	blocks, err := s.db.Blocks(name, last-min(last, queuePageBlocks), queuePageBlocks)
	if err != nil {
		reply(w, nil, err)
		return
	}
	serials := make([]uint64, len(blocks))
	for i, b := range blocks {
		serials[i] = b.Serial
	}
	dels, err := s.db.DeliveriesOf(name, serials)
	page.Blocks = make([]QueueBlock, 0, len(blocks))
	for _, b := range slices.Backward(blocks) {
		page.Blocks = append(page.Blocks, QueueBlock{Block: b, States: dels[b.Serial]})
	}
	reply(w, page, err)
}

func (s *Server) graphOrNil() *pipeline.Graph {
	if s.eng == nil {
		return nil
	}
	return s.eng.Graph()
}

// windowsLimit is how many windows /api/windows answers unless asked.
const windowsLimit = 500

func (s *Server) windows(w http.ResponseWriter, r *http.Request) {
	if s.eng == nil {
		reply(w, []engine.WindowView{}, nil)
		return
	}
	// ?stage, ?site, ?state, ?from, ?to (RFC 3339) and ?limit narrow the
	// list; at most windowsLimit unless ?limit says otherwise (0: all).
	q := r.URL.Query()
	f := engine.WindowFilter{Stage: q.Get("stage"), Site: q.Get("site"), State: q.Get("state"), Limit: windowsLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, "limit "+v+": want 0 (all) or more", http.StatusBadRequest)
			return
		}
		f.Limit = n
	}
	for _, t := range []struct {
		name string
		out  *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := q.Get(t.name); v != "" {
			tm, err := time.Parse(time.RFC3339, v)
			if err != nil {
				http.Error(w, t.name+" "+v+": want an RFC 3339 time", http.StatusBadRequest)
				return
			}
			*t.out = tm
		}
	}
	inputs := map[string][]string{}
	if g := s.eng.Graph(); g != nil {
		for _, n := range g.Stages {
			inputs[n.Name] = n.Inputs
		}
	}
	ws, err := s.eng.WindowsMatching(f, func(stage string) bool { return s.readsAll(r, inputs[stage]) })
	if ws == nil {
		ws = []engine.WindowView{}
	}
	reply(w, ws, err)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	if s.eng == nil {
		reply(w, []engine.StatusRow{}, nil)
		return
	}
	rows, err := s.eng.Status(r.Context())
	rows = s.readableRows(r, rows)
	if rows == nil {
		rows = []engine.StatusRow{}
	}
	reply(w, rows, err)
}

// readableRows keeps the status rows of queues the user may read.
func (s *Server) readableRows(r *http.Request, rows []engine.StatusRow) []engine.StatusRow {
	return slices.DeleteFunc(slices.Clone(rows), func(row engine.StatusRow) bool { return !s.may(r, auth.Read, row.Queue) })
}

func (s *Server) latency(w http.ResponseWriter, r *http.Request) {
	h, from, ok := s.samples(w, r)
	if !ok {
		return
	}
	h = slices.DeleteFunc(h, func(p point) bool { return p.At.Before(from) })
	if s.authz != nil {
		for i := range h {
			h[i].Rows = s.readableRows(r, h[i].Rows)
		}
	}
	if h == nil {
		h = []point{}
	}
	reply(w, h, nil)
}

func (s *Server) workers(w http.ResponseWriter, r *http.Request) {
	if s.eng == nil || !s.may(r, auth.Admin, "") {
		reply(w, []flight.WorkerInfo{}, nil) // workers run every team's stages: admins see them
		return
	}
	ws := s.eng.Workers()
	if ws == nil {
		ws = []flight.WorkerInfo{}
	}
	reply(w, ws, nil)
}

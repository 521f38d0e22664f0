package engine

import (
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/stage/program"

	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/stage"

	"github.com/prometheus/client_golang/prometheus"
)

// StageStats is one stage of plumb stats, as the protocol defines it.
type StageStats = flight.StageStats

// EdgeCount counts a parted stage's joined edges, as the protocol defines it.
type EdgeCount = flight.EdgeCount

func addEdges(to *map[string]EdgeCount, from map[string]EdgeCount) {
	if len(from) > 0 && *to == nil {
		*to = map[string]EdgeCount{}
	}
	for q, c := range from {
		t := (*to)[q]
		t.Blocks += c.Blocks
		t.Bytes += c.Bytes
		(*to)[q] = t
	}
}

// count adds one finished run to the stage's measurements.
func (st *graphStage) count(m *runMeasure, result string) {
	in := m.in.Load()
	st.mu.Lock()
	switch result {
	case "ok":
		st.stats.Runs++
		if m.parted {
			st.stats.Parted++
		}
		st.stats.BytesIn += in
		st.stats.BytesOut += m.out
		st.stats.ProcessingSeconds += m.took.Seconds()
		st.stats.QueueWaitSeconds += m.wait.Seconds()
		addEdges(&st.stats.In, m.edgesIn)
		addEdges(&st.stats.Out, m.edgesOut)
		for reason, n := range m.drops {
			if st.stats.Dropped == nil {
				st.stats.Dropped = map[string]int64{}
			}
			st.stats.Dropped[reason] += n
		}
	case "failed":
		st.stats.Failed++
	case "faulty":
		st.stats.Failed++
		st.stats.Faulty++
	}
	st.stats.CPUSeconds += m.cpu.Seconds()
	st.mu.Unlock()
	sm := st.metrics
	sm.runs.WithLabelValues(result).Inc()
	if result == "ok" {
		sm.bytesIn.Add(float64(in))
		sm.bytesOut.Add(float64(m.out))
		sm.processing.Add(m.took.Seconds())
		sm.wait.Observe(m.wait.Seconds())
		for reason, n := range m.drops {
			sm.dropped.WithLabelValues(reason).Add(float64(n))
		}
	}
	sm.cpu.Add(m.cpu.Seconds())
}

// DisplayName is how people know a stage: "job/stage" for a stage of one
// job, "stage (job-a, job-b)" for one merged from several. Internal
// group ids ("stage-28f6bf6efb22") are never shown.
func DisplayName(n *pipeline.Node) string {
	if len(n.Owners) <= 1 {
		return n.Name
	}
	jobs := make([]string, 0, len(n.Owners))
	for _, o := range n.Owners {
		if !slices.Contains(jobs, o.Job) {
			jobs = append(jobs, o.Job)
		}
	}
	return n.Owners[0].Stage + " (" + strings.Join(jobs, ", ") + ")"
}

// StageOf returns the display name of the stage whose consumer group is
// group, if a stage of the graph reads as it.
func (e *Engine) StageOf(group string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stages[group]
	if st == nil {
		return "", false
	}
	return DisplayName(st.node), true
}

// WaitingForWindows returns how many blocks the window stage whose
// consumer group is group holds for windows not yet due (0 for another
// group), as of the last tick.
func (e *Engine) WaitingForWindows(group string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if st := e.stages[group]; st != nil {
		return st.waiting
	}
	return 0
}

// Stats returns every stage's measurements, sorted by name.
func (e *Engine) Stats() []StageStats {
	out, remote := e.localStats()
	if e.cfg.Shared && !e.scheduling.Load() {
		// Another server schedules: its counts are not here, the
		// metadata's are. Reserved blocks are runs under way there. The
		// reads happen outside e.mu so a slow database stalls no run.
		for i, r := range remote {
			ready, held, err := e.db.Backlog(r.input, r.group)
			if err != nil {
				continue
			}
			s := &out[i]
			s.Backlog, s.Waiting, s.Workers, s.Target = ready, 0, int(held), 0
			if r.window {
				s.Backlog, s.Waiting = 0, ready+held
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Stage < out[j].Stage })
	return out
}

// remoteQuery is what Stats needs to read a stage's backlog from the
// metadata.
type remoteQuery struct {
	input, group string
	window       bool
}

// localStats returns every stage's measurements as this process holds
// them and, at the same index, what its metadata backlog query is.
func (e *Engine) localStats() ([]StageStats, []remoteQuery) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []StageStats
	var remote []remoteQuery
	for id, st := range e.stages {
		st.mu.Lock()
		s := st.stats
		s.In, s.Out, s.Dropped = maps.Clone(s.In), maps.Clone(s.Out), maps.Clone(s.Dropped)
		st.mu.Unlock()
		n := st.node
		s.Stage, s.ID, s.Inputs, s.Outputs, s.Program = n.Name, id, n.Inputs, n.Outputs, n.Program.String()
		s.Owners = nil
		for _, o := range n.Owners {
			s.Owners = append(s.Owners, o.Job+"/"+o.Stage)
		}
		s.Detail, s.Suspended = detail(st.steps), st.suspended
		s.Backlog, s.Waiting, s.Workers, s.Target = st.backlog, st.waiting, st.running, st.target
		if s.ProcessingSeconds > 0 {
			s.Intensity = (float64(s.BytesIn) + e.cfg.Replication*float64(s.BytesOut)) / s.ProcessingSeconds / 1e6
			// A stage several jobs share feeds each of them: chaining it
			// with one job's next stage would run it once per job again.
			s.ChainCandidate = s.Intensity > e.cfg.ChainAbove && len(n.Owners) <= 1
		}
		out = append(out, s)
		remote = append(remote, remoteQuery{n.Inputs[0], st.group, st.win != nil})
	}
	return out, remote
}

// metrics are the engine's Prometheus series, labelled by stage name.
type metrics struct {
	backlog, waiting                         *prometheus.GaugeVec
	workers                                  *prometheus.GaugeVec
	runs, dropped                            *prometheus.CounterVec
	bytesIn                                  *prometheus.CounterVec
	bytesOut                                 *prometheus.CounterVec
	processing                               *prometheus.CounterVec
	cpu                                      *prometheus.CounterVec
	wait                                     *prometheus.HistogramVec
	info                                     *prometheus.GaugeVec
	remoteWorkers, remoteSlots, remoteLeases prometheus.Gauge
}

type stageMetrics struct {
	runs, dropped                      *prometheus.CounterVec
	bytesIn, bytesOut, processing, cpu prometheus.Counter
	wait                               prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) *metrics {
	graphStage := []string{"stage"}
	m := &metrics{
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plumb_stage_backlog_blocks",
			Help: "Blocks a run of the stage could take now (what more workers would speed up); a window stage's blocks held for windows not yet due are in plumb_stage_window_waiting_blocks."}, graphStage),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plumb_stage_window_waiting_blocks",
			Help: "Blocks a window stage holds for windows that are not due yet: waiting by design, not congestion."}, graphStage),
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plumb_stage_runs_in_progress", Help: "Runs of the stage in progress (local)."}, graphStage),
		runs:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_stage_runs_total", Help: "Finished runs by result (ok, failed, faulty, lost)."}, []string{"stage", "result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_stage_dropped_total",
			Help: "What the stage's runs let go of to stay within their bounds, by reason (builtin:dns: edge_budget frames, tcp_evicted streams, tcp_skipped holes, defrag_dropped datagrams; builtin:dnspairs also pairing_inexact decisions; builtin:newdomains late_unchecked rows of late blocks and state_reset states started afresh)."}, []string{"stage", "reason"}),
		bytesIn:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_stage_bytes_in_total", Help: "Bytes read by successful runs (I)."}, graphStage),
		bytesOut:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_stage_bytes_out_total", Help: "Bytes written by successful runs (O)."}, graphStage),
		processing: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_stage_processing_seconds_total", Help: "Wall time of successful runs (P)."}, graphStage),
		cpu:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_stage_cpu_seconds_total", Help: "CPU seconds of stage programs (busy seconds for built-ins)."}, graphStage),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plumb_stage_info", Help: "1 per stage, with its program and how it runs (e.g. which xz encoder) as labels."},
			[]string{"stage", "program", "detail"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_stage_queue_wait_seconds", Help: "Time from an input block's arrival to the start of its run.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}, graphStage),
		remoteWorkers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "plumb_remote_workers", Help: "Remote workers seen lately."}),
		remoteSlots:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "plumb_remote_slots", Help: "Slots of the remote workers seen lately."}),
		remoteLeases:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "plumb_remote_leases", Help: "Stage runs leased to remote workers now."}),
	}
	if reg != nil {
		reg.MustRegister(m.backlog, m.waiting, m.workers, m.runs, m.dropped, m.bytesIn, m.bytesOut, m.processing, m.cpu, m.wait, m.info, m.remoteWorkers, m.remoteSlots, m.remoteLeases)
	}
	return m
}

func (m *metrics) graphStage(name string) *stageMetrics {
	return &stageMetrics{
		runs:    m.runs.MustCurryWith(prometheus.Labels{"stage": name}),
		dropped: m.dropped.MustCurryWith(prometheus.Labels{"stage": name}),
		bytesIn: m.bytesIn.WithLabelValues(name), bytesOut: m.bytesOut.WithLabelValues(name),
		processing: m.processing.WithLabelValues(name), cpu: m.cpu.WithLabelValues(name),
		wait: m.wait.WithLabelValues(name),
	}
}

// detail joins what a program's built-ins say about how they run.
func detail(steps []program.Step) string {
	var parts []string
	for _, st := range steps {
		if d, ok := st.Builtin.(stage.Describer); ok && d.Describe() != "" {
			parts = append(parts, d.Describe())
		}
	}
	return strings.Join(parts, "; ")
}

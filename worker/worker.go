// Package worker runs a Plumb server's stage runs on another machine: it
// leases runs, reads their inputs and stages their outputs through Flight,
// runs the program with the engine's own code, heartbeats while it works,
// and commits through the server. A worker that dies or is cut off stops
// heartbeating; its leases expire and the runs go elsewhere, and a late
// commit is refused, so nothing is published twice.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/every"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/program"
)

// Config configures a worker.
type Config struct {
	Client *client.Client
	// Servers, when there are several servers sharing their metadata,
	// holds a client of each (Client among them): the worker leases from
	// the one that schedules, and moves on when a server says it does not.
	Servers  []*client.Client
	ID, Host string
	Slots    int    // runs at once
	Stages   string // path.Match pattern of stage names to run; "" for all
	// Runner runs the programs, confined as the server confines its own.
	Runner  *Runner
	Scratch string // where runs write their outputs before upload; the worker's own
	// Store, when set, is the server's primary blob store (S3) reached
	// directly: inputs are read from it and outputs written to it, and
	// only the commit goes through the server. Without it every byte goes
	// through Flight.
	Store blob.Store
	Log   *slog.Logger
	// Metrics, when set, receives the worker's Prometheus metrics.
	Metrics prometheus.Registerer
}

// Worker leases and runs stage runs until its context ends.
type Worker struct {
	cfg     Config
	mu      sync.Mutex
	missing []string // executables this machine lacks
	m       *metrics
	parts   parts // first halves held for their blocks' turns
	servers []*client.Client
	cur     int // the server leased from, in servers; guarded by mu
}

// client is the server the worker leases from now.
func (w *Worker) client() *client.Client {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.servers[w.cur]
}

// moveOn leases from the next server after c said it does not schedule:
// the runs leased from c are lost with its duty.
func (w *Worker) moveOn(c *client.Client) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.servers) > 1 && w.servers[w.cur] == c {
		w.cur = (w.cur + 1) % len(w.servers)
	}
}

// New returns a worker. Its metrics go to cfg.Metrics when it is set;
// registering them twice is an error New reports by panicking, as
// prometheus.MustRegister does.
func New(cfg Config) *Worker {
	w := &Worker{cfg: cfg, m: newMetrics(cfg.Slots), servers: cfg.Servers}
	if len(w.servers) == 0 {
		w.servers = []*client.Client{cfg.Client}
	}
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(w.m.runs, w.m.inProgress, w.m.leaseFailures, w.m.slots, w.m.lastContact)
	}
	return w
}

// ReadyWithin is how recently a ready worker has heard from the server:
// a lease request answers within flight.LeaseWait when the server is up.
const ReadyWithin = 3 * flight.LeaseWait

// Ready reports whether the worker has reached the server lately, for a
// readiness probe.
func (w *Worker) Ready() bool {
	last := w.m.last.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < ReadyWithin
}

// metrics are a worker's own: what it ran, and whether it reaches the
// server. The server's plumb_remote_* show the workers from its side.
type metrics struct {
	runs          *prometheus.CounterVec
	inProgress    prometheus.Gauge
	leaseFailures prometheus.Counter
	slots         prometheus.Gauge
	lastContact   prometheus.GaugeFunc
	last          atomic.Int64 // UnixNano of the last lease answer
}

func newMetrics(slots int) *metrics {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_worker_runs_total",
			Help: "Leased runs by how they ended: committed, parted (a first half held for its block's turn), failed, given_back (the program is missing here), lost (the lease went elsewhere) or stopped."},
			[]string{"result"}),
		inProgress: prometheus.NewGauge(prometheus.GaugeOpts{Name: "plumb_worker_runs_in_progress", Help: "Leased runs under way."}),
		leaseFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "plumb_worker_lease_failures_total",
			Help: "Lease requests that failed (the server unreachable or refusing)."}),
		slots: prometheus.NewGauge(prometheus.GaugeOpts{Name: "plumb_worker_slots", Help: "Runs the worker takes at once (--slots)."}),
	}
	m.slots.Set(float64(slots))
	for _, r := range []string{"committed", "parted", "failed", "given_back", "lost", "stopped"} {
		m.runs.WithLabelValues(r) // every result shows from the start, at 0
	}
	m.lastContact = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "plumb_worker_last_contact_timestamp_seconds",
		Help: "When the server last answered a lease request (Unix time)."}, func() float64 { return float64(m.last.Load()) / 1e9 })
	return m
}

func (m *metrics) contact() { m.last.Store(time.Now().UnixNano()) }

// Run runs Slots lease loops until ctx ends; runs under way when it ends
// are abandoned (their leases expire and go elsewhere).
func (w *Worker) Run(ctx context.Context) error {
	if err := os.MkdirAll(w.cfg.Scratch, 0o750); err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	// The scratch directory is this worker's: what runs left there died
	// with a previous process.
	if n, bytes, err := program.DeadScratch(w.cfg.Scratch, nil, true); err != nil {
		w.cfg.Log.Warn("removing what dead runs left in scratch", "dir", w.cfg.Scratch, "err", err)
	} else if n > 0 {
		w.cfg.Log.Info("removed what runs killed with a previous worker left in scratch", "dir", w.cfg.Scratch, "entries", n, "bytes", bytes)
	}
	w.cfg.Log.Info("worker started", "worker", w.cfg.ID, "slots", w.cfg.Slots, "stages", w.cfg.Stages)
	var wg sync.WaitGroup
	for range w.cfg.Slots {
		wg.Go(func() { w.loop(ctx) })
	}
	wg.Wait()
	w.parts.drop()
	return nil
}

func (w *Worker) hello() flight.Hello {
	w.mu.Lock()
	defer w.mu.Unlock()
	return flight.Hello{Worker: w.cfg.ID, Host: w.cfg.Host, Slots: w.cfg.Slots, Stages: w.cfg.Stages, Missing: slices.Clone(w.missing)}
}

func (w *Worker) loop(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		c := w.client()
		l, ok, err := lease(ctx, c, w.hello())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if status.Code(err) == codes.Unavailable && len(w.servers) > 1 {
				// Not the scheduler, or not up: try the next at once.
				w.moveOn(c)
				w.cfg.Log.Debug("lease request refused; asking the next server", "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			w.m.leaseFailures.Inc()
			w.cfg.Log.Warn("lease request failed; retrying", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = time.Second
		w.m.contact()
		if ok {
			w.m.inProgress.Inc()
			result := w.run(ctx, l)
			w.m.inProgress.Dec()
			w.m.runs.WithLabelValues(result).Inc()
		}
	}
}

// run does one leased run and says how it ended: committed, failed,
// given_back (this machine lacks the program), lost (the lease went
// elsewhere) or stopped (the worker is stopping).
func (w *Worker) run(ctx context.Context, l flight.Lease) string {
	log := w.cfg.Log.With("lease", l.ID, "stage", l.Stage, "block", l.Inputs[0].Name)
	log.Debug("run leased")
	c := w.client()
	if prog := w.cfg.Runner.Lacks(l); prog != "" {
		w.mu.Lock()
		w.missing = append(w.missing, prog)
		w.mu.Unlock()
		log.Warn("this machine lacks the stage's program; giving the run back", "program", prog)
		c.Do(ctx, flight.ActFailLease, flight.LeaseRequest{Lease: l.ID, Release: true}, nil)
		return "given_back"
	}
	if l.Part != "" {
		return w.runPart(ctx, l)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var hb sync.WaitGroup
	defer hb.Wait()
	hb.Go(func() { w.heartbeat(rctx, cancel, l) })
	defer cancel(nil) // stops the heartbeat before hb.Wait
	in := stage.Input{Drops: &stage.Drops{}, Tally: &stage.Tally{}}
	if l.Carry != nil {
		in.Carry = &stage.Carry{In: l.Carry.In, Gap: l.Carry.Gap, Final: l.Carry.Final}
	}
	var (
		outs   []*output
		stderr string
		cpu    time.Duration
		err    error
		parted bool
	)
	if hp := w.takePart(l); hp != nil {
		// Its first half ran here apart from its neighbours: only the
		// rows its edges complete are left.
		outs, cpu, err = w.finish(rctx, l, hp, in)
		parted = true
	} else {
		outs, stderr, cpu, err = w.execute(rctx, l, in)
	}
	defer closeOutputs(outs)
	if cause := context.Cause(rctx); errors.Is(cause, errLeaseGone) {
		log.Warn("lease lost while running; the run was given to another worker", "err", err)
		return "lost"
	}
	if ctx.Err() != nil {
		return "stopped" // the lease expires and the run goes elsewhere
	}
	if err != nil {
		why := err.Error()
		if stderr != "" {
			why += "; stderr: " + stderr
		}
		log.Warn("stage run failed", "err", why)
		if ferr := c.Do(ctx, flight.ActFailLease, flight.LeaseRequest{Lease: l.ID, Error: why}, nil); ferr != nil {
			log.Warn("could not report the failure; the lease will expire", "err", ferr)
		}
		return "failed"
	}
	var report []flight.LeaseOutput
	for _, o := range outs {
		src := client.Source{Name: o.name, Size: o.N, SHA256: o.Sum().String(),
			Open: func() (io.ReadCloser, error) { return os.Open(o.F.Name()) }}
		if w.cfg.Store != nil {
			if err := w.putDirect(rctx, o); err != nil {
				log.Warn("could not write an output to the store; the lease will expire and the run go elsewhere", "output", o.name, "err", err)
				return "lost"
			}
			report = append(report, flight.LeaseOutput{Queue: o.queue, Size: o.N, SHA256: src.SHA256})
			continue
		}
		if _, err := c.PutStaged(rctx, l.ID, src); err != nil {
			if status.Code(err) == codes.FailedPrecondition || errors.Is(context.Cause(rctx), errLeaseGone) {
				log.Warn("lease lost before the output was uploaded; the run was given to another worker and this one is dropped", "err", err)
				return "lost"
			}
			log.Warn("could not upload an output; the lease will expire and the run go elsewhere", "output", o.name, "err", err)
			return "lost"
		}
		report = append(report, flight.LeaseOutput{Queue: o.queue, Size: o.N, SHA256: src.SHA256})
	}
	req := flight.LeaseRequest{Lease: l.ID, Outputs: report, CPUSeconds: cpu.Seconds(), Parted: parted, Dropped: in.Drops.Counts(), Tally: in.Tally.Counts()}
	if in.Carry != nil {
		req.Carry = in.Carry.Out
	}
	err = c.Do(ctx, flight.ActCommitLease, req, nil)
	if status.Code(err) == codes.FailedPrecondition {
		log.Warn("commit refused: the lease expired and the run went to another worker", "err", err)
		return "lost"
	}
	if err != nil {
		log.Warn("commit failed; the lease will expire and the run go elsewhere", "err", err)
		return "lost"
	}
	log.Debug("run committed")
	return "committed"
}

// takePart returns the first half held for a lease's turn, if the
// worker holds it.
func (w *Worker) takePart(l flight.Lease) *heldPart {
	if l.Held == "" {
		return nil
	}
	return w.parts.take(l.Held)
}

// heartbeat keeps the lease alive, cancelling the run when it is lost.
func (w *Worker) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, l flight.Lease) {
	// ctx is the run's: cancelling it for a lost lease ends the beats.
	every.Run(ctx, max(l.TTL/3, 100*time.Millisecond), func() {
		err := w.client().Do(ctx, flight.ActHeartbeat, flight.LeaseRequest{Lease: l.ID}, nil)
		if status.Code(err) == codes.FailedPrecondition {
			cancel(errLeaseGone)
			return
		}
		if err != nil && ctx.Err() == nil {
			w.cfg.Log.Warn("heartbeat failed; retrying", "lease", l.ID, "err", err)
		}
	})
}

// output is one output of a run, written to a scratch file while hashed.
type output struct {
	queue, name string
	*program.HashFile
}

// execute streams the inputs from the server through the program into
// scratch files.
func (w *Worker) execute(ctx context.Context, l flight.Lease, in stage.Input) ([]*output, string, time.Duration, error) {
	var (
		stderr string
		cpu    time.Duration
	)
	outs, err := w.withPorts(ctx, l, func(ctx context.Context, name block.Name, ins, outs []program.Port, scratch string) (err error) {
		in.Block = name
		stderr, cpu, err = w.cfg.Runner.Run(ctx, l, in, ins, outs, scratch)
		return err
	})
	return outs, stderr, cpu, err
}

// withPorts opens a lease's inputs (from the store or through the
// server) and its outputs (scratch files) and runs fn over them, within
// the lease's timeout. The outputs are the caller's to close and remove.
func (w *Worker) withPorts(ctx context.Context, l flight.Lease, fn func(ctx context.Context, name block.Name, ins, outs []program.Port, scratch string) error) ([]*output, error) {
	if l.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.Timeout)
		defer cancel()
	}
	name, err := block.Parse(l.Inputs[0].Name)
	if err != nil {
		return nil, err
	}
	scratch, err := os.MkdirTemp(w.cfg.Scratch, "run-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	var ins []program.Port
	for _, b := range l.Inputs {
		if w.cfg.Store != nil {
			if rc, err := w.cfg.Store.Open(ctx, b.Key); err == nil {
				defer rc.Close()
				ins = append(ins, program.Port{Queue: b.Queue, R: rc})
				continue
			} // elsewhere (another store, or lost): through the server
		}
		s, err := w.client().Get(ctx, b.Name)
		if err != nil {
			return nil, fmt.Errorf("read input %s: %w", b.Name, err)
		}
		defer s.Close()
		if !s.Next() {
			return nil, fmt.Errorf("read input %s: %w", b.Name, s.Err())
		}
		ins = append(ins, program.Port{Queue: b.Queue, R: s})
	}
	var outs []*output
	var ports []program.Port
	for _, q := range l.Outputs {
		f, err := os.CreateTemp(w.cfg.Scratch, "out-")
		if err != nil {
			return outs, err
		}
		on := name
		on.Queue = q
		o := &output{queue: q, name: on.String(), HashFile: program.NewHashFile(f)}
		o.Limit = l.OutputLimit
		outs = append(outs, o)
		ports = append(ports, program.Port{Queue: q, W: o})
	}
	return outs, fn(ctx, name, ins, ports, scratch)
}

// putDirect writes an output straight to the store under its block key;
// the commit makes it a block.
func (w *Worker) putDirect(ctx context.Context, o *output) error {
	n, err := block.Parse(o.name)
	if err != nil {
		return err
	}
	sum := o.Sum()
	f, err := os.Open(o.F.Name())
	if err != nil {
		return err
	}
	defer f.Close()
	return w.cfg.Store.Put(ctx, blob.BlockKey(n, sum), f, o.N, sum)
}

// lease asks the server for a stage run; ok is false when none came
// within flight.LeaseWait. Leases carry the engine's own types: a worker
// runs stages as the server's engine does.
func lease(ctx context.Context, c *client.Client, h flight.Hello) (l flight.Lease, ok bool, err error) {
	err = c.Do(ctx, flight.ActLease, h, &l)
	return l, err == nil && l.ID != "", err
}

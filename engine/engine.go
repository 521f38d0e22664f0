package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plumb-dev/plumb/stage/program"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
)

// Policy is how worker slots are shared among stages.
type Policy string

// The slot policies.
const (
	// Backlog shares slots in proportion to each stage's backlog, at
	// least one per stage with work.
	Backlog Policy = "backlog"
	// Static gives every stage an equal share, whatever its backlog; it
	// is the baseline the benchmarks compare against.
	Static Policy = "static"
)

// StageNice is the default CPU priority of stage runs in the server
// (Config.Nice): the make bench deadline replay's CPU-heavy stage made
// the server's own goroutines wait 5–30 ms to run at nice 0.
const StageNice = 10

// Config configures an engine.
type Config struct {
	// Slots is how many stage runs go at once; see LocalSlots.
	Slots int
	// Nice is the CPU priority (Linux nice value, 1–19) of stage runs in
	// this process, builtins and executables alike, so that serving reads
	// and puts goes first on a busy machine (plumb serve uses StageNice);
	// the process's own priority when 0.
	Nice int
	// Policy shares the slots; Backlog when empty.
	Policy Policy
	// Tick is how often slots are re-shared; 1 s when 0.
	Tick time.Duration
	// Shared: other servers share the metadata, and one of them may be
	// the one that schedules. While this engine does not, what it says
	// of its stages' backlogs and runs comes from the metadata.
	Shared bool
	// MaxAttempts is how many runs a block gets before it is FAULTY; 4
	// when 0.
	MaxAttempts int
	// Backoff is the wait after a first failed attempt, doubled after
	// each further one; 1 s when 0.
	Backoff time.Duration
	// Scratch is where runs write outputs before they are stored.
	Scratch string
	// Replication is how many copies of each byte the store writes (the
	// R of the I/O intensity); 1 when 0.
	Replication float64
	// ChainAbove flags stages whose I/O intensity passes it (MB/s) as
	// candidates to chain with a neighbour; 50 when 0.
	ChainAbove float64
	// LeaseTTL is how long a remote worker's lease lives without a
	// heartbeat; LeaseTTL (15 s) when 0.
	LeaseTTL time.Duration
	// RemoteOnly runs no stage in this process: remote workers (plumb
	// worker) run them all.
	RemoteOnly bool
	// Sandbox confines stage executables. Without one they are refused
	// (NoSandbox says why), unless Unconfined runs them as the server's
	// own user, which only a server without users should.
	Sandbox    *sandbox.Sandbox
	NoSandbox  error
	Unconfined bool
	// Programs is the directory of registered programs' copies.
	Programs string
	// MaxExpansion and MaxOutput bound each output of a block run:
	// MaxExpansion times the run's input bytes (Expansion when 0), at
	// least MinOutputLimit, at most MaxOutput (MaxOutputLimit when 0). A
	// run past it fails and its block is set aside as malformed.
	MaxExpansion float64
	MaxOutput    int64
	// GapWait is how long a sequential stage waits for a missing block of
	// a site before it goes on without it (counted as a gap); a minute
	// when 0.
	GapWait time.Duration
	// Timeout is how long a block or window run may take when its stage
	// sets no timeout: an hour when 0, none when negative. A run past it
	// fails (and is retried), so a hostile input cannot hold a slot for
	// ever.
	Timeout time.Duration
	// DerivedRetention is the most a stage's output queue keeps a block
	// when the stage gives no retention (until consumed): a queue nothing
	// reads would otherwise grow for ever. 30 days when 0; negative keeps
	// such blocks until consumed, however long.
	DerivedRetention time.Duration
	// Full, when set, says why the store has no room for outputs; while it
	// does, no new run starts (runs under way finish).
	Full          func() error
	sharedScratch bool // Scratch is the system's: others' files live there too

	// Registerer receives the engine's metrics; none when nil.
	Registerer prometheus.Registerer
	// Tallier takes the tallies of committed runs (Tally); they are
	// dropped when nil.
	Tallier stage.Tallier
	Logger  *slog.Logger
	Now     func() time.Time
	// Inject, for tests only, is asked before each step of a run (see
	// Step) and fails the step with the error it returns.
	Inject func(step Step, block string) error
}

// LocalSlots is how many stage runs go at once in this process: Slots,
// or the number of CPUs when Slots is 0.
func (c Config) LocalSlots() int {
	if c.Slots <= 0 {
		return runtime.NumCPU()
	}
	return c.Slots
}

func (c *Config) defaults() {
	c.Slots = c.LocalSlots()
	if c.Policy == "" {
		c.Policy = Backlog
	}
	if c.Tick <= 0 {
		c.Tick = time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 4
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = LeaseTTL
	}
	if c.Backoff <= 0 {
		c.Backoff = time.Second
	}
	if c.Scratch == "" {
		c.Scratch, c.sharedScratch = os.TempDir(), true
	}
	if c.Replication <= 0 {
		c.Replication = 1
	}
	if c.Timeout == 0 {
		c.Timeout = time.Hour
	}
	if c.DerivedRetention == 0 {
		c.DerivedRetention = 30 * 24 * time.Hour
	}
	if c.GapWait <= 0 {
		c.GapWait = time.Minute
	}
	if c.ChainAbove <= 0 {
		c.ChainAbove = 50
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Engine runs the merged graph of accepted jobs.
type Engine struct {
	cfg     Config
	db      *state.DB
	store   blob.Store
	reg     *stage.Registry
	log     *slog.Logger
	metrics *metrics
	paused  bool // the store is full; no new runs start

	recomputes singleflight.Group // lost blocks being made again, by name

	workers      map[string]*worker    // remote workers seen lately
	leases       map[string]*remoteRun // stage runs leased to them
	suspended    map[string]string     // accepted jobs suspended, and why
	scratch      scratchSet            // scratch of the runs alive
	localRunning int                   // runs in this process
	lat          *latencies
	latm         *latencyMetrics
	ctx          context.Context // the Run context, once running
	boot         string          // names this process's reservations
	// ran: Run ran before, so the stages it left must be built again from
	// the metadata when it runs again (another server may have scheduled
	// meanwhile).
	ran        bool
	scheduling atomic.Bool // Run is running: this server schedules

	mu     sync.Mutex
	graph  *pipeline.Graph
	stages map[string]*graphStage // by node ID
	kick   chan struct{}          // the graph changed or a run ended
	// graphChanged is closed (and replaced) when the stages change, to
	// wake workers waiting for a lease (with e.mu).
	graphChanged chan struct{}
	parts        parts // first halves of edged runs, held for their turn
	// remoteParts are the first halves remote workers hold (with e.mu).
	remoteParts map[partKey]remotePart
}

// runSpec is what a run runs, fixed when it starts.
type runSpec struct {
	node  *pipeline.Node
	steps []program.Step
}

// graphStage is a node of the graph as the engine runs it. Its node, steps and
// counts change under Engine.mu.
type graphStage struct {
	node    *pipeline.Node
	group   string // the consumer group it reads its inputs as
	steps   []program.Step
	trusted bool // its program's job may name unregistered executables
	// suspended says why the stage starts no runs: every job owning it is
	// suspended. Its groups keep their place.
	suspended string
	// sequential: a Sequential built-in over one input; its runs go per
	// site in sequence order, carrying state.
	sequential bool
	// edged: a sequential stage whose runs split in two (Edged): the
	// first half of any block runs on any free slot.
	edged   bool
	running int
	target  int
	backlog int64 // blocks a run could take now
	waiting int64 // a window stage's blocks held for windows not yet due
	counted backlogCount
	stats   StageStats
	mu      sync.Mutex // guards stats
	metrics *stageMetrics
	win     *windowState // window stages
	stream  *streamState // stream stages
}

// New returns an engine over a metadata database and a blob store. It
// runs no stage until it is given a graph (Apply): the jobs package
// admits jobs and applies their merged graph.
func New(db *state.DB, store blob.Store, reg *stage.Registry, cfg Config) (*Engine, error) {
	cfg.defaults()
	if err := os.MkdirAll(cfg.Scratch, 0o750); err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	e := &Engine{
		cfg: cfg, db: db, store: store, reg: reg, log: cfg.Logger.With("component", "engine"),
		metrics: newMetrics(cfg.Registerer), boot: uuid.NewString()[:8],
		lat: newLatencies(cfg.Now), latm: newLatencyMetrics(cfg.Registerer),
		stages: map[string]*graphStage{}, kick: make(chan struct{}, 1), ctx: context.Background(),
		workers: map[string]*worker{}, leases: map[string]*remoteRun{}, suspended: map[string]string{},
	}
	if !cfg.sharedScratch {
		// No run is alive yet: whatever runs left was left by runs that
		// died with a previous process.
		if n, bytes, err := e.Scratch(true); err != nil {
			e.log.Warn("removing what dead runs left in the scratch directory", "dir", cfg.Scratch, "err", err)
		} else if n > 0 {
			e.log.Info("removed what runs killed with the previous process left in scratch", "dir", cfg.Scratch, "entries", n, "bytes", bytes)
		}
	}
	return e, nil
}

// Run schedules stage runs until ctx ends, then waits for the runs in
// flight to stop.
//
// Where several servers share the metadata, each calls Run only while it
// holds the duty of scheduling: each Run begins as a restart would, from
// what the metadata holds, and gives back the blocks of the runs the
// scheduler before it left.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	e.ctx = ctx
	if e.ran {
		// Window and stream stages hold what they were fed: it is stale
		// after another server scheduled. (The graph itself is kept
		// current by whoever applies the jobs.)
		e.stages = map[string]*graphStage{}
		if e.graph != nil {
			if err := e.apply(e.graph); err != nil {
				e.mu.Unlock()
				return err
			}
		}
	}
	e.ran = true
	e.mu.Unlock()
	if err := e.resetInterrupted(); err != nil {
		return err
	}
	e.scheduling.Store(true)
	defer e.scheduling.Store(false)
	var runs sync.WaitGroup
	defer e.parts.drop("", &e.scratch)
	defer runs.Wait()
	every := e.cfg.Tick
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	reshare, counted := true, true
	for {
		changed := e.db.Changed("")
		if err := e.fill(ctx, &runs, reshare, counted); err != nil {
			e.log.Error("scheduling stage runs", "err", err)
		}
		reshare, counted = false, false
		// A quiet engine has nothing that time alone changes: it waits
		// for a change instead of waking every tick (an idle server spent
		// most of its CPU on those wakes), with a slow tick as a safety net.
		if d := e.tickEvery(); d != every {
			every = d
			ticker.Reset(d)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			reshare, counted = true, true
		case <-changed:
			reshare = e.idleStages()
		case <-e.kick:
			reshare = true // the graph changed or a run ended
		}
	}
}

// quietTicks is how many ticks a quiet engine sleeps between fills.
const quietTicks = 10

// tickEvery is how often the engine fills without being told of a change:
// every tick while time alone can make work (blocks owed or held for a
// retry, runs, leases or parts held, window and stream stages, a full
// store), quietTicks ticks otherwise.
func (e *Engine) tickEvery() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	busy := e.paused || len(e.leases) > 0 || e.localRunning > 0
	for _, st := range e.stages {
		busy = busy || st.running > 0 || st.backlog > 0 || st.counted.held > 0 || st.win != nil || st.stream != nil ||
			st.edged && e.parts.held(st.group) > 0
	}
	if busy {
		return e.cfg.Tick
	}
	return quietTicks * e.cfg.Tick
}

// idleStages reports whether a stage has no slot: new work there must
// not wait for the next tick.
func (e *Engine) idleStages() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, st := range e.stages {
		if st.target == 0 {
			return true
		}
	}
	return false
}

func (e *Engine) poke() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// fill re-shares the slots when asked, then starts runs for every stage
// below its share that has work. Window stages count the blocks waiting
// for their windows only when counted (each tick): that count walks every
// open window's blocks, and a re-share follows every block put.
func (e *Engine) fill(ctx context.Context, runs *sync.WaitGroup, reshare, counted bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	e.expireLeases(e.cfg.Now())
	if reshare {
		for _, st := range e.stages {
			n, err := e.backlog(st, counted)
			if err != nil {
				errs = append(errs, err)
			}
			st.backlog = n
		}
		e.share()
	}
	if e.cfg.Full != nil {
		if err := e.cfg.Full(); err != nil {
			if !e.paused {
				e.log.Warn("store full: stage runs paused until space returns", "why", err)
				e.paused = true
			}
			return errors.Join(errs...)
		}
		if e.paused {
			e.log.Info("store has room again: stage runs resume")
			e.paused = false
		}
	}
	for _, st := range e.sorted() {
		if st.suspended != "" {
			continue
		}
		if st.win != nil {
			if st.running > 0 {
				continue // one window run at a time keeps windows in order
			}
			due, err := e.dueWindows(st, e.cfg.Now())
			if err != nil {
				errs = append(errs, fmt.Errorf("stage %s: %w", st.node.Name, err))
				continue
			}
			if len(due) == 0 {
				continue
			}
			st.running++
			spec := runSpec{node: st.node, steps: st.steps}
			runs.Go(func() {
				e.runWindows(ctx, st, spec, due)
				e.mu.Lock()
				st.running--
				e.mu.Unlock()
				e.poke()
			})
			continue
		}
		if st.stream != nil {
			if err := e.startStreams(ctx, runs, st); err != nil {
				errs = append(errs, fmt.Errorf("stage %s: %w", st.node.Name, err))
			}
			continue
		}
		for st.running < st.target && e.localRunning < e.localSlots() {
			reserver := e.boot + "-" + uuid.NewString()[:8]
			res, cin, ok, err := e.reserve(st, reserver, "", e.visibility(st))
			part := false
			if err == nil && !ok && st.edged && e.parts.held(st.group) < e.maxHeldParts() {
				// The sites' next blocks are all taken: read a later one
				// apart from its neighbours, for its turn.
				res, ok, err = e.db.ReservePart(st.node.Inputs[0], st.group, reserver, e.visibility(st))
				part, cin = ok, nil
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("stage %s: reserve: %w", st.node.Name, err))
				break
			}
			if !ok {
				break
			}
			st.running++
			e.localRunning++
			st.backlog = max(st.backlog-1, 0)
			e.metrics.workers.WithLabelValues(st.node.Name).Set(float64(st.running))
			spec := runSpec{node: st.node, steps: st.steps} // the graph may change under the run
			runs.Go(func() {
				run := e.runBlock
				if part {
					run = func(ctx context.Context, st *graphStage, spec runSpec, res state.Reservation, reserver string, _ *state.CarryIn) error {
						return e.runPart(ctx, st, spec, res, reserver)
					}
				}
				if err := run(ctx, st, spec, res, reserver, cin); err != nil {
					e.log.Error("stage run", "stage", st.node.Name, "block", res.Blocks[0].Name, "err", err)
				}
				e.mu.Lock()
				st.running--
				e.localRunning--
				e.metrics.workers.WithLabelValues(st.node.Name).Set(float64(st.running))
				e.mu.Unlock()
				e.poke()
			})
		}
	}
	return errors.Join(errs...)
}

// reserve takes a stage's next run for reserver: for a sequential stage
// the next block of a site in sequence order, with how it carries state;
// otherwise any owed block (joined with its partners).
//
// Called with e.mu. worker is the remote worker asking, "" for this
// process: a block whose first half another holds is left for its
// holder's turn (heldElsewhere).
func (e *Engine) reserve(st *graphStage, reserver, worker string, visibility time.Duration) (state.Reservation, *state.CarryIn, bool, error) {
	if !st.sequential {
		res, ok, err := e.db.ReserveJoin(st.node.Inputs, st.group, reserver, visibility)
		return res, nil, ok, err
	}
	var skip func(uint64) bool
	if st.edged {
		now := e.cfg.Now()
		skip = func(serial uint64) bool { return e.heldElsewhere(partKey{st.group, serial}, worker, now) }
	}
	res, in, ok, err := e.db.ReserveNext(st.node.Inputs[0], st.group, reserver, visibility, e.cfg.GapWait, skip)
	return res, &in, ok, err
}

// localSlots is how many runs go in this process at once.
func (e *Engine) localSlots() int {
	if e.cfg.RemoteOnly {
		return 0
	}
	return e.cfg.Slots
}

// visibility is how long a run may hold its input before another run may
// take it: past the stage's timeout, or a day for stages without one.
func (e *Engine) visibility(st *graphStage) time.Duration {
	if t := e.timeout(st.node); t > 0 {
		return t + time.Minute
	}
	return 24 * time.Hour
}

// backlog counts a stage's blocks that wait for a run (of its first
// input: a join runs once per block of it).
// timeout is a stage's run timeout: its own, else the engine's default.
func (e *Engine) timeout(n *pipeline.Node) time.Duration {
	if t := time.Duration(n.Timeout); t > 0 {
		return t
	}
	return max(e.cfg.Timeout, 0)
}

func (e *Engine) backlog(st *graphStage, counted bool) (int64, error) {
	if st.suspended != "" {
		return 0, nil // it takes no share of the slots
	}
	if st.win != nil {
		// A window stage's blocks wait for their windows, which fire in
		// the tick that finds them due: only firings waiting to be retried
		// are work a run could take.
		var due int64
		for _, p := range st.win.retry {
			due += int64(len(p.f.Blocks))
		}
		if !counted {
			return due, nil
		}
		n, err := e.countBacklog(st)
		if err != nil {
			return 0, fmt.Errorf("stage %s: backlog: %w", st.node.Name, err)
		}
		due = min(due, n)
		st.waiting = n - due
		e.metrics.waiting.WithLabelValues(st.node.Name).Set(float64(st.waiting))
		e.metrics.backlog.WithLabelValues(st.node.Name).Set(float64(due))
		return due, nil
	}
	n, err := e.countBacklog(st)
	if err != nil {
		return 0, fmt.Errorf("stage %s: backlog: %w", st.node.Name, err)
	}
	e.metrics.backlog.WithLabelValues(st.node.Name).Set(float64(n))
	return n, nil
}

// backlogCount is a stage's last count of its backlog: when it was made
// and how long it took.
type backlogCount struct {
	n    int64
	held int64 // reserved or waiting out a backoff: ready with time alone
	at   time.Time
	took time.Duration
}

// backlogReuse: a count of a stage's backlog is reused while it is younger
// than this many times what it took to make.
const backlogReuse = 50

// countBacklog counts the blocks a run of the stage could take. Counting
// walks every block owed to its group, and the slots are re-shared at
// every put: with a million blocks owed, the counts took a fifth of the
// server's CPU (make bench-scale) and held read transactions that made
// writers wait. So a count is reused for backlogReuse times what it took,
// which bounds its cost to a few percent of a core; a small backlog,
// quick to count, is counted afresh each time.
func (e *Engine) countBacklog(st *graphStage) (int64, error) {
	start := time.Now() // the real clock: this bounds real work
	if c := st.counted; !c.at.IsZero() && start.Sub(c.at) < backlogReuse*c.took {
		return c.n, nil
	}
	n, held, err := e.db.Backlog(st.node.Inputs[0], st.group)
	if err != nil {
		return 0, err
	}
	st.counted = backlogCount{n: n, held: held, at: start, took: time.Since(start)}
	return n, nil
}

func (e *Engine) sorted() []*graphStage {
	out := make([]*graphStage, 0, len(e.stages))
	for _, st := range e.stages {
		out = append(out, st)
	}
	// Most under-served first, so a scarce slot goes where it is owed.
	sort.Slice(out, func(i, j int) bool {
		di, dj := out[i].target-out[i].running, out[j].target-out[j].running
		if di != dj {
			return di > dj
		}
		return out[i].node.Name < out[j].node.Name
	})
	return out
}

// share sets every stage's target number of runs.
func (e *Engine) share() {
	stages := e.sorted()
	if e.cfg.Policy == Static {
		each := max(e.cfg.Slots/max(len(stages), 1), 1)
		for _, st := range stages {
			st.target = each
		}
		return
	}
	demand := make([]int64, len(stages))
	for i, st := range stages {
		if st.node.Abstraction == pipeline.Block { // others do not run yet
			demand[i] = st.backlog + int64(st.running)
		}
	}
	for i, t := range Share(e.localSlots()+e.remoteSlots(e.cfg.Now()), demand) {
		stages[i].target = t
	}
}

// Share divides slots among stages in proportion to their demand (blocks
// waiting or running): at least one slot to every stage with demand, never
// more than its demand, the remainder by largest fractional share.
func Share(slots int, demand []int64) []int {
	out := make([]int, len(demand))
	var total int64
	busy := 0
	for i, d := range demand {
		if d > 0 {
			out[i] = 1
			total += d
			busy++
		}
	}
	left := slots - busy
	if left <= 0 || total == 0 {
		return out
	}
	type frac struct {
		i    int
		rest float64
	}
	var fr []frac
	for i, d := range demand {
		if d == 0 {
			continue
		}
		exact := float64(left) * float64(d) / float64(total)
		add := min(int(exact), int(d)-1)
		out[i] += add
		fr = append(fr, frac{i, exact - float64(int(exact))})
	}
	sort.SliceStable(fr, func(a, b int) bool { return fr[a].rest > fr[b].rest })
	given := 0
	for _, x := range out {
		given += x
	}
	for k := 0; given < slots && k < len(fr)*2; k++ {
		f := fr[k%len(fr)]
		if int64(out[f.i]) < demand[f.i] {
			out[f.i]++
			given++
		}
	}
	return out
}

// Graph returns the merged graph in force.
func (e *Engine) Graph() *pipeline.Graph {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.graph
}

// Registry returns the built-ins the engine knows.
func (e *Engine) Registry() *stage.Registry { return e.reg }

func groupOf(n *pipeline.Node) string { return n.ID() }

// isStageGroup tells the engine's consumer groups from users'.
func isStageGroup(g string) bool { return strings.HasPrefix(g, "stage-") }

// CheckTally refuses a tally a worker sends that no run makes.
func (e *Engine) CheckTally(t map[string]int64) error {
	if len(t) == 0 {
		return nil
	}
	if e.cfg.Tallier == nil {
		return errors.New("tally: this server counts no tallies")
	}
	return e.cfg.Tallier.Check(t)
}

// tallied counts a committed run's tally.
func (e *Engine) tallied(t map[string]int64) {
	if e.cfg.Tallier != nil && len(t) > 0 {
		e.cfg.Tallier.Add(t)
	}
}

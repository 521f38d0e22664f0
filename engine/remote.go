package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
)

// Remote workers take stage runs as leases. A lease holds its inputs'
// reservations for LeaseTTL past the last heartbeat; a worker that stops
// heartbeating loses them and the run goes to someone else, and its late
// commit is refused because the reservation is no longer its own.

// LeaseTTL is how long a lease lives without a heartbeat, unless
// Config.LeaseTTL says otherwise.
const LeaseTTL = 15 * time.Second

// workerGone is how long a worker that asks for nothing is still counted.
const workerGone = 30 * time.Second

// Hello is what a worker says when it asks for work.
type Hello struct {
	Worker string `json:"worker"` // a stable ID, such as host-pid
	Host   string `json:"host"`
	Slots  int    `json:"slots"`
	// Stages is a path.Match pattern of stage names it runs ("" for all).
	Stages string `json:"stages,omitempty"`
	// Missing lists executables it found it does not have: stages that
	// need them are not leased to it.
	Missing []string `json:"missing,omitempty"`
}

// Lease is one stage run given to a worker.
type Lease struct {
	ID      string           `json:"lease"`
	Stage   string           `json:"stage"`
	Program pipeline.Program `json:"program"`
	Inputs  []state.Block    `json:"inputs"`
	Outputs []string         `json:"outputs"`
	Timeout time.Duration    `json:"timeout_ns,omitempty"`
	TTL     time.Duration    `json:"ttl_ns"`
	// Network is the stage's wish for the host's network.
	Network bool `json:"network,omitempty"`
	// Trusted says the stage's job may name unregistered executables.
	Trusted bool `json:"trusted,omitempty"`
	// OutputLimit is the most the run may write to each output.
	OutputLimit int64 `json:"output_limit,omitempty"`
	// Sequential: the stage carries state from block to block of a site.
	// With Carry the run goes on from it (give it to the run as
	// stage.Input.Carry and send back what the run left in commit-lease); without
	// it the block runs on its own.
	Sequential bool        `json:"sequential,omitempty"`
	Carry      *LeaseCarry `json:"carry,omitempty"`
	// Programs are the registered programs the stage names, by name: a
	// worker runs the copy it holds with that checksum.
	Programs map[string]LeaseProgram `json:"programs,omitempty"`
	// Part: run only the first half of an edged stage's run (Edged.Start)
	// and hold it under this name; commit-lease with part set says it is
	// done. Held: this is the turn of a block whose first half the worker
	// may hold under this name: finish it (Part.Finish), or run the block
	// whole if it is not held.
	Part string `json:"part,omitempty"`
	Held string `json:"held,omitempty"`
}

// LeaseProgram is a registered program as a worker needs it.
type LeaseProgram struct {
	SHA256  string `json:"sha256"`
	Network bool   `json:"network,omitempty"`
}

// WorkerInfo describes a worker for `plumb workers`.
type WorkerInfo struct {
	Worker   string    `json:"worker"`
	Host     string    `json:"host"`
	Slots    int       `json:"slots"`
	Runs     []string  `json:"runs"` // stage: block of each lease held
	LastSeen time.Time `json:"last_seen"`
	Done     int64     `json:"done"`
	Lost     int64     `json:"lost"` // leases that expired or were refused
}

type worker struct {
	hello    Hello
	lastSeen time.Time
	done     int64
	lost     int64
}

type remoteRun struct {
	cin      *state.CarryIn // a sequential stage's
	attempt  int
	lease    Lease
	st       *graphStage
	worker   string
	group    string
	deadline time.Time
	start    time.Time
}

// ErrLeaseGone says a lease expired or was never given: its run belongs
// to someone else now.
var ErrLeaseGone = errors.New("lease expired or unknown; the run was given to another worker")

// remoteSlots counts the slots of workers seen lately. Called with e.mu.
func (e *Engine) remoteSlots(now time.Time) int {
	n := 0
	for id, w := range e.workers {
		if now.Sub(w.lastSeen) > workerGone {
			delete(e.workers, id)
			e.log.Info("worker gone: not seen for a while", "worker", id, "host", w.hello.Host)
			continue
		}
		n += w.hello.Slots
	}
	e.metrics.remoteWorkers.Set(float64(len(e.workers)))
	e.metrics.remoteSlots.Set(float64(n))
	e.metrics.remoteLeases.Set(float64(len(e.leases)))
	return n
}

// expireLeases forgets leases past their deadline. Called with e.mu.
func (e *Engine) expireLeases(now time.Time) {
	for id, r := range e.leases {
		if now.After(r.deadline) {
			delete(e.leases, id)
			r.st.running--
			if w := e.workers[r.worker]; w != nil {
				w.lost++
			}
			e.log.Warn("lease expired without a heartbeat; its block goes to another run", "lease", id, "stage", r.st.node.Name,
				"block", r.lease.Inputs[0].Name, "worker", r.worker)
			// It counts as an attempt: a block that kills every worker
			// that takes it ends FAULTY instead of killing them all.
			why := fmt.Sprintf("worker %s stopped answering during this run (lease expired): it crashed, hung or lost the network", r.worker)
			if faulty, err := e.db.FailRun(state.Run{Group: r.group, Reserver: id, Inputs: r.lease.Inputs, Carry: r.carryUpdate(nil)}, why, e.cfg.MaxAttempts, now); err == nil && faulty {
				e.log.Error("block set aside as faulty: every attempt's worker stopped answering", "stage", r.st.node.Name, "block", r.lease.Inputs[0].Name)
			}
		}
	}
}

// LeaseCarry is the state a leased run of a sequential stage goes on
// from.
type LeaseCarry struct {
	In    []byte `json:"in,omitempty"`
	Gap   bool   `json:"gap,omitempty"`
	Final bool   `json:"final,omitempty"`
}

// carryUpdate is how a remote run's commit or failure moves its site's
// carry.
func (r *remoteRun) carryUpdate(out []byte) *state.CarryUpdate {
	if r.cin == nil {
		return nil
	}
	return &state.CarryUpdate{Instance: r.cin.Instance, Seq: r.lease.Inputs[0].Seq, State: out, Late: !r.cin.Carried}
}

// leasePrefix starts the reserver of a remote run.
const leasePrefix = "lease-"

// needsMissing reports whether a stage runs an executable the worker lacks.
func needsMissing(n *pipeline.Node, missing []string) bool {
	for _, s := range n.Program.Steps {
		if len(s.Argv) > 0 && slices.Contains(missing, s.Argv[0]) {
			return true
		}
	}
	return false
}

// Lease gives a worker a stage run: of the block stages it can run, the
// one furthest below its backlog-proportional share of all slots, local
// and remote. It returns false when there is nothing to do.
func (e *Engine) Lease(ctx context.Context, h Hello) (Lease, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.cfg.Now()
	w := e.workers[h.Worker]
	if w == nil {
		w = &worker{}
		e.workers[h.Worker] = w
		e.log.Info("worker joined", "worker", h.Worker, "host", h.Host, "slots", h.Slots)
	}
	w.hello, w.lastSeen = h, now
	e.expireLeases(now)
	held := 0
	for _, r := range e.leases {
		if r.worker == h.Worker {
			held++
		}
	}
	if held >= h.Slots {
		return Lease{}, false, nil
	}
	var cands []*graphStage
	for _, st := range e.stages {
		if st.win != nil || st.stream != nil || st.node.Abstraction != pipeline.Block && st.node.Abstraction != "" || st.suspended != "" {
			continue
		}
		if h.Stages != "" {
			if ok, _ := path.Match(h.Stages, st.node.Name); !ok {
				continue
			}
		}
		if needsMissing(st.node, h.Missing) {
			continue
		}
		cands = append(cands, st)
	}
	sort.Slice(cands, func(i, j int) bool {
		di, dj := cands[i].target-cands[i].running, cands[j].target-cands[j].running
		if di != dj {
			return di > dj
		}
		return cands[i].backlog > cands[j].backlog
	})
	for _, st := range cands {
		if st.running >= max(st.target, 1) && st.backlog == 0 {
			continue
		}
		id := leasePrefix + uuid.NewString()[:12]
		res, cin, ok, err := e.reserve(st, id, h.Worker, e.cfg.LeaseTTL)
		part := ""
		if err == nil && !ok && st.edged && e.remotePartsOf(st.group, h.Worker) < max(2*h.Slots, 2) {
			// The sites' next blocks are all taken: read a later one
			// apart from its neighbours, for its turn.
			res, ok, err = e.db.ReservePart(st.node.Inputs[0], st.group, id, e.cfg.LeaseTTL)
			cin = nil
			if ok {
				part = fmt.Sprintf("%s/%s/%d", h.Worker, st.group, res.Blocks[0].Serial)
			}
		}
		if err != nil {
			return Lease{}, false, err
		}
		if !ok {
			continue
		}
		st.running++
		st.backlog = max(st.backlog-1, 0)
		l := Lease{ID: id, Stage: st.node.Name, Program: st.node.Program, Inputs: res.Blocks, Outputs: st.node.Outputs,
			Timeout: e.timeout(st.node), TTL: e.cfg.LeaseTTL, Network: st.node.Network}
		l.Trusted, l.Programs = st.trusted, leasePrograms(st.steps)
		var in int64
		for _, b := range res.Blocks {
			in += b.Size
		}
		l.OutputLimit = OutputLimit(in, e.cfg.MaxExpansion, e.cfg.MaxOutput)
		l.Part = part
		if k := (partKey{st.group, res.Blocks[0].Serial}); part == "" && st.edged {
			if rp, ok := e.remoteParts[k]; ok && rp.worker == h.Worker {
				l.Held = rp.name
			}
			delete(e.remoteParts, k) // its turn is taken
		}
		if cin != nil {
			l.Sequential = true
			if err := e.loadCarry(ctx, cin); err != nil {
				e.db.ReleaseRun(state.Run{Group: st.group, Reserver: id, Inputs: res.Blocks})
				return Lease{}, false, err
			}
			if cin.Carried {
				l.Carry = &LeaseCarry{In: cin.State, Gap: cin.Gap, Final: res.Blocks[0].Final}
			}
		}
		e.leases[id] = &remoteRun{cin: cin, attempt: res.Attempt, lease: l, st: st, worker: h.Worker, group: st.group, deadline: now.Add(e.cfg.LeaseTTL), start: now}
		return l, true, nil
	}
	return Lease{}, false, nil
}

// ErrNotScheduling: what was asked lives in the memory of the server
// that schedules (window trackers, leases), and another does.
var ErrNotScheduling = errors.New("this server " + flight.NotScheduling + "; another server sharing its metadata does")

// Scheduling reports whether Run runs: this server schedules stage runs,
// and leases them to workers.
func (e *Engine) Scheduling() bool { return e.scheduling.Load() }

// StagesChanged returns a channel closed when the engine's stages next
// change: a worker waiting for a lease has new work to look at.
func (e *Engine) StagesChanged() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.graphChanged == nil {
		e.graphChanged = make(chan struct{})
	}
	return e.graphChanged
}

// Heartbeat keeps a lease and its inputs' reservations alive.
func (e *Engine) Heartbeat(id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.cfg.Now()
	e.expireLeases(now)
	r := e.leases[id]
	if r == nil {
		return ErrLeaseGone
	}
	if err := e.db.Extend(r.lease.Inputs, r.group, id, e.cfg.LeaseTTL); err != nil {
		return ErrLeaseGone
	}
	r.deadline = now.Add(e.cfg.LeaseTTL)
	if w := e.workers[r.worker]; w != nil {
		w.lastSeen = now
	}
	return nil
}

// Staged reports whether a lease may stage a block as one of its outputs:
// the lease is live, the queue is an output, and the name is the input's
// with that queue.
func (e *Engine) Staged(id string, n block.Name) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.leases[id]
	if r == nil || e.cfg.Now().After(r.deadline) {
		return ErrLeaseGone
	}
	in, err := block.Parse(r.lease.Inputs[0].Name)
	if err != nil {
		return err
	}
	in.Queue = n.Queue
	if !slices.Contains(r.lease.Outputs, n.Queue) || in.String() != n.String() {
		return fmt.Errorf("lease %s (stage %s on %s) makes no block %s", id, r.lease.Stage, r.lease.Inputs[0].Name, n)
	}
	return nil
}

// Output is one output a worker made, as it reports it at commit.
type Output struct {
	Queue  string `json:"queue"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// LeaseResult is what a worker reports when it commits a lease.
type LeaseResult struct {
	Outputs []Output
	CPU     time.Duration // what the run's programs used
	Carry   []byte        // a sequential stage's state for the site's next block
	// Parted: the run finished the first half the worker held
	// (Lease.Held), rather than running the block whole.
	Parted bool
	// Dropped counts what the run let go of, by reason (Drops).
	Dropped map[string]int64
	// Tally counts what the run saw (Tally), checked with CheckTally.
	Tally map[string]int64
}

// CommitLeasePart records that a part lease's first half is done and
// held by its worker, for the block's turn.
func (e *Engine) CommitLeasePart(id string, cpu time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.leases[id]
	if r == nil || r.lease.Part == "" {
		return ErrLeaseGone
	}
	delete(e.leases, id)
	r.st.running--
	defer e.poke()
	b := r.lease.Inputs[0]
	if err := e.db.CommitPart(state.Run{Group: r.group, Reserver: id, Inputs: r.lease.Inputs}, "worker:"+r.lease.Part); err != nil {
		if errors.Is(err, state.ErrLostReservation) {
			return ErrLeaseGone
		}
		return err
	}
	if e.remoteParts == nil {
		e.remoteParts = map[partKey]remotePart{}
	}
	e.remoteParts[partKey{r.group, b.Serial}] = remotePart{worker: r.worker, name: r.lease.Part, at: e.cfg.Now()}
	return nil
}

// CommitLease publishes a lease's outputs (staged before) and releases
// its inputs in one transaction. A lease that expired is refused: its
// block may be running elsewhere already, and only one run publishes.
func (e *Engine) CommitLease(ctx context.Context, id string, res LeaseResult) error {
	outs, cpu, carry := res.Outputs, res.CPU, res.Carry
	e.mu.Lock()
	r := e.leases[id]
	e.mu.Unlock()
	if r == nil {
		return ErrLeaseGone
	}
	name, err := block.Parse(r.lease.Inputs[0].Name)
	if err != nil {
		return err
	}
	var blocks []state.Block
	for _, q := range r.lease.Outputs {
		i := slices.IndexFunc(outs, func(o Output) bool { return o.Queue == q })
		if i < 0 {
			return fmt.Errorf("lease %s: no output for queue %s", id, q)
		}
		sum, err := blob.ParseSum(outs[i].SHA256)
		if err != nil {
			return err
		}
		on := name
		on.Queue = q
		key := blob.BlockKey(on, sum)
		info, err := e.store.Stat(ctx, key)
		if err != nil || info.Size != outs[i].Size {
			return fmt.Errorf("lease %s: output %s was not staged whole (%v); upload it before committing", id, on, err)
		}
		blocks = append(blocks, state.Block{Name: on.String(), Queue: q, Instance: on.Instance, Seq: on.Seq, Time: on.Time,
			Size: outs[i].Size, SHA256: outs[i].SHA256, Key: key})
	}
	cu := r.carryUpdate(carry)
	if err := e.storeCarry(ctx, r.group, cu); err != nil {
		return err
	}
	_, err = e.db.CommitRun(state.Run{Group: r.group, Reserver: id, Inputs: r.lease.Inputs, Outputs: passFinal(r.lease.Inputs, blocks), Carry: cu})
	e.carryCommitted(ctx, r.cin, cu, err == nil)
	e.mu.Lock()
	if e.leases[id] == r {
		delete(e.leases, id)
		r.st.running--
	}
	if w := e.workers[r.worker]; w != nil {
		if err == nil {
			w.done++
		} else {
			w.lost++
		}
	}
	e.mu.Unlock()
	e.poke()
	if errors.Is(err, state.ErrLostReservation) {
		return ErrLeaseGone
	}
	if err != nil {
		return err
	}
	var m runMeasure
	m.took, m.cpu, m.parted = e.cfg.Now().Sub(r.start), cpu, res.Parted && r.lease.Held != ""
	m.drops = res.Dropped
	for _, b := range r.lease.Inputs {
		m.in.Add(b.Size)
	}
	for _, b := range blocks {
		m.out += b.Size
	}
	m.inputEdges(r.lease.Inputs, blocks)
	r.st.count(&m, "ok")
	e.tallied(res.Tally)
	e.outputLatency(r.st.node.Name, r.lease.Inputs)
	e.afterCommit(ctx, r.lease.Inputs)
	return nil
}

// FailLease records a failed remote run like a local one: retried with
// backoff, FAULTY after the last attempt.
func (e *Engine) FailLease(id, why string) error {
	r := e.dropLease(id)
	if r == nil {
		return ErrLeaseGone
	}
	_, err := e.db.FailRun(state.Run{Group: r.group, Reserver: id, Inputs: r.lease.Inputs, Carry: r.carryUpdate(nil)}, why, e.cfg.MaxAttempts, e.cfg.Now().Add(e.backoff(r.attempt)))
	if errors.Is(err, state.ErrLostReservation) {
		return ErrLeaseGone
	}
	return err
}

// Workers lists the workers seen lately.
func (e *Engine) Workers() []WorkerInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.cfg.Now()
	e.remoteSlots(now)
	var out []WorkerInfo
	for id, w := range e.workers {
		wi := WorkerInfo{Worker: id, Host: w.hello.Host, Slots: w.hello.Slots, LastSeen: w.lastSeen, Done: w.done, Lost: w.lost, Runs: []string{}}
		for _, r := range e.leases {
			if r.worker == id {
				wi.Runs = append(wi.Runs, r.lease.Stage+": "+r.lease.Inputs[0].Name)
			}
		}
		slices.Sort(wi.Runs)
		out = append(out, wi)
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.Worker, b.Worker) })
	return out
}

// Port is one named input or output of a program run on a worker.
type Port struct {
	Queue string
	R     io.Reader // inputs
	W     io.Writer // outputs
}

// leasePrograms are the registered programs among a stage's steps, as a
// worker needs them to resolve the program as the server did.
func leasePrograms(steps []step) map[string]LeaseProgram {
	var progs map[string]LeaseProgram
	for _, st := range steps {
		if st.sha256 == "" {
			continue
		}
		if progs == nil {
			progs = map[string]LeaseProgram{}
		}
		progs[st.name] = LeaseProgram{SHA256: st.sha256, Network: st.network}
	}
	return progs
}

// Runner runs leased stage programs on a worker with the same code and
// the same confinement as the server's own runs.
type Runner struct {
	Registry *stage.Registry
	// Sandbox confines executables; without one they run only when
	// Unconfined says so.
	Sandbox    *sandbox.Sandbox
	Unconfined bool
	// Programs is the directory holding registered programs, each in a
	// file named by its SHA-256 (as the server keeps them), which an
	// admin puts there when installing the worker.
	Programs string

	verified sync.Map // SHA-256 → true, once a file was checked
}

// Lacks names the first executable of a lease this machine cannot run,
// or "" when it can run them all.
func (r *Runner) Lacks(l Lease) string {
	for _, st := range l.Program.Steps {
		if len(st.Argv) == 0 {
			continue
		}
		if r.Sandbox == nil && !r.Unconfined {
			return st.Argv[0] // it could not run confined here
		}
		if p, ok := l.Programs[st.Argv[0]]; ok {
			if _, _, err := r.program(st.Argv[0], p); err != nil {
				return st.Argv[0]
			}
			continue
		}
		if _, err := exec.LookPath(st.Argv[0]); err != nil {
			return st.Argv[0]
		}
	}
	return ""
}

// program finds a registered program's copy and checks its checksum (once
// per file).
func (r *Runner) program(name string, p LeaseProgram) (state.Program, bool, error) {
	if r.Programs == "" {
		return state.Program{}, false, fmt.Errorf("program %s is registered on the server; this worker has no --programs directory", name)
	}
	path := filepath.Join(r.Programs, strings.ToLower(p.SHA256))
	if _, ok := r.verified.Load(p.SHA256); !ok {
		f, err := os.Open(path)
		if err != nil {
			return state.Program{}, false, fmt.Errorf("program %s: %w; copy the server's program with SHA-256 %s there", name, err, p.SHA256)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return state.Program{}, false, err
		}
		if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, p.SHA256) {
			return state.Program{}, false, fmt.Errorf("program %s: %s has SHA-256 %s, not the registered %s", name, path, got, p.SHA256)
		}
		r.verified.Store(p.SHA256, true)
	}
	return state.Program{Name: name, Path: path, SHA256: p.SHA256, Network: p.Network}, true, nil
}

// Run runs a leased stage program over inputs into outputs, its
// built-ins given in, executables in a directory of their own under
// scratch. It returns the tail of the programs' stderr and the CPU they
// used (busy time for built-ins).
func (r *Runner) Run(ctx context.Context, l Lease, in stage.Input, ins, outs []Port, scratch string) (stderr string, cpu time.Duration, err error) {
	steps, err := r.steps(l)
	if err != nil {
		return "", 0, err
	}
	var pin, pout []port
	for _, i := range ins {
		pin = append(pin, port{queue: i.Queue, r: i.R})
	}
	for _, o := range outs {
		pout = append(pout, port{queue: o.Queue, w: o.W})
	}
	x := &confinement{sb: r.Sandbox, unconfined: r.Unconfined, network: l.Network}
	res, err := execute(ctx, in, x, steps, pin, pout, scratch)
	return res.stderr, res.cpu, err
}

// steps resolves a lease's program as the server did.
func (r *Runner) steps(l Lease) ([]step, error) {
	lookup := func(n string) (state.Program, bool, error) {
		p, ok := l.Programs[n]
		if !ok {
			return state.Program{}, false, nil
		}
		return r.program(n, p)
	}
	return resolve(r.Registry, lookup, l.Program, l.Trusted)
}

// Start runs the first half of a part lease's run (Lease.Part): the
// stage's edged built-in reads the block on its own. The worker holds
// the Part, with out, for the block's turn (Lease.Held), when Finish
// writes the rest; it returns the CPU (busy time) the half took.
func (r *Runner) Start(ctx context.Context, l Lease, in stage.Input, rd io.Reader, out io.Writer) (stage.Part, time.Duration, error) {
	steps, err := r.steps(l)
	if err != nil {
		return nil, 0, err
	}
	var ed stage.Edged
	if len(steps) == 1 {
		ed, _ = steps[0].builtin.(stage.Edged)
	}
	if ed == nil {
		return nil, 0, fmt.Errorf("lease %s: stage %s does not run in parts (%s)", l.ID, l.Stage, l.Program)
	}
	began := time.Now()
	p, err := stage.Start(ctx, ed, in, rd, out)
	return p, time.Since(began), err
}

// ReleaseLease gives a lease's run back at once without counting an
// attempt: the worker cannot run the stage (it lacks a program).
func (e *Engine) ReleaseLease(id string) error {
	r := e.dropLease(id)
	if r == nil {
		return ErrLeaseGone
	}
	for _, b := range r.lease.Inputs {
		if err := e.db.Unreserve(b.Queue, r.group, id, b.Serial); err != nil {
			return err
		}
	}
	return nil
}

// dropLease forgets a live lease and frees its stage's slot; nil when it
// was not live.
func (e *Engine) dropLease(id string) *remoteRun {
	e.mu.Lock()
	r := e.leases[id]
	if r != nil {
		delete(e.leases, id)
		r.st.running--
	}
	e.mu.Unlock()
	if r != nil {
		e.poke()
	}
	return r
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/stage/program"

	"github.com/google/uuid"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/pipeline"
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

type worker struct {
	hello    flight.Hello
	lastSeen time.Time
	done     int64
	lost     int64
}

type remoteRun struct {
	cin      *state.CarryIn // a sequential stage's
	attempt  int
	lease    flight.Lease
	inputs   []state.Block // the lease's, as the metadata keeps them
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
				"block", r.inputs[0].Name, "worker", r.worker)
			// It counts as an attempt: a block that kills every worker
			// that takes it ends FAULTY instead of killing them all.
			why := fmt.Sprintf("worker %s stopped answering during this run (lease expired): it crashed, hung or lost the network", r.worker)
			if faulty, err := e.db.FailRun(state.Run{Group: r.group, Reserver: id, Inputs: r.inputs, Carry: r.carryUpdate(nil)}, why, e.cfg.MaxAttempts, now); err == nil && faulty {
				e.log.Error("block set aside as faulty: every attempt's worker stopped answering", "stage", r.st.node.Name, "block", r.inputs[0].Name)
			}
		}
	}
}

// carryUpdate is how a remote run's commit or failure moves its site's
// carry.
func (r *remoteRun) carryUpdate(out []byte) *state.CarryUpdate {
	if r.cin == nil {
		return nil
	}
	return &state.CarryUpdate{Instance: r.cin.Instance, Seq: r.inputs[0].Seq, State: out, Late: !r.cin.Carried}
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
func (e *Engine) Lease(ctx context.Context, h flight.Hello) (flight.Lease, bool, error) {
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
		return flight.Lease{}, false, nil
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
			return flight.Lease{}, false, err
		}
		if !ok {
			continue
		}
		st.running++
		st.backlog = max(st.backlog-1, 0)
		l := flight.Lease{ID: id, Stage: st.node.Name, Program: st.node.Program, Inputs: res.Blocks, Outputs: st.node.Outputs,
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
				return flight.Lease{}, false, err
			}
			if cin.Carried {
				l.Carry = &flight.LeaseCarry{In: cin.State, Gap: cin.Gap, Final: res.Blocks[0].Final}
			}
		}
		e.leases[id] = &remoteRun{cin: cin, attempt: res.Attempt, lease: l, inputs: res.Blocks, st: st, worker: h.Worker, group: st.group, deadline: now.Add(e.cfg.LeaseTTL), start: now}
		return l, true, nil
	}
	return flight.Lease{}, false, nil
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
	if err := e.db.Extend(r.inputs, r.group, id, e.cfg.LeaseTTL); err != nil {
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
	in, err := block.Parse(r.inputs[0].Name)
	if err != nil {
		return err
	}
	in.Queue = n.Queue
	if !slices.Contains(r.lease.Outputs, n.Queue) || in.String() != n.String() {
		return fmt.Errorf("lease %s (stage %s on %s) makes no block %s", id, r.lease.Stage, r.inputs[0].Name, n)
	}
	return nil
}

// LeaseResult is what a worker reports when it commits a lease.
type LeaseResult struct {
	Outputs []flight.LeaseOutput
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
	b := r.inputs[0]
	if err := e.db.CommitPart(state.Run{Group: r.group, Reserver: id, Inputs: r.inputs}, "worker:"+r.lease.Part); err != nil {
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
	name, err := block.Parse(r.inputs[0].Name)
	if err != nil {
		return err
	}
	var blocks []state.Block
	for _, q := range r.lease.Outputs {
		i := slices.IndexFunc(outs, func(o flight.LeaseOutput) bool { return o.Queue == q })
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
	_, err = e.db.CommitRun(state.Run{Group: r.group, Reserver: id, Inputs: r.inputs, Outputs: passFinal(r.inputs, blocks), Carry: cu})
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
	for _, b := range r.inputs {
		m.in.Add(b.Size)
	}
	for _, b := range blocks {
		m.out += b.Size
	}
	m.inputEdges(r.inputs, blocks)
	r.st.count(&m, "ok")
	e.tallied(res.Tally)
	e.outputLatency(r.st.node.Name, r.inputs)
	e.afterCommit(ctx, r.inputs)
	return nil
}

// FailLease records a failed remote run like a local one: retried with
// backoff, FAULTY after the last attempt.
func (e *Engine) FailLease(id, why string) error {
	r := e.dropLease(id)
	if r == nil {
		return ErrLeaseGone
	}
	_, err := e.db.FailRun(state.Run{Group: r.group, Reserver: id, Inputs: r.inputs, Carry: r.carryUpdate(nil)}, why, e.cfg.MaxAttempts, e.cfg.Now().Add(e.backoff(r.attempt)))
	if errors.Is(err, state.ErrLostReservation) {
		return ErrLeaseGone
	}
	return err
}

// Workers lists the workers seen lately.
func (e *Engine) Workers() []flight.WorkerInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.cfg.Now()
	e.remoteSlots(now)
	var out []flight.WorkerInfo
	for id, w := range e.workers {
		wi := flight.WorkerInfo{Worker: id, Host: w.hello.Host, Slots: w.hello.Slots, LastSeen: w.lastSeen, Done: w.done, Lost: w.lost, Runs: []string{}}
		for _, r := range e.leases {
			if r.worker == id {
				wi.Runs = append(wi.Runs, r.lease.Stage+": "+r.inputs[0].Name)
			}
		}
		slices.Sort(wi.Runs)
		out = append(out, wi)
	}
	slices.SortFunc(out, func(a, b flight.WorkerInfo) int { return strings.Compare(a.Worker, b.Worker) })
	return out
}

// leasePrograms are the registered programs among a stage's steps, as a
// worker needs them to resolve the program as the server did.
func leasePrograms(steps []program.Step) map[string]flight.LeaseProgram {
	var progs map[string]flight.LeaseProgram
	for _, st := range steps {
		if st.SHA256 == "" {
			continue
		}
		if progs == nil {
			progs = map[string]flight.LeaseProgram{}
		}
		progs[st.Name] = flight.LeaseProgram{SHA256: st.SHA256, Network: st.Network}
	}
	return progs
}

// ReleaseLease gives a lease's run back at once without counting an
// attempt: the worker cannot run the stage (it lacks a program).
func (e *Engine) ReleaseLease(id string) error {
	r := e.dropLease(id)
	if r == nil {
		return ErrLeaseGone
	}
	for _, b := range r.inputs {
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

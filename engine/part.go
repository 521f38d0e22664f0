package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/plumb-dev/plumb/stage/program"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/internal/countio"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
)

// An edged stage's run on a block goes in two halves. The first (a
// part run) reads the block on its own, at any time and on any free
// slot, so one site's blocks keep every slot busy; its Part is held
// here, with its output file half written, and the delivery says so
// (state.DB.CommitPart). The second half is the block's turn in its
// site's sequence (state.DB.ReserveNext): it finishes the part from the
// site's carry, which is cheap, and publishes. A part lost with its
// process, or never made, is no loss: the turn then runs the block whole.

// heldPart is the first half of a run, waiting for the block's turn.
type heldPart struct {
	part    stage.Part
	scratch string
	files   []*program.HashFile
	name    block.Name
	cpu     time.Duration
	in      int64
}

type partKey struct {
	group  string
	serial uint64
}

// parts holds the parts of a process.
type parts struct {
	mu sync.Mutex
	m  map[partKey]*heldPart
}

// maxHeldParts bounds the parts a stage holds at once: each holds its
// block's edge (bounded by the built-in's budget) and an open output.
func (e *Engine) maxHeldParts() int { return max(2*e.localSlots(), 2) }

// held counts the parts a stage holds.
func (p *parts) held(group string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k := range p.m {
		if k.group == group {
			n++
		}
	}
	return n
}

func (p *parts) put(k partKey, hp *heldPart) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[partKey]*heldPart{}
	}
	if old := p.m[k]; old != nil {
		old.discard(nil)
	}
	p.m[k] = hp
}

// take removes and returns the part held for k, if any.
func (p *parts) take(k partKey) *heldPart {
	p.mu.Lock()
	defer p.mu.Unlock()
	hp := p.m[k]
	delete(p.m, k)
	return hp
}

// drop lets go of every part of a group ("" for all).
func (p *parts) drop(group string, s *scratchSet) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, hp := range p.m {
		if group == "" || k.group == group {
			hp.discard(s)
			delete(p.m, k)
		}
	}
}

// discard ends a part unfinished and removes its scratch space.
func (hp *heldPart) discard(s *scratchSet) {
	stage.Discard(hp.part)
	hp.closeFiles()
	if s != nil {
		s.done(hp.scratch)
	} else {
		os.RemoveAll(hp.scratch)
	}
}

// partName is what a delivery records of a part this process holds.
func (e *Engine) partName(serial uint64) string {
	return e.boot + "/" + strconv.FormatUint(serial, 10)
}

// runPart runs the first half of an edged stage's run on a reserved
// block and holds it for the block's turn. Like runBlock, it returns an
// error only for trouble with the engine itself.
func (e *Engine) runPart(ctx context.Context, st *graphStage, spec runSpec, res state.Reservation, reserver string) error {
	inputs := res.Blocks
	run := state.Run{Group: st.group, Reserver: reserver, Inputs: inputs}
	start := e.cfg.Now()
	m := runMeasure{wait: start.Sub(inputs[0].Arrived)}
	hp, err := e.startPart(ctx, spec, inputs[0], &m)
	m.took = e.cfg.Now().Sub(start)
	if ctx.Err() != nil && e.ctx.Err() != nil {
		if hp != nil {
			hp.discard(&e.scratch)
		}
		if err := e.db.ReleaseRun(run); err != nil && !errors.Is(err, state.ErrLostReservation) {
			e.log.Warn("releasing a run stopped by the shutdown; the next start counts it as an attempt", "stage", spec.node.Name, "block", inputs[0].Name, "err", err)
		}
		return nil
	}
	if err != nil {
		return e.failRun(st, spec, run, res, err, program.Outcome{}, &m)
	}
	k := partKey{st.group, inputs[0].Serial}
	e.parts.put(k, hp) // before the commit: the block's turn may come at once
	err = e.inject(StepFirstHalf, inputs[0].Name)
	if err == nil {
		err = e.db.CommitPart(run, e.partName(inputs[0].Serial))
	}
	if err != nil {
		if hp := e.parts.take(k); hp != nil {
			hp.discard(&e.scratch)
		}
		if errors.Is(err, state.ErrLostReservation) {
			st.count(&m, "lost")
			return nil
		}
		// An attempt like any other: a block whose first half can never
		// be recorded ends FAULTY instead of holding its site.
		return e.failRun(st, spec, run, res, fmt.Errorf("record the first half of the run: %w", err), program.Outcome{}, &m)
	}
	return nil
}

// startPart opens a block and its outputs and starts the stage's
// built-in on it. Whatever it fails at, it leaves nothing open and no
// scratch behind.
func (e *Engine) startPart(ctx context.Context, spec runSpec, b state.Block, m *runMeasure) (*heldPart, error) {
	if t := e.timeout(spec.node); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t, program.ErrTimeout)
		defer cancel()
	}
	name, err := block.Parse(b.Name)
	if err != nil {
		return nil, fmt.Errorf("input block name %s: %w", b.Name, err)
	}
	scratch, err := e.makeScratch(b.Name)
	if err != nil {
		return nil, err
	}
	hp := &heldPart{scratch: scratch, name: name}
	ok := false
	defer func() {
		if !ok {
			hp.closeFiles()
			e.scratch.done(scratch)
		}
	}()
	rc, err := e.openInput(ctx, b)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	f, err := os.CreateTemp(scratch, "out-")
	if err != nil {
		return nil, fmt.Errorf("an output file for block %s: %w (is %s writable?)", b.Name, err, e.cfg.Scratch)
	}
	hf := program.NewHashFile(f)
	hf.Limit = OutputLimit(b.Size, e.cfg.MaxExpansion, e.cfg.MaxOutput)
	hp.files = []*program.HashFile{hf}
	if err := e.inject(StepStart, b.Name); err != nil {
		return nil, err
	}
	began := time.Now()
	part, err := stage.Start(ctx, spec.steps[0].Builtin.(stage.Edged), stage.Input{Block: name}, &countio.Reader{R: rc, N: &m.in}, hf)
	hp.cpu = time.Since(began)
	m.cpu = hp.cpu
	hp.in = m.in.Load()
	if lerr := overLimit(hp.files); lerr != nil {
		if part != nil {
			stage.Discard(part)
		}
		return nil, lerr
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), program.ErrTimeout) {
			err = fmt.Errorf("killed after its timeout: %w", program.ErrTimeout)
		}
		return nil, err
	}
	hp.part = part
	ok = true
	return hp, nil
}

// closeFiles closes a part's output files.
func (hp *heldPart) closeFiles() {
	for _, f := range hp.files {
		f.F.Close()
	}
}

// finishPart finishes a held part from the site's carry and stores its
// output: the second half of the run. Its scratch goes whatever happens.
func (e *Engine) finishPart(ctx context.Context, spec runSpec, hp *heldPart, in stage.Input, m *runMeasure) ([]state.Block, error) {
	defer func() {
		hp.closeFiles()
		e.scratch.done(hp.scratch)
	}()
	if t := e.timeout(spec.node); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t, program.ErrTimeout)
		defer cancel()
	}
	m.in.Store(hp.in)
	if err := e.inject(StepJoin, hp.name.String()); err != nil {
		stage.Discard(hp.part)
		return nil, err
	}
	in.Block = hp.name
	began := time.Now()
	err := stage.Finish(ctx, hp.part, in)
	m.cpu = hp.cpu + time.Since(began)
	if lerr := overLimit(hp.files); lerr != nil {
		err = lerr
	}
	if err != nil {
		return nil, err
	}
	blocks, out, err := e.storeOutputs(ctx, hp.name, spec.node.Outputs, hp.files)
	m.out += out
	return blocks, err
}

// Remote workers read blocks apart too. A part lease (Lease.Part) runs
// only the first half, which the worker holds; the block's turn is
// leased to that worker (Lease.Held), which finishes it, or runs the
// block whole if it no longer holds the part. While the holder is alive
// and the part is recent, no one else takes the block's turn; after
// partWait anyone runs it whole, so a busy or vanished holder delays its
// site by at most that.

// partWait is how long a block's turn waits for the holder of its first
// half.
const partWait = LeaseTTL

// remotePart is a first half a remote worker holds.
type remotePart struct {
	worker string
	name   string // Lease.Part
	at     time.Time
}

// heldElsewhere reports whether a block's first half is held by someone
// other than worker ("" for this process) who will finish it soon.
// Called with e.mu.
func (e *Engine) heldElsewhere(k partKey, worker string, now time.Time) bool {
	if worker != "" && e.parts.has(k) {
		return true // this process holds it and has slots to finish it
	}
	rp, ok := e.remoteParts[k]
	if !ok || rp.worker == worker {
		return false
	}
	w := e.workers[rp.worker]
	return w != nil && now.Sub(w.lastSeen) <= workerGone && now.Sub(rp.at) < partWait
}

// remotePartsOf counts the parts a worker holds for a stage. Called with
// e.mu.
func (e *Engine) remotePartsOf(group, worker string) int {
	n := 0
	for k, rp := range e.remoteParts {
		if k.group == group && rp.worker == worker {
			n++
		}
	}
	return n
}

// dropRemoteParts forgets the parts held for a stage that left the
// graph; the workers let them go as newer ones push them out. Called
// with e.mu.
func (e *Engine) dropRemoteParts(group string) {
	for k := range e.remoteParts {
		if k.group == group {
			delete(e.remoteParts, k)
		}
	}
}

// has reports whether a part is held for k.
func (p *parts) has(k partKey) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.m[k]
	return ok
}

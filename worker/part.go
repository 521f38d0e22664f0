package worker

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/program"
)

// A worker reads a site's blocks apart from their neighbours as the
// server does (stage.Edged): a part lease runs the first half and the
// worker holds it; the server leases the block's turn back to this
// worker, which finishes it from the site's carry. A part lost with the
// worker, or pushed out by newer ones, is no loss: the turn then runs
// the block whole.

// heldPart is the first half of a run, waiting for its block's turn.
type heldPart struct {
	part stage.Part
	name block.Name // the block it reads
	outs []*output
	cpu  time.Duration
}

// discard lets the part go unfinished and removes its output files.
func (hp *heldPart) discard() {
	stage.Discard(hp.part)
	closeOutputs(hp.outs)
}

func closeOutputs(outs []*output) {
	for _, o := range outs {
		o.F.Close()
		os.Remove(o.F.Name())
	}
}

// parts are the first halves a worker holds, oldest first.
type parts struct {
	mu    sync.Mutex
	m     map[string]*heldPart
	order []string
}

// hold keeps a part under name, letting the oldest go past max.
func (p *parts) hold(name string, hp *heldPart, max int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*heldPart{}
	}
	if old := p.m[name]; old != nil {
		old.discard()
	}
	p.m[name] = hp
	p.order = append(p.order, name)
	for len(p.m) > max && len(p.order) > 0 {
		oldest := p.order[0]
		p.order = p.order[1:]
		if old := p.m[oldest]; old != nil && oldest != name {
			old.discard()
			delete(p.m, oldest)
		}
	}
}

// take removes and returns the part held under name, or nil.
func (p *parts) take(name string) *heldPart {
	p.mu.Lock()
	defer p.mu.Unlock()
	hp := p.m[name]
	delete(p.m, name)
	if hp != nil {
		for i, n := range p.order {
			if n == name {
				p.order = append(p.order[:i], p.order[i+1:]...)
				break
			}
		}
	}
	return hp
}

// drop lets every part go.
func (p *parts) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, hp := range p.m {
		hp.discard()
	}
	p.m, p.order = nil, nil
}

// runPart runs a part lease's first half and holds it.
func (w *Worker) runPart(ctx context.Context, l flight.Lease) string {
	log := w.cfg.Log.With("lease", l.ID, "stage", l.Stage, "block", l.Inputs[0].Name)
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var hb sync.WaitGroup
	defer hb.Wait()
	hb.Go(func() { w.heartbeat(rctx, cancel, l) })
	defer cancel(nil) // stops the heartbeat before hb.Wait
	var (
		part stage.Part
		read block.Name
		cpu  time.Duration
	)
	outs, err := w.withPorts(rctx, l, func(ctx context.Context, name block.Name, ins, outs []program.Port, _ string) (err error) {
		if len(ins) != 1 || len(outs) != 1 {
			return errors.New("a stage run in parts reads one input and writes one output")
		}
		read = name
		part, cpu, err = w.cfg.Runner.Start(ctx, l, stage.Input{Block: name}, ins[0].R, outs[0].W)
		return err
	})
	if err != nil || rctx.Err() != nil {
		if part != nil {
			stage.Discard(part)
		}
		closeOutputs(outs)
	}
	if cause := context.Cause(rctx); errors.Is(cause, errLeaseGone) {
		log.Warn("lease lost while reading a block apart; the run was given to another worker", "err", err)
		return "lost"
	}
	if ctx.Err() != nil {
		return "stopped"
	}
	if err != nil {
		log.Warn("stage run (first half) failed", "err", err)
		if ferr := w.client().Do(ctx, flight.ActFailLease, flight.LeaseRequest{Lease: l.ID, Error: err.Error()}, nil); ferr != nil {
			log.Warn("could not report the failure; the lease will expire", "err", ferr)
		}
		return "failed"
	}
	// Held before the commit: the block's turn may come at once.
	w.parts.hold(l.Part, &heldPart{part: part, name: read, outs: outs, cpu: cpu}, max(2*w.cfg.Slots, 2))
	err = w.client().Do(ctx, flight.ActCommitLease, flight.LeaseRequest{Lease: l.ID, Part: true, CPUSeconds: cpu.Seconds()}, nil)
	if err != nil {
		if hp := w.parts.take(l.Part); hp != nil {
			hp.discard()
		}
		if status.Code(err) == codes.FailedPrecondition {
			log.Warn("commit refused: the lease expired and the run went to another worker", "err", err)
		} else {
			log.Warn("commit failed; the lease will expire and the run go elsewhere", "err", err)
		}
		return "lost"
	}
	log.Debug("first half held for the block's turn")
	return "parted"
}

// finish finishes a held part from the carry: the rest of the run.
func (w *Worker) finish(ctx context.Context, l flight.Lease, hp *heldPart, in stage.Input) ([]*output, time.Duration, error) {
	if l.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.Timeout)
		defer cancel()
	}
	began := time.Now()
	in.Block = hp.name
	err := stage.Finish(ctx, hp.part, in) // a part that fails is discarded
	cpu := hp.cpu + time.Since(began)
	return hp.outs, cpu, err
}

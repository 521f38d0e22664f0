package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/plumb-dev/plumb/stage/program"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/internal/countio"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
)

// runBlock runs a block stage over one reserved set of inputs and
// publishes the result. It returns an error only for trouble with the
// engine itself (metadata, store); a failing program is recorded on the
// block.
func (e *Engine) runBlock(ctx context.Context, st *graphStage, spec runSpec, res state.Reservation, reserver string, cin *state.CarryIn) error {
	inputs := res.Blocks
	run := state.Run{Group: st.group, Reserver: reserver, Inputs: inputs}
	in := stage.Input{Drops: &stage.Drops{}, Tally: &stage.Tally{}}
	if cin != nil {
		// A sequential stage: the run goes on from the site's carry, and
		// the carry moves with its commit; a late block runs on its own.
		run.Carry = &state.CarryUpdate{Instance: cin.Instance, Seq: inputs[0].Seq, Late: !cin.Carried}
		if err := e.loadCarry(ctx, cin); err != nil {
			return err // the server's own state: not the block's fault
		}
		if cin.Carried {
			in.Carry = &stage.Carry{In: cin.State, Gap: cin.Gap, Final: inputs[0].Final}
		}
	}
	start := e.cfg.Now()
	m := runMeasure{wait: start.Sub(inputs[0].Arrived)}
	var (
		outputs []state.Block
		out     program.Outcome
		err     error
	)
	if hp := e.parts.take(partKey{st.group, inputs[0].Serial}); hp != nil && cin != nil {
		// Its first half ran apart from its neighbours: only the rows
		// its edges complete are left.
		outputs, err = e.finishPart(ctx, spec, hp, in, &m)
		m.parted = true
	} else {
		if hp != nil {
			hp.discard(&e.scratch)
		}
		outputs, out, err = e.process(ctx, spec, in, inputs, &m)
	}
	m.took = e.cfg.Now().Sub(start)
	if ctx.Err() != nil && e.ctx.Err() != nil {
		// The server is stopping: the run was not the block's fault. A
		// reservation still held at the next start means a crash instead.
		if err := e.db.ReleaseRun(run); err != nil && !errors.Is(err, state.ErrLostReservation) {
			e.log.Warn("releasing a run stopped by the shutdown; the next start counts it as an attempt", "stage", spec.node.Name, "block", inputs[0].Name, "err", err)
		}
		return nil
	}
	if err == nil {
		run.Outputs = passFinal(inputs, outputs)
		if in.Carry != nil {
			run.Carry.State = in.Carry.Out
			if err = e.inject(StepEdgeStore, inputs[0].Name); err == nil {
				err = e.storeCarry(ctx, st.group, run.Carry)
			}
		}
		if err == nil {
			if err = e.inject(StepCommit, inputs[0].Name); err == nil {
				_, err = e.db.CommitRun(run)
			}
			e.carryCommitted(ctx, cin, run.Carry, err == nil)
		}
		if errors.Is(err, state.ErrLostReservation) {
			e.log.Warn("run finished after its reservation passed to another run; its result is dropped", "stage", spec.node.Name, "block", inputs[0].Name)
			st.count(&m, "lost")
			return nil
		}
		if err != nil {
			// A commit refused (a limit, the metadata) is an attempt too:
			// a block whose result can never be committed ends FAULTY
			// instead of holding its site for ever.
			return e.failRun(st, spec, run, res, fmt.Errorf("commit the run's result: %w", err), out, &m)
		}
		m.inputEdges(inputs, outputs)
		m.drops = in.Drops.Counts()
		st.count(&m, "ok")
		e.tallied(in.Tally.Counts())
		e.outputLatency(spec.node.Name, inputs)
		e.afterCommit(ctx, inputs)
		return nil
	}
	return e.failRun(st, spec, run, res, err, out, &m)
}

// failRun records a failed run: an attempt, retried after a backoff, or
// the block set aside as FAULTY once attempts are spent (at once for
// malformed input).
func (e *Engine) failRun(st *graphStage, spec runSpec, run state.Run, res state.Reservation, err error, out program.Outcome, m *runMeasure) error {
	inputs := run.Inputs
	if pe := (*stage.PanicError)(nil); errors.As(err, &pe) {
		e.log.Error("a built-in panicked: the run fails as an attempt and the server goes on; please report this with the block",
			"stage", spec.node.Name, "block", inputs[0].Name, "panic", pe.Value, "stack", string(pe.Stack))
	}
	why := err.Error()
	if out.Stderr != "" {
		why += "; stderr: " + out.Stderr
	}
	maxAttempts := e.cfg.MaxAttempts
	if isMalformed(err) {
		maxAttempts = 0 // retrying cannot help
	}
	attempt := res.Attempt
	retryAt := e.cfg.Now().Add(e.backoff(attempt))
	faulty, ferr := e.db.FailRun(run, why, maxAttempts, retryAt)
	switch {
	case errors.Is(ferr, state.ErrLostReservation):
		st.count(m, "lost")
	case ferr != nil:
		return fmt.Errorf("stage %s: record the failure on block %s: %w", spec.node.Name, inputs[0].Name, ferr)
	case faulty:
		st.count(m, "faulty")
		e.log.Error("block set aside as faulty; list with `plumb faulty`, requeue with `plumb retry`",
			"stage", spec.node.Name, "block", inputs[0].Name, "attempts", attempt, "err", err, "stderr", lastLine(out.Stderr))
	default:
		st.count(m, "failed")
		e.log.Warn("stage run failed; will retry", "stage", spec.node.Name, "block", inputs[0].Name,
			"attempt", attempt, "retry_at", retryAt, "err", err, "stderr", lastLine(out.Stderr))
	}
	return nil
}

// afterCommit deletes inputs that every subscriber is now done with, when
// their queue keeps blocks only until consumed. A failure here loses
// nothing: the block merely stays.
func (e *Engine) afterCommit(ctx context.Context, inputs []state.Block) {
	for _, b := range inputs {
		if !e.untilConsumed(b.Queue) {
			continue
		}
		gone, ok, err := e.db.DeleteConsumed(b.Queue, b.Serial)
		if err != nil {
			e.log.Warn("delete a consumed block", "block", b.Name, "err", err)
			continue
		}
		if ok {
			if err := e.store.Delete(ctx, gone.Key); err != nil {
				e.log.Warn("delete a consumed block's bytes; fsck will remove them", "block", b.Name, "err", err)
			}
		}
	}
}

// Acked lets the engine delete blocks a consumer group has just acked, when
// that was the last subscriber their queue kept them for.
func (e *Engine) Acked(ctx context.Context, ids []block.ID) {
	var bs []state.Block
	for _, id := range ids {
		if b, err := e.db.Lookup(id); err == nil {
			bs = append(bs, b)
		}
	}
	e.afterCommit(ctx, bs)
}

// untilConsumed reports whether a queue keeps its blocks only until every
// subscriber is done: a queue a stage produces without a retention.
// Source queues are kept until a retention says otherwise.
func (e *Engine) untilConsumed(queue string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, st := range e.stages {
		if slices.Contains(st.node.Outputs, queue) {
			return st.node.Retention == pipeline.UntilConsumed
		}
	}
	return false
}

// backoff is the wait before the next attempt: Backoff doubled per
// attempt made, capped at a minute.
func (e *Engine) backoff(attempts int) time.Duration {
	d := e.cfg.Backoff << max(attempts-1, 0)
	return min(d, time.Minute)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// runMeasure is what one run read, wrote and cost.
type runMeasure struct {
	in   atomic.Int64
	out  int64
	took time.Duration // processing time
	cpu  time.Duration
	wait time.Duration // from the input's arrival to the run's start
	// parted: the run finished a part read apart from its neighbours.
	parted bool
	// edges counts what went along each edge of the graph: the blocks read
	// from each input queue and written to each output queue.
	edgesIn, edgesOut map[string]EdgeCount
	drops             map[string]int64 // what the run let go of, by reason
}

// edges counts a committed run's inputs and outputs by queue; a window
// run's inputs all come from queue.
func (m *runMeasure) edges(queue string, inBlocks int, inBytes int64, outputs []state.Block) {
	if m.edgesIn == nil {
		m.edgesIn, m.edgesOut = map[string]EdgeCount{}, map[string]EdgeCount{}
	}
	c := m.edgesIn[queue]
	c.Blocks += int64(inBlocks)
	c.Bytes += inBytes
	m.edgesIn[queue] = c
	for _, b := range outputs {
		c := m.edgesOut[b.Queue]
		c.Blocks++
		c.Bytes += b.Size
		m.edgesOut[b.Queue] = c
	}
}

// inputEdges counts input blocks by their queue.
func (m *runMeasure) inputEdges(inputs, outputs []state.Block) {
	for i, b := range inputs {
		var outs []state.Block
		if i == 0 {
			outs = outputs
		}
		m.edges(b.Queue, 1, b.Size, outs)
	}
}

// process streams the inputs through the program into durable output
// blobs, and returns the output blocks to commit. in is the run's input
// but for its block, which process names from inputs.
func (e *Engine) process(ctx context.Context, spec runSpec, in stage.Input, inputs []state.Block, m *runMeasure) ([]state.Block, program.Outcome, error) {
	if t := e.timeout(spec.node); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t, program.ErrTimeout)
		defer cancel()
	}
	scratch, err := e.makeScratch(inputs[0].Name)
	if err != nil {
		return nil, program.Outcome{}, err
	}
	defer e.scratch.done(scratch)

	var ins []program.Port
	for _, b := range inputs {
		rc, err := e.openInput(ctx, b)
		if err != nil {
			return nil, program.Outcome{}, err
		}
		defer rc.Close()
		ins = append(ins, program.Port{Queue: b.Queue, R: &countio.Reader{R: rc, N: &m.in}})
	}
	var outs []program.Port
	var files []*program.HashFile
	var inBytes int64
	for _, b := range inputs {
		inBytes += b.Size
	}
	for _, q := range spec.node.Outputs {
		f, err := os.CreateTemp(scratch, "out-")
		if err != nil {
			return nil, program.Outcome{}, err
		}
		hf := program.NewHashFile(f)
		hf.Limit = OutputLimit(inBytes, e.cfg.MaxExpansion, e.cfg.MaxOutput)
		defer f.Close()
		files = append(files, hf)
		outs = append(outs, program.Port{Queue: q, W: hf})
	}
	name, err := block.Parse(inputs[0].Name)
	if err != nil {
		return nil, program.Outcome{}, fmt.Errorf("input block name %s: %w", inputs[0].Name, err)
	}
	in.Block = name
	if err := e.inject(StepStart, inputs[0].Name); err != nil {
		return nil, program.Outcome{}, err
	}
	res, err := program.Execute(ctx, in, e.confine(spec.node), spec.steps, ins, outs, scratch)
	m.cpu = res.CPU
	if lerr := overLimit(files); lerr != nil {
		err = lerr
	}
	if err != nil {
		return nil, res, err
	}
	blocks, out, err := e.storeOutputs(ctx, name, spec.node.Outputs, files)
	m.out += out
	if err != nil {
		return nil, res, err
	}
	return blocks, res, nil
}

// openInput opens an input block's bytes, making them again first when
// they were lost and the block is derived.
func (e *Engine) openInput(ctx context.Context, b state.Block) (io.ReadCloser, error) {
	if err := e.inject(StepOpen, b.Name); err != nil {
		return nil, fmt.Errorf("open input block %s: %w", b.Name, err)
	}
	rc, err := e.store.Open(ctx, b.Key)
	if errors.Is(err, blob.ErrNotFound) {
		if rerr := e.Recompute(ctx, b); rerr == nil {
			rc, err = e.store.Open(ctx, b.Key)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open input block %s: %w", b.Name, err)
	}
	return rc, nil
}

// storeOutputs stores each output of a run as a block named like name in
// its queue, and returns the blocks to commit and the bytes written.
func (e *Engine) storeOutputs(ctx context.Context, name block.Name, queues []string, files []*program.HashFile) ([]state.Block, int64, error) {
	var (
		blocks []state.Block
		bytes  int64
	)
	for i, q := range queues {
		hf := files[i]
		bytes += hf.N
		sum := hf.Sum()
		on := name
		on.Queue = q
		key := blob.BlockKey(on, sum)
		if _, err := hf.F.Seek(0, io.SeekStart); err != nil {
			return nil, bytes, err
		}
		err := e.inject(StepStore, on.String())
		if err == nil {
			err = e.store.Put(ctx, key, hf.F, hf.N, sum)
		}
		if err != nil {
			return nil, bytes, fmt.Errorf("store output block %s: %w", on, err)
		}
		blocks = append(blocks, state.Block{Name: on.String(), Queue: q, Instance: on.Instance, Seq: on.Seq, Time: on.Time,
			Size: hf.N, SHA256: sum.String(), Key: key})
	}
	return blocks, bytes, nil
}

// overLimit returns the error of the first output that passed its limit:
// whatever a program made of its failed write, that is why it failed.
func overLimit(files []*program.HashFile) error {
	for _, hf := range files {
		if hf.Over {
			return fmt.Errorf("%w: an output passed %d bytes, the most one run may write for its input; raise serve --max-expansion if the stage really expands this much", program.ErrOutputLimit, hf.Limit)
		}
	}
	return nil
}

// Output limits of one run, unless configured: Expansion times its
// input, at least MinOutputLimit and at most MaxOutputLimit.
const (
	Expansion      = 64
	MinOutputLimit = 256 << 20
	MaxOutputLimit = 16 << 30
)

// OutputLimit is the most a run over in bytes of input may write to each
// output: ratio times the input, between MinOutputLimit and most.
func OutputLimit(in int64, ratio float64, most int64) int64 {
	if ratio <= 0 {
		ratio = Expansion
	}
	if most <= 0 {
		most = MaxOutputLimit
	}
	return min(max(int64(float64(in)*ratio), MinOutputLimit), most)
}

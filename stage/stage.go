// Package stage is the contract between a stage's program and whatever
// runs it: the server's engine, a remote worker, or a command such as
// `plumb dns`. A built-in's lifecycle, stated once here:
//
//  1. New: the registry's Factory decodes its arguments strictly
//     (StrictArgs), fills defaults and validates them, fast and
//     without I/O, when a job is submitted.
//  2. Run (or Split, or Start and then Finish): once per block, from
//     many goroutines at once. Everything a run needs besides its bytes
//     arrives as an Input argument: its block, the state its site's
//     previous block left, and what counts its drops and tally. The
//     context carries only cancellation and deadlines.
//  3. Nothing to close: a built-in holds no resources between runs.
//
// A built-in holds no metrics code; the runner measures it. A run that
// panics fails as an attempt (see Run): the process that ran it goes on.
package stage

import (
	"context"
	"errors"
	"io"

	"github.com/plumb-dev/plumb/block"
)

// ErrMalformed marks input a program can never process (a corrupt block):
// the block is set aside as faulty at once instead of being retried.
var ErrMalformed = errors.New("malformed input")

// Input is what a run is given besides its bytes. The zero Input is a
// run outside a pipeline: no block name, on its own, counting nothing.
type Input struct {
	// Block is the input block a run reads, for outputs that name it
	// (DNS records carry the site and sequence number); zero outside a
	// pipeline and for window runs, which read many.
	Block block.Name
	// Carry is the state a Sequential built-in's run goes on from and
	// leaves; nil for a run on its own (see Carry).
	Carry *Carry
	// Drops counts what the run let go of to stay within its bounds; a
	// nil *Drops counts nothing.
	Drops *Drops
	// Tally counts what the run saw, for metrics exported once the run
	// is committed; a nil *Tally counts nothing.
	Tally *Tally
}

// Builtin is a stage that runs in the process that runs the stage.
type Builtin interface {
	// Run streams one block from r to w. Errors wrapping ErrMalformed
	// set the block aside.
	Run(ctx context.Context, in Input, r io.Reader, w io.Writer) error
}

// Splitter is a Builtin that writes several outputs, each chosen by its
// queue's name (flowhash writes QUEUE.h0 … QUEUE.h{N-1}).
type Splitter interface {
	Builtin
	// CheckOutputs says whether the stage's output queues fit; it runs
	// when the job is submitted.
	CheckOutputs(queues []string) error
	// Split streams one block from r to the outputs, keyed by queue.
	Split(ctx context.Context, in Input, r io.Reader, outs map[string]io.Writer) error
}

// Sequential is a Builtin whose runs over a site's blocks go one at a
// time in sequence order, each going on from the state the previous run
// left (Input.Carry), so what it makes does not depend on where the
// agent cut the capture. Blocks of different sites still run in
// parallel. As a window stage's program, its runs go window after
// window of each instance (a site, or "all" across sites), each from
// the state the previous window left.
type Sequential interface {
	Builtin
	Sequential()
}

// Remembering is a Sequential built-in that writes nothing without its
// carry (builtin:newdomains reports what its memory has not seen): a job
// that would run it anywhere but a stage's last step over one input is
// refused when submitted, instead of running without a row.
type Remembering interface {
	Sequential
	Remembers()
}

// Edged is a Sequential built-in whose runs split in two, so that one
// site's blocks still run in parallel: Start reads a block on its own,
// in any order and at the same time as its neighbours, and writes what
// the block completes alone; the Part it returns finishes in sequence
// order, from what the site's previous block left (its Carry), and
// writes the rows the block's edges complete. Run is Start and Finish
// at once. Start's Input has no Carry: it is not yet known.
type Edged interface {
	Sequential
	Start(ctx context.Context, in Input, r io.Reader, w io.Writer) (Part, error)
}

// RunEdged is the Run of an Edged built-in: Start and Finish at once.
func RunEdged(ctx context.Context, e Edged, in Input, r io.Reader, w io.Writer) error {
	p, err := e.Start(ctx, in, r, w)
	if err != nil {
		return err
	}
	defer p.Discard()
	return p.Finish(ctx, in)
}

// Part is a block read apart from its neighbours, waiting for its turn.
type Part interface {
	// Finish writes the rows the block's edges complete, going on from
	// in.Carry (nil: a block on its own, which lets go of everything at
	// its end), ends the output, and sets in.Carry.Out. in.Block is the
	// one Start was given.
	Finish(ctx context.Context, in Input) error
	// Discard lets the part go unfinished.
	Discard()
}

// Carry is the state a Sequential built-in's run goes on from and
// leaves. Without one (Input.Carry nil) the run is on its own: a block
// that came after its place in the sequence was passed, or a run
// outside a pipeline; it lets go of everything it holds at its end.
type Carry struct {
	In  []byte // the previous block's state; nil at a site's start
	Gap bool   // blocks were skipped before this one: let go of In first
	// Final: the site's capture ends with this block (an import's last
	// block): let go of everything held at its end.
	Final bool
	Out   []byte // set by the run: what the next block goes on from
}

// MaxCarry bounds the state a Sequential built-in carries per site
// (Carry.Out): a built-in whose arguments would need more refuses them
// when the job is submitted. The metadata keeps the same bound
// (state.MaxCarry; a test keeps them equal).
const MaxCarry = 64 << 20

// Describer is a Builtin that says how it works, e.g. which xz encoder
// it drives; stats and metrics show it.
type Describer interface {
	Describe() string
}

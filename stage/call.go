package stage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// A built-in is code in the server's process reading bytes from anyone
// who can put a block. A bug it hits on hostile bytes must fail that one
// run, as an attempt, and never the process with every other run in it.
// So the runner calls built-ins only through the functions below, on
// the goroutine the built-in runs on: a panic there becomes a
// *PanicError. Only a fatal runtime error (out of memory, a concurrent
// map write) still ends the process; the engine's crash counting then
// blames the run at the next start.

// ErrPanicked marks a run whose built-in panicked: a bug, so the run is
// retried as any failed attempt is, and set aside after its attempts.
var ErrPanicked = errors.New("built-in panicked")

// PanicError is a panic recovered from a built-in: the value it panicked
// with, where, and the goroutine's whole stack for the log.
type PanicError struct {
	Op    string // what was called: "run", "split", "start", "finish", "discard"
	Value any
	Where string // the frame that panicked, FUNCTION (FILE:LINE)
	Stack []byte
}

func (p *PanicError) Error() string {
	return fmt.Sprintf("%s: the built-in panicked in %s at %s: %v (a bug in Plumb: the server's log has the stack; please report it with the block)", ErrPanicked, p.Op, p.Where, p.Value)
}

// Unwrap makes errors.Is(err, ErrPanicked) hold; a panic with an error
// value unwraps to it too.
func (p *PanicError) Unwrap() []error {
	if e, ok := p.Value.(error); ok {
		return []error{ErrPanicked, e}
	}
	return []error{ErrPanicked}
}

// recovered turns a panic into *err. Deferred directly by each caller.
func recovered(op string, err *error) {
	v := recover()
	if v == nil {
		return
	}
	*err = &PanicError{Op: op, Value: v, Where: PanicSite(), Stack: debug.Stack()}
}

// PanicSite is where a panic being recovered came from, as
// "FUNCTION (FILE:LINE)": the first frame past the runtime's own (the
// panicking one), whatever the depth of the deferred function calling
// it. The Flight service's recovery reports with it too.
func PanicSite() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	past := false
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "runtime.") {
			past = true
		} else if past {
			return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}

// Run runs b over one block, a panic failing the run.
func Run(ctx context.Context, b Builtin, in Input, r io.Reader, w io.Writer) (err error) {
	defer recovered("run", &err)
	return b.Run(ctx, in, r, w)
}

// Split runs s over one block into its outputs, a panic failing the run.
func Split(ctx context.Context, s Splitter, in Input, r io.Reader, outs map[string]io.Writer) (err error) {
	defer recovered("split", &err)
	return s.Split(ctx, in, r, outs)
}

// Start runs the first half of e's run over one block, a panic failing
// the run. The Part is nil whenever the error is not.
func Start(ctx context.Context, e Edged, in Input, r io.Reader, w io.Writer) (p Part, err error) {
	defer func() {
		if err != nil && p != nil {
			Discard(p)
			p = nil
		}
	}()
	defer recovered("start", &err)
	return e.Start(ctx, in, r, w)
}

// Finish runs the second half of a run, a panic failing the run. A part
// that failed is discarded here; one that finished needs nothing more.
func Finish(ctx context.Context, p Part, in Input) (err error) {
	defer func() {
		if err != nil {
			Discard(p)
		}
	}()
	defer recovered("finish", &err)
	return p.Finish(ctx, in)
}

// Discard lets a part go unfinished; a panic in doing so is returned,
// for the log, and lets nothing else fail.
func Discard(p Part) (err error) {
	defer recovered("discard", &err)
	p.Discard()
	return nil
}

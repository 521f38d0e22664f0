package stage_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/stage"
)

// upper is a built-in that writes its block upper-cased after the name
// of the block it read.
type upper struct{}

func (upper) Run(_ context.Context, in stage.Input, r io.Reader, w io.Writer) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return fmt.Errorf("%w: an empty block", stage.ErrMalformed)
	}
	_, err = fmt.Fprintf(w, "%s: %s", in.Block.Instance, strings.ToUpper(string(data)))
	return err
}

// A runner makes a built-in from its registry and calls it through
// stage.Run, giving the run its block as an argument.
func Example() {
	reg := stage.NewRegistry()
	reg.Add(stage.Factory{Name: "upper", Doc: "upper-cases a block", New: func(args url.Values) (stage.Builtin, error) {
		return upper{}, stage.StrictArgs(args)
	}})
	b, err := reg.New("upper", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	name, _ := block.Parse("20250505-151105-00000042.lax.raw")
	var out strings.Builder
	if err := stage.Run(context.Background(), b, stage.Input{Block: name}, strings.NewReader("hello"), &out); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.String())
	_, err = reg.New("lower", nil)
	fmt.Println(err)
	// Output:
	// lax: HELLO
	// built-in "lower" is not known (known: upper)
}

type crashing struct{ stage.Part }

func (crashing) Run(context.Context, stage.Input, io.Reader, io.Writer) error {
	var m map[string]int
	m["x"]++
	return nil
}

func (c crashing) Start(context.Context, stage.Input, io.Reader, io.Writer) (stage.Part, error) {
	return c, nil
}

func (crashing) Sequential() {}

var errBug = errors.New("a bug")

func (crashing) Finish(context.Context, stage.Input) error { panic(errBug) }

var discarded int

func (crashing) Discard() { discarded++ }

// TestPanicFailsTheRun: a built-in that panics in any of its calls
// returns a *PanicError saying where, with its stack; the caller goes
// on, and a part whose Finish panicked is discarded.
func TestPanicFailsTheRun(t *testing.T) {
	ctx := context.Background()
	err := stage.Run(ctx, crashing{}, stage.Input{}, strings.NewReader(""), io.Discard)
	var pe *stage.PanicError
	if !errors.As(err, &pe) || !errors.Is(err, stage.ErrPanicked) {
		t.Fatalf("Run: %v; want a *PanicError", err)
	}
	if !strings.Contains(pe.Where, "call_test.go") || !strings.Contains(string(pe.Stack), "crashing") || !strings.Contains(err.Error(), "assignment to entry in nil map") {
		t.Errorf("the panic says %q at %s; want its value and the test's line, with a stack", err, pe.Where)
	}
	p, err := stage.Start(ctx, crashing{}, stage.Input{}, strings.NewReader(""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	err = stage.Finish(ctx, p, stage.Input{})
	if !errors.Is(err, stage.ErrPanicked) || discarded != 1 {
		t.Errorf("Finish: %v, %d discards; want the panic, and the part discarded once", err, discarded)
	}
	if errors.Is(err, stage.ErrMalformed) {
		t.Errorf("a panic is a bug, not malformed input: %v", err)
	}
	if !errors.Is(err, errBug) {
		t.Errorf("Finish: %v does not wrap the error it panicked with", err)
	}
	if err := (upper{}).Run(ctx, stage.Input{}, strings.NewReader(""), io.Discard); !errors.Is(err, stage.ErrMalformed) {
		t.Errorf("an empty block: %v; want ErrMalformed", err)
	}
}

// tallies is a Tallier that keeps what it was given and refuses keys
// that do not start with its prefix.
type tallies struct {
	prefix string
	got    map[string]int64
}

func (ts *tallies) Check(t map[string]int64) error {
	for k := range t {
		if !strings.HasPrefix(k, ts.prefix) {
			return fmt.Errorf("%s is not mine", k)
		}
	}
	return nil
}

func (ts *tallies) Add(t map[string]int64) {
	for k, n := range t {
		ts.got[k] += n
	}
}

// TestTalliersRoute: each key of a tally goes to the first route whose
// prefix it has; a key no route takes is refused by Check and skipped by
// Add; a route's own check still applies.
func TestTalliersRoute(t *testing.T) {
	top, rest := &tallies{"top.", map[string]int64{}}, &tallies{"", map[string]int64{}}
	ts := stage.Talliers{{Prefix: "top.", Tallier: top}, {Prefix: "q|", Tallier: rest}}
	tally := map[string]int64{"top.k|lax": 2, "q|lax|udp|A": 3}
	if err := ts.Check(tally); err != nil {
		t.Fatal(err)
	}
	ts.Add(tally)
	if len(top.got) != 1 || top.got["top.k|lax"] != 2 || len(rest.got) != 1 || rest.got["q|lax|udp|A"] != 3 {
		t.Errorf("routed %v and %v", top.got, rest.got)
	}
	if err := ts.Check(map[string]int64{"r|lax|NOERROR": 1}); err == nil || !strings.Contains(err.Error(), "r|lax|NOERROR") {
		t.Errorf("a key no route takes: %v", err)
	}
	ts.Add(map[string]int64{"r|lax|NOERROR": 1})
	if len(rest.got) != 1 {
		t.Errorf("a key no route takes was added: %v", rest.got)
	}
}

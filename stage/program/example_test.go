package program_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/program"
)

// upper is a built-in that upper-cases its block.
type upper struct{}

func (upper) Run(_ context.Context, _ stage.Input, r io.Reader, w io.Writer) error {
	b, err := io.ReadAll(r)
	if err == nil {
		_, err = w.Write(bytes.ToUpper(b))
	}
	return err
}

// A job's program is resolved once, against the built-ins the process
// registered, and then executed over each block: here a chain of a
// built-in and an executable, joined by a pipe. Without a sandbox the
// executable runs only because the confinement says Unconfined.
func Example() {
	reg := stage.NewRegistry()
	reg.Add(stage.Factory{Name: "upper", New: func(url.Values) (stage.Builtin, error) { return upper{}, nil }})

	first, _ := pipeline.ParseStep("builtin:upper")
	second, _ := pipeline.ParseStep("rev")
	steps, err := program.Resolve(reg, nil, pipeline.Program{Steps: []pipeline.Step{first, second}}, true)
	if err != nil {
		fmt.Println(err)
		return
	}

	scratch, _ := os.MkdirTemp("", "run-")
	defer os.RemoveAll(scratch)
	var out bytes.Buffer
	ins := []program.Port{{Queue: "raw", R: strings.NewReader("plumb\n")}}
	outs := []program.Port{{Queue: "raw.shout", W: &out}}
	_, err = program.Execute(context.Background(), stage.Input{}, &program.Confinement{Unconfined: true}, steps, ins, outs, scratch)
	fmt.Print(out.String(), err, "\n")
	// Output:
	// BMULP
	// <nil>
}

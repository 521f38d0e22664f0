package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/program"
)

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
func (r *Runner) Lacks(l flight.Lease) string {
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
func (r *Runner) program(name string, p flight.LeaseProgram) (program.Registered, bool, error) {
	if r.Programs == "" {
		return program.Registered{}, false, fmt.Errorf("program %s is registered on the server; this worker has no --programs directory", name)
	}
	path := filepath.Join(r.Programs, strings.ToLower(p.SHA256))
	if _, ok := r.verified.Load(p.SHA256); !ok {
		f, err := os.Open(path)
		if err != nil {
			return program.Registered{}, false, fmt.Errorf("program %s: %w; copy the server's program with SHA-256 %s there", name, err, p.SHA256)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return program.Registered{}, false, err
		}
		if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, p.SHA256) {
			return program.Registered{}, false, fmt.Errorf("program %s: %s has SHA-256 %s, not the registered %s", name, path, got, p.SHA256)
		}
		r.verified.Store(p.SHA256, true)
	}
	return program.Registered{Path: path, SHA256: p.SHA256, Network: p.Network}, true, nil
}

// Run runs a leased stage program over inputs into outputs, its
// built-ins given in, executables in a directory of their own under
// scratch. It returns the tail of the programs' stderr and the CPU they
// used (busy time for built-ins).
func (r *Runner) Run(ctx context.Context, l flight.Lease, in stage.Input, ins, outs []program.Port, scratch string) (stderr string, cpu time.Duration, err error) {
	steps, err := r.steps(l)
	if err != nil {
		return "", 0, err
	}
	x := &program.Confinement{Sandbox: r.Sandbox, Unconfined: r.Unconfined, Network: l.Network}
	res, err := program.Execute(ctx, in, x, steps, ins, outs, scratch)
	return res.Stderr, res.CPU, err
}

// steps resolves a lease's program as the server did.
func (r *Runner) steps(l flight.Lease) ([]program.Step, error) {
	lookup := func(n string) (program.Registered, bool, error) {
		p, ok := l.Programs[n]
		if !ok {
			return program.Registered{}, false, nil
		}
		return r.program(n, p)
	}
	return program.Resolve(r.Registry, lookup, l.Program, l.Trusted)
}

// Start runs the first half of a part lease's run (flight.Lease.Part): the
// stage's edged built-in reads the block on its own. The worker holds
// the Part, with out, for the block's turn (flight.Lease.Held), when Finish
// writes the rest; it returns the CPU (busy time) the half took.
func (r *Runner) Start(ctx context.Context, l flight.Lease, in stage.Input, rd io.Reader, out io.Writer) (stage.Part, time.Duration, error) {
	steps, err := r.steps(l)
	if err != nil {
		return nil, 0, err
	}
	var ed stage.Edged
	if len(steps) == 1 {
		ed, _ = steps[0].Builtin.(stage.Edged)
	}
	if ed == nil {
		return nil, 0, fmt.Errorf("lease %s: stage %s does not run in parts (%s)", l.ID, l.Stage, l.Program)
	}
	began := time.Now()
	p, err := stage.Start(ctx, ed, in, rd, out)
	return p, time.Since(began), err
}

// errLeaseGone cancels a run whose lease the server no longer holds for
// this worker (a heartbeat was refused): the run belongs to another now.
var errLeaseGone = errors.New("lease expired or unknown; the run was given to another worker")

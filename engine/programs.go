package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/plumb-dev/plumb/stage/program"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

// MaxProgramSize bounds a registered program's file.
const MaxProgramSize = 1 << 30

var programNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// AddProgram registers an executable under name for jobs to run: the
// file is copied into the server's program directory under its SHA-256,
// so later changes to the original do not change what runs. With
// wantSHA256 the file must have that checksum. network lets stages that
// ask for it reach the host's network.
func (e *Engine) AddProgram(name, path, wantSHA256 string, network bool, by string) (state.Program, error) {
	if !programNameRE.MatchString(name) {
		return state.Program{}, fmt.Errorf("program name %q: use 1-64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", name)
	}
	if e.cfg.Programs == "" {
		return state.Program{}, errors.New("this server keeps no programs (no program directory)")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return state.Program{}, err
	}
	src, err := os.Open(abs)
	if err != nil {
		return state.Program{}, fmt.Errorf("program %s: %w (the path is on the server)", name, err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return state.Program{}, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return state.Program{}, fmt.Errorf("program %s: %s is not an executable file", name, abs)
	}
	if fi.Size() > MaxProgramSize {
		return state.Program{}, fmt.Errorf("program %s: %s is %d bytes, over the limit of %d", name, abs, fi.Size(), MaxProgramSize)
	}
	if err := os.MkdirAll(e.cfg.Programs, 0o755); err != nil {
		return state.Program{}, err
	}
	tmp, err := os.CreateTemp(e.cfg.Programs, ".add-*")
	if err != nil {
		return state.Program{}, err
	}
	defer os.Remove(tmp.Name())
	hf := program.NewHashFile(tmp)
	if _, err := io.Copy(hf, io.LimitReader(src, MaxProgramSize)); err != nil {
		tmp.Close()
		return state.Program{}, err
	}
	sum := hf.Sum().String()
	if wantSHA256 != "" {
		want, err := blob.ParseSum(wantSHA256)
		if err != nil || want != hf.Sum() {
			tmp.Close()
			return state.Program{}, fmt.Errorf("program %s: %s has SHA-256 %s, not the %s given; check the file", name, abs, sum, wantSHA256)
		}
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return state.Program{}, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return state.Program{}, err
	}
	if err := tmp.Close(); err != nil {
		return state.Program{}, err
	}
	dst := filepath.Join(e.cfg.Programs, sum)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return state.Program{}, err
	}
	p := state.Program{Name: name, Path: dst, Source: abs, SHA256: sum, Network: network, AddedBy: by, Added: e.cfg.Now().UTC()}
	if err := e.db.PutProgram(p); err != nil {
		return state.Program{}, err
	}
	e.log.Info("program registered", "program", name, "source", abs, "sha256", sum, "network", network, "by", by)
	return p, nil
}

// RemoveProgram unregisters a program. It is refused while a job in
// the graph (accepted, suspended or not) names it: retract those first.
func (e *Engine) RemoveProgram(name string) error {
	if _, err := e.db.GetProgram(name); err != nil {
		return err
	}
	var users []string
	if g := e.Graph(); g != nil {
		for _, n := range g.Stages {
			for _, st := range n.Program.Steps {
				if len(st.Argv) == 0 || st.Argv[0] != name {
					continue
				}
				for _, o := range n.Owners {
					if !slices.Contains(users, o.Job) {
						users = append(users, o.Job)
					}
				}
			}
		}
	}
	slices.Sort(users)
	if len(users) > 0 {
		return fmt.Errorf("program %s is run by job(s) %s; retract them first", name, strings.Join(users, ", "))
	}
	return e.db.RemoveProgram(name)
}

// Programs lists the registered programs.
func (e *Engine) Programs() ([]state.Program, error) { return e.db.Programs() }

// lookup finds a registered program for program.Resolve.
func (e *Engine) lookup(name string) (program.Registered, bool, error) {
	p, err := e.db.GetProgram(name)
	if errors.Is(err, state.ErrNotFound) {
		return program.Registered{}, false, nil
	}
	return program.Registered{Path: p.Path, SHA256: p.SHA256, Network: p.Network}, err == nil, err
}

// trusted reports whether a stored job may name unregistered executables.
func (e *Engine) trusted(job string) bool {
	j, err := e.db.GetJob(job)
	return err == nil && j.Trusted
}

// resolveNode resolves a graph node's program with the trust of the job
// whose program it runs (the first owner's), once, when the graph is
// applied; runs and leases use what it found.
func (e *Engine) resolveNode(n *pipeline.Node) (steps []program.Step, trusted bool, err error) {
	trusted = len(n.Owners) > 0 && e.trusted(n.Owners[0].Job)
	steps, err = program.Resolve(e.reg, e.lookup, n.Program, trusted)
	return steps, trusted, err
}

// confine is how a stage's executables run.
func (e *Engine) confine(n *pipeline.Node) *program.Confinement {
	return &program.Confinement{Sandbox: e.cfg.Sandbox, Unconfined: e.cfg.Unconfined, Network: n.Network, Nice: e.cfg.Nice}
}

// checkExecutables says whether the stage's executables may run here at
// all, and with the network it asks for.
func (e *Engine) checkExecutables(s *pipeline.Stage, steps []program.Step) error {
	for _, st := range steps {
		if st.Builtin != nil {
			continue
		}
		if e.cfg.Sandbox == nil && !e.cfg.Unconfined {
			why := "no sandbox is configured"
			if e.cfg.NoSandbox != nil {
				why = e.cfg.NoSandbox.Error()
			}
			return fmt.Errorf("executables are refused on this server, which cannot confine them (%s); use a built-in", why)
		}
		if s.Network && !st.Network {
			return fmt.Errorf("program %s is not allowed the network; an admin registers it with `plumb program add --network`", st.Name)
		}
	}
	return nil
}

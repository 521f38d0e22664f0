package program

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/stage"
)

// Step is one resolved step of a program: a built-in or an executable.
type Step struct {
	Name    string // builtin:NAME or the executable, for messages
	Builtin stage.Builtin
	Argv    []string
	// Network says the step may have the host's network when its stage
	// asks: its program was registered so, or an admin's job names it.
	Network bool
	// SHA256 is a registered program's checksum, for workers.
	SHA256 string
}

// Registered is a program an admin registered, as a run needs it.
type Registered struct {
	Path    string // the copy to run, named by its checksum
	SHA256  string
	Network bool
}

// Lookup finds a registered program by name; ok false when none has it.
type Lookup func(name string) (p Registered, ok bool, err error)

// Resolve makes a program's steps runnable: built-ins from the registry,
// executables from the program registry by name, or, for a trusted job
// (an admin's, or any on a server without users), found on PATH or
// relative to the server's directory.
func Resolve(reg *stage.Registry, lookup Lookup, p pipeline.Program, trusted bool) ([]Step, error) {
	out := make([]Step, len(p.Steps))
	for i, st := range p.Steps {
		if st.Builtin != "" {
			b, err := reg.New(st.Builtin, st.Args)
			if err != nil {
				return nil, err
			}
			out[i] = Step{Name: pipeline.BuiltinPrefix + st.Builtin, Builtin: b}
			continue
		}
		name := st.Argv[0]
		if lookup != nil && !strings.Contains(name, "/") {
			prog, ok, err := lookup(name)
			if err != nil {
				return nil, err
			}
			if ok {
				argv := slices.Clone(st.Argv)
				argv[0] = prog.Path
				out[i] = Step{Name: name, Argv: argv, Network: prog.Network, SHA256: prog.SHA256}
				continue
			}
		}
		if !trusted {
			return nil, fmt.Errorf("program %q is not registered on this server; an admin registers it with `plumb program add %s PATH`, or use a built-in (`plumb program list` shows what is registered)", name, path.Base(name))
		}
		found, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("program %q is not found or not executable on the server: %v; install it there or give its absolute path", name, err)
		}
		argv := slices.Clone(st.Argv)
		// Relative to the server's directory, not the run's own one; and
		// absolute, so the sandbox can show it.
		if abs, err := filepath.Abs(found); err == nil {
			argv[0] = abs
		}
		out[i] = Step{Name: name, Argv: argv, Network: true}
	}
	return out, nil
}

// Port is one named input or output of a run.
type Port struct {
	Queue string
	R     io.Reader // inputs
	W     io.Writer // outputs
}

// Outcome is what running a program cost and said.
type Outcome struct {
	CPU    time.Duration // CPU of executables; busy time of built-ins
	Stderr string        // the last StderrKeep bytes of every executable's stderr
}

// StderrKeep is how much of a run's stderr is kept for its error.
const StderrKeep = 4 << 10

// Execute runs a program over one set of inputs, its built-ins given in.
// A program with one input
// and at most one output gets them as stdin and stdout, a chain of steps
// connected by pipes; an executable with several gets named FIFOs as
// --in QUEUE=PATH and --out QUEUE=PATH arguments.
func Execute(ctx context.Context, in stage.Input, x *Confinement, steps []Step, ins, outs []Port, scratch string) (Outcome, error) {
	// Executables start in a directory of their own inside the run's
	// scratch space, removed with it.
	work := filepath.Join(scratch, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		return Outcome{}, err
	}
	tail := NewTail(StderrKeep)
	var cpu cpuCounter
	var err error
	if sp, ok := steps[0].Builtin.(stage.Splitter); ok && len(steps) == 1 && len(outs) > 1 {
		m := make(map[string]io.Writer, len(outs))
		for _, o := range outs {
			m[o.Queue] = o.W
		}
		start := time.Now()
		err = AtNice(x.Nice, func() error { return stage.Split(ctx, sp, in, ins[0].R, m) })
		cpu.add(time.Since(start))
	} else if len(ins) == 1 && len(outs) <= 1 {
		var out io.Writer = io.Discard
		if len(outs) == 1 {
			out = outs[0].W
		}
		err = chain(ctx, in, x, steps, ins[0].R, out, tail, &cpu, work)
	} else {
		err = withFIFOs(ctx, x, steps[0], ins, outs, scratch, tail, &cpu, work)
	}
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrTimeout) {
		err = fmt.Errorf("killed after its timeout: %w", ErrTimeout)
	}
	return Outcome{CPU: cpu.total(), Stderr: tail.String()}, err
}

// ErrTimeout is the cause a caller gives the context of a run it times
// out (context.WithTimeoutCause): Execute then says the run was killed
// for it.
var ErrTimeout = errors.New("stage timeout")

// chain runs steps connected by OS pipes: in → step 1 → ... → out.
func chain(ctx context.Context, sin stage.Input, x *Confinement, steps []Step, in io.Reader, out io.Writer, tail io.Writer, cpu *cpuCounter, dir string) error {
	g, gctx := errgroup.WithContext(ctx)
	errs := make([]error, len(steps))
	src := in
	for i, st := range steps {
		var dst io.Writer = out
		var pr, pw *os.File
		if i < len(steps)-1 {
			var err error
			if pr, pw, err = os.Pipe(); err != nil {
				return err
			}
			dst = pw
		}
		stepIn := src
		g.Go(func() error {
			errs[i] = runStep(gctx, sin, x, st, stepIn, dst, tail, cpu, dir)
			// Close our ends so neighbours see EOF or EPIPE.
			if pw != nil {
				pw.Close()
			}
			if f, ok := stepIn.(*os.File); ok && i > 0 {
				f.Close()
			}
			if errs[i] != nil && !isPipeErr(errs[i]) {
				return errs[i]
			}
			return nil
		})
		if pr != nil {
			src = pr
		}
	}
	gerr := g.Wait()
	// Report the step that failed first on its own account, not the
	// neighbours that saw a broken pipe because of it.
	for i, err := range errs {
		if err != nil && !isPipeErr(err) {
			if len(steps) > 1 {
				return fmt.Errorf("step %d (%s): %w", i+1, stepName(steps[i]), err)
			}
			return err
		}
	}
	if gerr != nil {
		return gerr
	}
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, stepName(steps[i]), err)
		}
	}
	return nil
}

func stepName(st Step) string { return st.Name }

func isPipeErr(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}

func runStep(ctx context.Context, sin stage.Input, x *Confinement, st Step, in io.Reader, out io.Writer, tail io.Writer, cpu *cpuCounter, dir string) error {
	if st.Builtin != nil {
		start := time.Now()
		err := AtNice(x.Nice, func() error { return stage.Run(ctx, st.Builtin, sin, in, out) })
		cpu.add(time.Since(start))
		return err
	}
	cmd, run, release, err := x.Command(ctx, st, st.Argv, dir, nil, nil)
	if err != nil {
		return err
	}
	defer release()
	cmd.Stdin, cmd.Stderr = in, tail
	if out != io.Discard {
		cmd.Stdout = out
	}
	err = AtNice(x.Nice, run.Run)
	if cmd.ProcessState != nil {
		cpu.add(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime())
	}
	return ExitError(err)
}

// Confinement is how a stage's executables start.
type Confinement struct {
	// Sandbox confines them. Without it they run as the server's user if
	// Unconfined says so (--sandbox off), and are refused otherwise.
	Sandbox    *sandbox.Sandbox
	Unconfined bool
	// Network is the stage's wish for the host's network.
	Network bool
	// ReadOnly are more paths the programs may read (a window's blocks).
	ReadOnly []string
	// Limits replace the sandbox's own (none for a long-running stream).
	Limits *sandbox.Limits
	// Nice is the CPU priority runs get (see AtNice); none when 0.
	Nice int
}

// Command prepares an executable in its own process group, so that a
// timeout kills the program and anything it started, in dir and with a
// clean environment: the server's secrets and settings are not the
// program's business. In the sandbox it sees only dir, the writable
// paths (FIFOs) and what is read-only to it. The command is set up
// through cmd and started and waited for through p (in the sandbox, p
// stops it at a per-run limit); release frees what the sandbox holds for
// the run once it has been waited for.
func (x *Confinement) Command(ctx context.Context, st Step, argv []string, dir string, writable []string, extra []*os.File) (cmd *exec.Cmd, p Process, release func(), err error) {
	env := cleanEnv(dir)
	if x.Sandbox == nil {
		if !x.Unconfined {
			return nil, nil, nil, fmt.Errorf("%s: executables are refused here, which cannot confine them (install bubblewrap)", st.Name)
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = dir
		cmd.Env = env
		cmd.ExtraFiles = extra
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		return cmd, cmd, func() {}, nil
	}
	env[0] = "PATH=" + x.Sandbox.Path(strings.TrimPrefix(env[0], "PATH="))
	return x.Sandbox.Command(ctx, sandbox.Run{
		Argv: argv, Dir: dir, ReadOnly: x.ReadOnly, Writable: writable,
		Network: x.Network && st.Network, Env: env, ExtraFiles: extra, Limits: x.Limits,
	})
}

// Process starts and waits for a command: the exec.Cmd itself, or the
// sandbox's watch over it.
type Process interface {
	Start() error
	Wait() error
	Run() error
}

// ExitError says how a program ended: its exit status or the signal
// that killed it.
func ExitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("killed by signal %s", ws.Signal())
		}
		return fmt.Errorf("exit status %d", ee.ExitCode())
	}
	return err
}

// withFIFOs runs one executable over several inputs or outputs, each a
// named FIFO in scratch.
func withFIFOs(ctx context.Context, x *Confinement, st Step, ins, outs []Port, scratch string, tail io.Writer, cpu *cpuCounter, dir string) error {
	args := append([]string(nil), st.Argv...)
	var fifos []string
	mk := func(flag string, p Port) (string, error) {
		path := filepath.Join(scratch, flag+"-"+p.Queue)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			return "", fmt.Errorf("make FIFO for %s: %w", p.Queue, err)
		}
		fifos = append(fifos, path)
		args = append(args, "--"+flag, p.Queue+"="+path)
		return path, nil
	}
	var copiers sync.WaitGroup
	copyErrs := make([]error, len(ins)+len(outs))
	for i, p := range ins {
		path, err := mk("in", p)
		if err != nil {
			return err
		}
		copiers.Go(func() {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err == nil {
				_, err = io.Copy(f, p.R)
				f.Close()
			}
			copyErrs[i] = err
		})
	}
	for i, p := range outs {
		path, err := mk("out", p)
		if err != nil {
			return err
		}
		copiers.Go(func() {
			f, err := os.OpenFile(path, os.O_RDONLY, 0)
			if err == nil {
				_, err = io.Copy(p.W, f)
				f.Close()
			}
			copyErrs[len(ins)+i] = err
		})
	}
	cmd, run, release, err := x.Command(ctx, st, args, dir, fifos, nil)
	if err != nil {
		return err
	}
	defer release()
	cmd.Stderr = tail
	err = ExitError(AtNice(x.Nice, run.Run))
	if cmd.ProcessState != nil {
		cpu.add(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime())
	}
	// A FIFO the program never opened still blocks its copier in open:
	// open the other end without blocking to let it go.
	for i, path := range fifos {
		mode := os.O_RDONLY
		if i >= len(ins) {
			mode = os.O_WRONLY
		}
		if f, err := os.OpenFile(path, mode|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}
	copiers.Wait()
	if err != nil {
		return err
	}
	for i, cerr := range copyErrs {
		if cerr != nil && !isPipeErr(cerr) {
			return fmt.Errorf("FIFO %s: %w", fifos[i], cerr)
		}
	}
	return nil
}

// Tail keeps the last bytes written to it: the end of a program's
// stderr, which says why it failed.
type Tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// NewTail keeps the last max bytes.
func NewTail(max int) *Tail { return &Tail{max: max} }

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is what is kept.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

type cpuCounter struct {
	mu sync.Mutex
	d  time.Duration
}

func (c *cpuCounter) add(d time.Duration) {
	c.mu.Lock()
	c.d += d
	c.mu.Unlock()
}

func (c *cpuCounter) total() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.d
}

// cleanEnv is all a stage program gets from its environment: the PATH to
// find its tools, a home and temporary directory of its own, UTF-8 and UTC.
func cleanEnv(dir string) []string {
	return []string{"PATH=" + cmp.Or(os.Getenv("PATH"), "/usr/local/bin:/usr/bin:/bin"), "HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8", "TZ=UTC"}
}

// Package sandbox runs stage programs confined, so that one tenant's
// program cannot read the server's files, other runs' data or the
// network, nor signal, trace or starve other processes.
//
// A program runs under bubblewrap (bwrap, from Debian's bubblewrap
// package, the sandbox Flatpak uses) in new mount, PID, network, IPC, UTS,
// cgroup and user namespaces, with every capability dropped, no new
// privileges, a seccomp filter, and rlimits set by util-linux's prlimit
// before bwrap starts. When the server runs as root, each run also gets a
// uid of its own from a reserved range, so runs cannot touch one another
// even through a shared file. The program sees a read-only system (/usr
// and the libraries, a few files of /etc), a private /tmp, /proc of its
// own PID namespace, the paths its caller names read-only (its inputs and
// the program itself) and writable (its working directory and FIFOs), and
// nothing else: not the data directory, keys, users file or other runs'
// scratch.
//
// bwrap rather than our own namespace code: it is small, audited, kept in
// Debian, and gets the ordering of pivot_root, /proc, uid maps and
// PR_SET_NO_NEW_PRIVS right; prlimit because Go cannot set a child's
// rlimits between fork and exec.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Limits bound what one run may use. Zero fields mean no limit.
type Limits struct {
	// Memory is the address space of each process (RLIMIT_AS), bytes.
	Memory int64
	// CPU is the CPU time of each process (RLIMIT_CPU).
	CPU time.Duration
	// FileSize is the largest file a process may write (RLIMIT_FSIZE).
	FileSize int64
	// Procs is how many processes and threads the run may have at once;
	// it holds a fork bomb. A root server's runs also get it as
	// RLIMIT_NPROC, each run having a uid of its own.
	Procs int
	// Files is how many files a process may hold open (RLIMIT_NOFILE).
	Files int
	// Tmp is the size of the run's private /tmp, a tmpfs: its bytes are
	// memory, which RLIMIT_AS does not count.
	Tmp int64
	// RunMemory is the resident memory of all the run's processes
	// together; Memory bounds each one alone.
	RunMemory int64
	// Disk is what the run's working directory may hold.
	Disk int64
}

// DefaultLimits are the limits of a run unless the server says others:
// room for real tools (tshark, Python with pandas) and a cap a runaway
// program meets long before the machine does.
func DefaultLimits() Limits {
	return Limits{Memory: 4 << 30, RunMemory: 4 << 30, FileSize: 64 << 30, Disk: 16 << 30, Procs: 512, Files: 4096, Tmp: 256 << 20}
}

// Config says how to confine runs.
type Config struct {
	// Bwrap, Prlimit and Setpriv are the tools' paths; found on PATH when
	// empty. Setpriv (util-linux) drops a root server's runs to their uid
	// inside the namespaces; it must be in the system view.
	Bwrap, Prlimit, Setpriv string
	// UIDBase is the first of the uids runs get when the server is root,
	// UIDs how many (so how many runs at once): 1,900,000,000 and 4096
	// when zero, far from system, user and container ranges.
	UIDBase uint32
	UIDs    int
	// Limits apply to every run that does not say its own.
	Limits Limits
	// Shared are more paths every run may read, such as tools installed
	// outside /usr (/opt/zeek).
	Shared []string
	// Private are paths no run may ever see (the data directory, the
	// users file, keys): New refuses when the system view would show one.
	Private []string
	// NoCgroups keeps runs out of cgroups even where the server could
	// make them; the per-run limits are then watched from /proc.
	NoCgroups bool
}

// Sandbox confines programs. It is safe for concurrent use.
type Sandbox struct {
	cfg     Config
	root    bool
	seccomp []byte
	system  []string // bwrap arguments for the read-only system view
	sh      string
	cg      *cgroups // nil: per-run limits are watched from /proc
	cgWhy   error    // why cg is nil

	mu   sync.Mutex
	used map[uint32]bool
}

// New checks that programs can be confined here, by confining one, and
// returns a sandbox; the error says why not (no bwrap, user namespaces
// disabled, an architecture without a seccomp profile).
func New(ctx context.Context, cfg Config) (*Sandbox, error) {
	if cfg.UIDBase == 0 {
		cfg.UIDBase = 1_900_000_000
	}
	if cfg.UIDs <= 0 {
		cfg.UIDs = 4096
	}
	for _, t := range []struct {
		path *string
		name string
		pkg  string
	}{{&cfg.Bwrap, "bwrap", "bubblewrap"}, {&cfg.Prlimit, "prlimit", "util-linux"}, {&cfg.Setpriv, "setpriv", "util-linux"}} {
		if *t.path == "" {
			p, err := exec.LookPath(t.name)
			if err != nil {
				return nil, fmt.Errorf("stage programs cannot be confined: %s is not installed (apt-get install %s)", t.name, t.pkg)
			}
			*t.path = p
		}
	}
	if os.Geteuid() == 0 && !strings.HasPrefix(cfg.Setpriv, "/usr/") {
		return nil, fmt.Errorf("stage programs cannot be confined: setpriv is at %s, outside /usr where runs can see it", cfg.Setpriv)
	}
	filt, err := filter()
	if err != nil {
		return nil, fmt.Errorf("stage programs cannot be confined: %w", err)
	}
	s := &Sandbox{cfg: cfg, root: os.Geteuid() == 0, seccomp: filt, system: systemView(), used: map[uint32]bool{}}
	if cfg.NoCgroups {
		s.cgWhy = errors.New("turned off")
	} else if s.sh, err = exec.LookPath("sh"); err != nil {
		s.cgWhy = err
	} else {
		s.cg, s.cgWhy = findCgroups()
	}
	for _, p := range cfg.Private {
		abs, err := filepath.Abs(p)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err == nil && s.inSystem(abs) {
			return nil, fmt.Errorf("stage programs cannot be confined: %s is inside the system directories every run sees read-only; move it out of %s", p, strings.Join(systemTops, ", "))
		}
	}
	dir, err := os.MkdirTemp("", "plumb-sandbox-probe-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := s.probe(ctx, dir); err != nil && s.cg != nil {
		// The groups could be made but not entered or limited: confine
		// without them rather than not at all.
		s.cg, s.cgWhy = nil, err
		err = s.probe(ctx, dir)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// probe confines one program that does nothing.
func (s *Sandbox) probe(ctx context.Context, dir string) error {
	probe := "/bin/true"
	if p, err := exec.LookPath("true"); err == nil {
		probe = p
	}
	cmd, w, release, err := s.Command(ctx, Run{Argv: []string{probe}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		return err
	}
	defer release()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := w.Run(); err != nil {
		return fmt.Errorf("stage programs cannot be confined here: %s: %v: %s (bwrap needs user namespaces: sysctl user.max_user_namespaces > 0, and in a container a seccomp profile that allows them)",
			s.cfg.Bwrap, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// RunBounds says how the per-run limits (all of a run's memory, its
// tasks) are held: by a cgroup per run, named with where, or watched from
// /proc, with why no cgroup could be had.
func (s *Sandbox) RunBounds() string {
	if s.cg != nil {
		return "each run in a cgroup of its own (" + s.cg.String() + ")"
	}
	return "summed from /proc every " + watchEvery.String() + " (a run may pass a limit by what it grows meanwhile, and its /tmp is not counted), as no cgroup can be made for runs: " + s.cgWhy.Error() +
		"; run as root, or with a delegated cgroup v2 (systemd: Delegate=memory pids)"
}

// Cgroups reports whether runs get cgroups of their own.
func (s *Sandbox) Cgroups() bool { return s.cg != nil }

// Run is one program to confine.
type Run struct {
	// Argv is the program and its arguments; the program's own path is
	// made visible read-only when it is outside the system view.
	Argv []string
	// Dir is the working directory: writable, and the run's only
	// scratch space besides a private /tmp.
	Dir string
	// ReadOnly are paths (files or directories) the program may read,
	// at the same paths as outside; Writable may also be written (FIFOs).
	ReadOnly, Writable []string
	// Network keeps the host's network; otherwise the run has only a
	// loopback of its own.
	Network bool
	// Env is the whole environment the program gets.
	Env []string
	// ExtraFiles become fd 3, 4, ... as with exec.Cmd.
	ExtraFiles []*os.File
	// Limits replace the sandbox's limits when set.
	Limits *Limits
}

// Command prepares a confined run. The command is in a process group of
// its own whose kill (the context's end) ends the whole PID namespace.
// The caller sets the command's Stdin, Stdout and Stderr, runs it with
// the Watched (which stops it should the run as a whole pass a per-run
// limit), then calls release, which frees the run's uid.
func (s *Sandbox) Command(ctx context.Context, r Run) (cmd *exec.Cmd, w *Watched, release func(), err error) {
	if len(r.Argv) == 0 || r.Dir == "" {
		return nil, nil, nil, errors.New("sandbox: a run needs a program and a directory")
	}
	lim := s.cfg.Limits
	if r.Limits != nil {
		lim = *r.Limits
	}
	uid, err := s.takeUID()
	if err != nil {
		return nil, nil, nil, err
	}
	var group *runGroup
	if s.cg != nil && (lim.RunMemory > 0 || lim.Procs > 0) {
		if group, err = s.cg.make(lim); err != nil {
			s.freeUID(uid)
			return nil, nil, nil, err
		}
	}
	cmd, secR, err := s.command(ctx, r, lim, uid, group)
	if err != nil {
		if group != nil {
			group.remove()
		}
		s.freeUID(uid)
		return nil, nil, nil, err
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			secR.Close()
			if group != nil {
				group.remove()
			}
			s.freeUID(uid)
		})
	}
	return cmd, &Watched{ctx: ctx, cmd: cmd, dir: r.Dir, lim: lim, group: group}, release, nil
}

// enterGroup is the shell that puts itself into a run's groups, then
// becomes the run: Go cannot act between fork and exec, and a group
// entered after start would miss what the run forked first.
const enterGroup = `n=$1; shift; while [ "$n" -gt 0 ]; do echo 0 > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"`

// command builds a run's command line for uid; secR is the seccomp
// filter's read end, which the command inherits.
func (s *Sandbox) command(ctx context.Context, r Run, lim Limits, uid uint32, group *runGroup) (*exec.Cmd, *os.File, error) {
	if s.root {
		for _, p := range append([]string{r.Dir}, r.Writable...) {
			if err := os.Chown(p, int(uid), int(uid)); err != nil {
				return nil, nil, fmt.Errorf("sandbox: give %s to the run: %w", p, err)
			}
		}
	}
	secFD := 3 + len(r.ExtraFiles)

	// A root server's bwrap runs as root, so that it can reach the paths
	// it binds, without a user namespace (which would map the run to
	// root outside); setpriv then drops the program to the run's uid with
	// no capabilities at all. Otherwise bwrap runs as the server's user
	// in a user namespace and drops the capabilities itself.
	var args []string
	if s.root {
		args = append(args, "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try")
		if !r.Network {
			args = append(args, "--unshare-net")
		}
	} else {
		args = append(args, "--unshare-all", "--cap-drop", "ALL")
		if r.Network {
			args = append(args, "--share-net")
		}
	}
	args = append(args, "--die-with-parent", "--new-session", "--hostname", "plumb-run")
	args = append(args, s.system...)
	if r.Network {
		args = append(args, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf")
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--perms", "1777")
	if lim.Tmp > 0 {
		args = append(args, "--size", strconv.FormatInt(lim.Tmp, 10))
	}
	args = append(args, "--tmpfs", "/tmp")
	type bind struct {
		path string
		rw   bool
	}
	var binds []bind
	if prog := r.Argv[0]; filepath.IsAbs(prog) && !s.inSystem(prog) {
		binds = append(binds, bind{path: prog})
	}
	for _, p := range append(slices.Clone(s.cfg.Shared), r.ReadOnly...) {
		binds = append(binds, bind{path: p})
	}
	for _, p := range append([]string{r.Dir}, r.Writable...) {
		binds = append(binds, bind{path: p, rw: true})
	}
	// Parents before children, so a writable directory inside a
	// read-only one is mounted over it, not under it.
	slices.SortStableFunc(binds, func(a, b bind) int { return strings.Count(a.path, "/") - strings.Count(b.path, "/") })
	// bwrap would make the directories above a bound path with the
	// modes they have outside (often 0700 of the server's user, which
	// the run could not pass through): make them first, open.
	made := map[string]bool{}
	for i, b := range binds {
		abs, err := filepath.Abs(b.path)
		if err != nil {
			return nil, nil, err
		}
		binds[i].path = abs
		var ups []string
		for d := filepath.Dir(abs); d != "/" && d != "/tmp" && !made[d] && !s.inSystem(d); d = filepath.Dir(d) {
			made[d] = true
			ups = append(ups, d)
		}
		for _, d := range slices.Backward(ups) {
			args = append(args, "--perms", "0755", "--dir", d)
		}
	}
	for _, b := range binds {
		abs := b.path
		if b.rw {
			args = append(args, "--bind", abs, abs)
		} else {
			args = append(args, "--ro-bind", abs, abs)
		}
	}
	args = append(args, "--chdir", r.Dir, "--seccomp", strconv.Itoa(secFD), "--")
	if s.root {
		id := strconv.FormatUint(uint64(uid), 10)
		args = append(args, s.cfg.Setpriv, "--reuid="+id, "--regid="+id, "--clear-groups",
			"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--")
	}
	args = append(args, r.Argv...)

	pl := []string{}
	if lim.Memory > 0 {
		pl = append(pl, "--as="+strconv.FormatInt(lim.Memory, 10))
	}
	if lim.CPU > 0 {
		pl = append(pl, "--cpu="+strconv.FormatInt(int64(max(lim.CPU/time.Second, 1)), 10))
	}
	if lim.FileSize > 0 {
		pl = append(pl, "--fsize="+strconv.FormatInt(lim.FileSize, 10))
	}
	if lim.Procs > 0 && s.root {
		pl = append(pl, "--nproc="+strconv.Itoa(lim.Procs))
	}
	if lim.Files > 0 {
		pl = append(pl, "--nofile="+strconv.Itoa(lim.Files))
	}
	pl = append(pl, "--", s.cfg.Bwrap)

	secR, secW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	// The filter is a few hundred bytes: it fits the pipe's buffer, so it
	// is written whole before bwrap reads it.
	_, err = secW.Write(s.seccomp)
	secW.Close()
	if err != nil {
		secR.Close()
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, s.cfg.Prlimit, append(pl, args...)...)
	if group != nil {
		procs := group.procs()
		enter := append([]string{"-c", enterGroup, "plumb-run", strconv.Itoa(len(procs))}, procs...)
		cmd = exec.CommandContext(ctx, s.sh, append(append(enter, s.cfg.Prlimit), append(pl, args...)...)...)
	}
	cmd.Env = r.Env
	cmd.Dir = "/"
	cmd.ExtraFiles = append(slices.Clone(r.ExtraFiles), secR)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd, secR, nil
}

// Path is the PATH a run gets from the server's: only the directories
// the run can see (the system view and --run-ro paths). The rest would
// only tell a tenant how the server's machine is laid out.
func (s *Sandbox) Path(server string) string {
	var keep []string
	for _, d := range filepath.SplitList(server) {
		visible := filepath.IsAbs(d) && s.inSystem(d)
		for _, sh := range s.cfg.Shared {
			visible = visible || d == sh || strings.HasPrefix(d, strings.TrimSuffix(sh, "/")+"/")
		}
		if visible && !slices.Contains(keep, d) {
			keep = append(keep, d)
		}
	}
	if len(keep) == 0 {
		return "/usr/local/bin:/usr/bin:/bin"
	}
	return strings.Join(keep, ":")
}

// Limits returns the limits runs get unless they say others.
func (s *Sandbox) Limits() Limits { return s.cfg.Limits }

// takeUID reserves a uid for a run: a free one of the range as root; the
// server's own otherwise (the namespaces still hide everything else).
func (s *Sandbox) takeUID() (uint32, error) {
	if !s.root {
		return uint32(os.Geteuid()), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range uint32(s.cfg.UIDs) {
		if uid := s.cfg.UIDBase + i; !s.used[uid] {
			s.used[uid] = true
			return uid, nil
		}
	}
	return 0, fmt.Errorf("sandbox: all %d run uids from %d are in use; raise the range", s.cfg.UIDs, s.cfg.UIDBase)
}

func (s *Sandbox) freeUID(uid uint32) {
	if !s.root {
		return
	}
	s.mu.Lock()
	delete(s.used, uid)
	s.mu.Unlock()
}

// systemTops are the directories of the read-only system view; on a
// merged-/usr system most are symlinks into /usr and stay symlinks.
var systemTops = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// systemEtc are the files of /etc programs need to start and to name
// things: the dynamic linker's cache, time zones, users and groups by
// name (no secrets: shadow stays out), alternatives, certificates.
var systemEtc = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives",
	"/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/protocols", "/etc/services",
	"/etc/ssl", "/etc/ca-certificates", "/etc/mime.types", "/etc/magic",
}

func systemView() []string {
	var args []string
	for _, p := range systemTops {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				args = append(args, "--symlink", target, p)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	for _, p := range systemEtc {
		args = append(args, "--ro-bind-try", p, p)
	}
	return args
}

// inSystem reports whether a path is already visible through the system
// view.
func (s *Sandbox) inSystem(p string) bool {
	for _, top := range append(systemTops, systemEtc...) {
		if p == top || strings.HasPrefix(p, top+"/") {
			return true
		}
	}
	return false
}

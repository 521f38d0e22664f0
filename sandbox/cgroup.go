package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// A run's processes go into a cgroup of their own when the server can
// make one, so that the kernel holds the run's memory (page cache aside,
// and its tmpfs /tmp included) and its tasks as a whole, exactly and
// before they are spent. Without one, Watched sums the run's processes
// from /proc, which misses the tmpfs and sees growth only every
// watchEvery.
//
// Both layouts are handled: cgroup v2 (one unified hierarchy; systemd's
// Delegate= gives a service a subtree of its own) and v1 (a hierarchy per
// controller, as on older hosts and some VMs, where root may make groups
// below its own). Either way the runs' groups live under one parent,
// plumb-runs, beside or below the server's own group, and are removed
// when their run ends.

// runsGroup is the directory, in each hierarchy, below which runs get
// their groups.
const runsGroup = "plumb-runs"

// cgroups is where this server makes its runs' groups: one directory for
// v2, one per controller (memory, pids) for v1.
type cgroups struct {
	v2   bool
	dirs []string // the plumb-runs directory of each hierarchy
	next atomic.Uint64
}

// runGroup is one run's group.
type runGroup struct {
	v2   bool
	dirs []string
}

// findCgroups finds or makes the parent of the runs' groups, and removes
// groups a previous server left (their runs died with it: bwrap's
// --die-with-parent). The error says why runs cannot have groups here.
func findCgroups() (*cgroups, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	paths := ownGroups(own)
	mnt := cgroupMounts(mounts)
	// v1 first: on a hybrid host the unified hierarchy has no
	// controllers, which the memory and pids hierarchies hold.
	var c *cgroups
	if m, p := mnt["memory"], mnt["pids"]; m.dir != "" && p.dir != "" {
		c, err = v1Groups(m, paths["memory"], p, paths["pids"])
	} else if u := mnt[""]; u.dir != "" {
		c, err = v2Groups(u, paths[""])
	} else {
		err = errors.New("no cgroup hierarchy with the memory and pids controllers is mounted")
	}
	if err != nil {
		return nil, err
	}
	c.sweep()
	return c, nil
}

// ownGroups reads /proc/self/cgroup: each hierarchy's controllers ("" for
// v2's) to this process's group in it.
func ownGroups(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			out[""] = f[2]
		}
		for _, ctl := range strings.Split(f[1], ",") {
			out[ctl] = f[2]
		}
	}
	return out
}

// mount is where a hierarchy is mounted, and which of its groups is the
// mount's root (not "/" inside a container).
type mount struct{ dir, root string }

// cgroupMounts reads /proc/self/mountinfo: the memory and pids v1
// hierarchies by controller, v2's as "".
func cgroupMounts(b []byte) map[string]mount {
	out := map[string]mount{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		m := mount{dir: unescape(f[4]), root: unescape(f[3])}
		switch g[0] {
		case "cgroup2":
			if _, seen := out[""]; !seen {
				out[""] = m
			}
		case "cgroup":
			for _, opt := range strings.Split(g[2], ",") {
				if opt == "memory" || opt == "pids" {
					out[opt] = m
				}
			}
		}
	}
	return out
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// groupDir is a group's directory under its hierarchy's mount.
func groupDir(m mount, group string) (string, error) {
	rel, err := filepath.Rel(m.root, group)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("this process's cgroup %s is outside the hierarchy mounted at %s", group, m.dir)
	}
	return filepath.Join(m.dir, rel), nil
}

func v1Groups(mem mount, memGroup string, pids mount, pidsGroup string) (*cgroups, error) {
	c := &cgroups{}
	for _, h := range []struct {
		m     mount
		group string
	}{{mem, memGroup}, {pids, pidsGroup}} {
		dir, err := groupDir(h.m, h.group)
		if err != nil {
			return nil, err
		}
		runs := filepath.Join(dir, runsGroup)
		if err := os.Mkdir(runs, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cannot make the runs' cgroup: %w", err)
		}
		c.dirs = append(c.dirs, runs)
	}
	return c, nil
}

// v2Groups needs the server's group delegated to it (systemd's
// Delegate=memory pids). The kernel lets a group hand controllers to its
// children only while it holds no process itself, so the server first
// moves into a leaf of its own, plumb-server, beside plumb-runs.
func v2Groups(u mount, group string) (*cgroups, error) {
	dir, err := groupDir(u, group)
	if err != nil {
		return nil, err
	}
	if filepath.Base(dir) == "plumb-server" {
		dir = filepath.Dir(dir) // a restart in the same process tree
	}
	have, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	for _, ctl := range []string{"memory", "pids"} {
		if !strings.Contains(" "+strings.TrimSpace(string(have))+" ", " "+ctl+" ") {
			return nil, fmt.Errorf("the %s controller is not delegated to this server's cgroup %s (systemd: Delegate=memory pids)", ctl, dir)
		}
	}
	enable := func(d string) error {
		return os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory +pids"), 0)
	}
	if err := enable(dir); errors.Is(err, syscall.EBUSY) {
		leaf := filepath.Join(dir, "plumb-server")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cannot make a cgroup for the server itself: %w", err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte("0"), 0); err != nil {
			return nil, fmt.Errorf("cannot move the server into %s: %w", leaf, err)
		}
		err = enable(dir)
		if err != nil {
			return nil, fmt.Errorf("cannot hand the memory and pids controllers to runs: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("cannot hand the memory and pids controllers to runs: %w", err)
	}
	runs := filepath.Join(dir, runsGroup)
	if err := os.Mkdir(runs, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cannot make the runs' cgroup: %w", err)
	}
	if err := enable(runs); err != nil {
		return nil, fmt.Errorf("cannot hand the memory and pids controllers to runs: %w", err)
	}
	return &cgroups{v2: true, dirs: []string{runs}}, nil
}

// String says where runs' groups are, for the server's log.
func (c *cgroups) String() string {
	v := "v1"
	if c.v2 {
		v = "v2"
	}
	return "cgroup " + v + ": " + strings.Join(c.dirs, ", ")
}

// sweep removes groups left by servers that are gone (a group is named
// for its server's pid); other servers, and other sandboxes of this one,
// may share the parent.
func (c *cgroups) sweep() {
	for _, d := range c.dirs {
		old, _ := filepath.Glob(filepath.Join(d, "run-*-*"))
		for _, g := range old {
			f := strings.Split(filepath.Base(g), "-")
			pid, err := strconv.Atoi(f[1])
			if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
				continue
			}
			(&runGroup{v2: c.v2, dirs: []string{g}}).remove()
		}
	}
}

// make makes a run's group with the run's limits: all its processes'
// memory together (without swap to spill into) and its tasks.
func (c *cgroups) make(lim Limits) (*runGroup, error) {
	name := fmt.Sprintf("run-%d-%d", os.Getpid(), c.next.Add(1))
	g := &runGroup{v2: c.v2}
	for _, d := range c.dirs {
		dir := filepath.Join(d, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("sandbox: make the run's cgroup: %w", err)
		}
		g.dirs = append(g.dirs, dir)
	}
	var set [][2]string
	if c.v2 {
		if lim.RunMemory > 0 {
			set = append(set, [2]string{"memory.max", strconv.FormatInt(lim.RunMemory, 10)}, [2]string{"memory.swap.max?", "0"}, [2]string{"memory.oom.group?", "1"})
		}
		if lim.Procs > 0 {
			set = append(set, [2]string{"pids.max", strconv.Itoa(lim.Procs)})
		}
	} else {
		if lim.RunMemory > 0 {
			// memsw (memory and swap together) exists only with swap
			// accounting, and may be set only after the memory limit.
			set = append(set, [2]string{"memory.limit_in_bytes", strconv.FormatInt(lim.RunMemory, 10)}, [2]string{"memory.memsw.limit_in_bytes?", strconv.FormatInt(lim.RunMemory, 10)})
		}
		if lim.Procs > 0 {
			set = append(set, [2]string{"pids.max", strconv.Itoa(lim.Procs)})
		}
	}
	for _, kv := range set {
		file, optional := strings.CutSuffix(kv[0], "?")
		var err error
		for _, dir := range g.dirs {
			if _, statErr := os.Stat(filepath.Join(dir, file)); statErr == nil {
				err = os.WriteFile(filepath.Join(dir, file), []byte(kv[1]), 0)
				break
			}
			err = os.ErrNotExist
		}
		if err != nil && !(optional && errors.Is(err, os.ErrNotExist)) {
			g.remove()
			return nil, fmt.Errorf("sandbox: set the run's %s to %s: %w", file, kv[1], err)
		}
	}
	return g, nil
}

// procs are the files a process writes "0" into to enter the group.
func (g *runGroup) procs() []string {
	var out []string
	for _, d := range g.dirs {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// over says which limit the run met, or "" if none: the kernel counted
// an OOM kill in the group or a refused fork.
func (g *runGroup) over(lim Limits) string {
	for _, d := range g.dirs {
		if n := counter(d, "memory.events", "oom_kill") + counter(d, "memory.oom_control", "oom_kill"); n > 0 {
			return fmt.Sprintf("its processes together reached the %d MiB a run may hold (--run-memory-all) and the kernel ended one", lim.RunMemory>>20)
		}
		if counter(d, "pids.events", "max") > 0 {
			return fmt.Sprintf("it tried to have more than the %d processes and threads a run may have (--run-procs)", lim.Procs)
		}
	}
	return ""
}

// counter reads "KEY N" from a flat-keyed cgroup file; 0 if absent.
func counter(dir, file, key string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// kill ends every process still in the group.
func (g *runGroup) kill() {
	if g.v2 {
		if os.WriteFile(filepath.Join(g.dirs[0], "cgroup.kill"), []byte("1"), 0) == nil {
			return
		}
	}
	for _, d := range g.dirs {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// remove kills what is left in the group and removes it; a group whose
// last process is still exiting is retried for a few seconds.
func (g *runGroup) remove() {
	g.kill()
	for _, d := range g.dirs {
		for i := 0; ; i++ {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) || i == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

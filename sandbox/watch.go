package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// watchEvery is how often a run's processes are summed against the
// per-run limits; its working directory is measured every diskEvery.
const (
	watchEvery = 100 * time.Millisecond
	diskEvery  = time.Second
)

// ErrOverLimit is wrapped by the error of a run stopped at a per-run
// limit (RunMemory, Procs, Disk).
var ErrOverLimit = errors.New("stage run stopped at a per-run limit")

// Watched runs a confined command, stopping the whole run when all its
// processes together pass a per-run limit. Rlimits bound each process:
// without this, two processes held twice the memory, an unprivileged
// server's run forked without bound (its uid is the server's, so
// RLIMIT_NPROC counts the server too), and the working directory took
// what the disk had. Where the run has a cgroup, the kernel holds memory
// and tasks exactly and the watch stops the run when the group says a
// limit was met; elsewhere the run's process tree is summed from /proc,
// and may pass a limit by what it grows in watchEvery before it is
// stopped.
type Watched struct {
	ctx     context.Context
	cmd     *exec.Cmd
	dir     string
	lim     Limits
	group   *runGroup
	why     atomic.Pointer[string]
	done    chan struct{}
	stopped chan struct{}
}

// Start starts the command and its watch.
func (w *Watched) Start() error {
	if err := w.cmd.Start(); err != nil {
		return err
	}
	w.done, w.stopped = make(chan struct{}), make(chan struct{})
	go w.watch(w.cmd.Process.Pid)
	return nil
}

// Wait waits for the command; a run stopped at a limit answers an error
// wrapping ErrOverLimit that says which.
func (w *Watched) Wait() error {
	err := w.cmd.Wait()
	if w.done != nil {
		close(w.done)
		<-w.stopped
	}
	if r := w.why.Load(); r != nil {
		return fmt.Errorf("%w: %s", ErrOverLimit, *r)
	}
	if w.group != nil && err != nil {
		// The kernel may have ended the run between two looks.
		if r := w.group.over(w.lim); r != "" {
			return fmt.Errorf("%w: %s", ErrOverLimit, r)
		}
	}
	return err
}

// Run starts the command and waits for it.
func (w *Watched) Run() error {
	if err := w.Start(); err != nil {
		return err
	}
	return w.Wait()
}

func (w *Watched) watch(pid int) {
	defer close(w.stopped)
	lim := w.lim
	if lim.RunMemory <= 0 && lim.Procs <= 0 && lim.Disk <= 0 {
		return
	}
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	var measured time.Time
	for {
		select {
		case <-w.done:
			return
		case <-w.ctx.Done():
			return
		case now := <-tick.C:
			reason := ""
			var tasks int
			var rss int64
			if w.group == nil {
				tasks, rss = tree(pid)
			} else {
				reason = w.group.over(lim)
			}
			switch {
			case reason != "":
			case lim.Procs > 0 && tasks > lim.Procs:
				reason = fmt.Sprintf("it had %d processes and threads, more than the %d a run may have (--run-procs)", tasks, lim.Procs)
			case lim.RunMemory > 0 && rss > lim.RunMemory:
				reason = fmt.Sprintf("its processes together held %d MiB, more than the %d MiB a run may (--run-memory-all)", rss>>20, lim.RunMemory>>20)
			}
			if reason == "" && lim.Disk > 0 && now.Sub(measured) >= diskEvery {
				measured = now
				if n := diskUsage(w.dir); n > lim.Disk {
					reason = fmt.Sprintf("its working directory held %d MiB, more than the %d MiB a run may write there (--run-disk)", n>>20, lim.Disk>>20)
				}
			}
			if reason != "" {
				w.why.Store(&reason)
				syscall.Kill(-pid, syscall.SIGKILL) // bwrap's group: its PID namespace dies with it
				if w.group != nil {
					w.group.kill()
				}
				return
			}
		}
	}
}

// tree sums the tasks (threads) and resident bytes of pid and its
// descendants, following /proc/PID/task/TID/children.
func tree(pid int) (tasks int, rss int64) {
	page := int64(os.Getpagesize())
	seen := map[int]bool{}
	next := []int{pid}
	for len(next) > 0 && len(seen) < 1<<16 {
		p := next[len(next)-1]
		next = next[:len(next)-1]
		if seen[p] {
			continue
		}
		seen[p] = true
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			continue // gone
		}
		// Fields after the command, which may hold spaces and parentheses.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
			f := bytes.Fields(stat[i+1:])
			// f[0] is field 3 (state): threads are field 20, rss field 24.
			if len(f) > 21 {
				n, _ := strconv.Atoi(string(f[17]))
				r, _ := strconv.ParseInt(string(f[21]), 10, 64)
				tasks += n
				rss += r * page
			}
		}
		tids, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tids {
			kids, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, k := range bytes.Fields(kids) {
				if c, err := strconv.Atoi(string(k)); err == nil {
					next = append(next, c)
				}
			}
		}
	}
	return tasks, rss
}

// diskUsage is what a directory's files take on disk (sparse files count
// what they hold, not their length).
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

//go:build linux

package program

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func threadNice(t *testing.T) int {
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	return 20 - raw
}

// TestBuiltinsRunBelowServing: an in-process builtin runs on a thread at
// the stage nice value, and the caller's thread keeps its priority.
func TestBuiltinsRunBelowServing(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadNice(t)
	var inside int
	if err := AtNice(10, func() error { inside = threadNice(t); return nil }); err != nil {
		t.Fatal(err)
	}
	if inside != max(10, before) {
		t.Errorf("a builtin ran at nice %d, want %d", inside, max(10, before))
	}
	if after := threadNice(t); after != before {
		t.Errorf("the caller's thread went from nice %d to %d", before, after)
	}
}

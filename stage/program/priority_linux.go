//go:build linux

package program

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// AtNice runs fn on an OS thread of its own at nice value nice (never
// above the server's own priority), and ends the thread with fn. Linux
// keeps a nice value per thread and a child process inherits its
// forking thread's, so an in-process builtin and an executable started
// from fn both run below the goroutines that serve reads and puts. The
// thread is not handed back to the Go runtime: with its lowered priority
// it would slow whatever ran on it next.
func AtNice(nice int, fn func() error) error {
	if nice <= 0 {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		tid := unix.Gettid()
		if raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil {
			// The raw system call answers 20 - nice; raising a nice value
			// needs no privilege, lowering one does.
			if own := 20 - raw; own < nice {
				unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
			}
		}
		errc <- fn()
	}()
	return <-errc
}

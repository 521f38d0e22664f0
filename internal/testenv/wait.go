package testenv

import (
	"testing"
	"time"
)

// WaitFor polls ok until it holds, and fails the test naming what it
// waited for when it has not held within the given time. Tests wait on a
// condition, never on a sleep: a busy machine takes longer, not
// differently. The polls start 20 ms apart and slow to 100 ms, so a
// condition that holds soon is seen soon, and one that costs a process
// or a download to check does not load a busy machine while it waits.
func WaitFor(t testing.TB, within time.Duration, what string, ok func() bool) {
	t.Helper()
	Eventually(t, within, what, func() (string, bool) { return "", ok() })
}

// Eventually is WaitFor for a condition that can say how far it got:
// poll returns what it saw and whether that is the end; on time out the
// test fails with what it saw last.
func Eventually(t testing.TB, within time.Duration, what string, poll func() (saw string, ok bool)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for pause := 20 * time.Millisecond; ; pause = min(pause*3/2, 100*time.Millisecond) {
		saw, ok := poll()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if saw != "" {
				t.Fatalf("waited %v for %s: %s", within, what, saw)
			}
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(pause)
	}
}

package testenv

import (
	"testing"
	"time"
)

// WaitFor polls ok every 20 ms until it holds, and fails the test naming
// what it waited for when it has not held within the given time. Tests
// wait on a condition, never on a sleep: a busy machine takes longer, not
// differently.
func WaitFor(t testing.TB, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

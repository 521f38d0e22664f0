package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/plumb-dev/plumb/internal/lifecycle"
)

// TestStopWaitsThenCleansUp: Stop returns only after every part has seen
// its context end and returned, and the clean-ups run after that, last
// added first.
func TestStopWaitsThenCleansUp(t *testing.T) {
	g := lifecycle.New(context.Background())
	var mu sync.Mutex
	var events []string
	note := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	started := make(chan struct{}, 2)
	for _, name := range []string{"a", "b"} {
		g.Go(func(ctx context.Context) error {
			started <- struct{}{}
			<-ctx.Done()
			note("part " + name + " returned")
			return ctx.Err() // an error after the stop is not a failure
		})
	}
	g.OnStop(func() { note("close store") })
	g.OnStop(func() { note("close tables") })
	<-started
	<-started
	if err := g.Stop(); err != nil {
		t.Fatalf("Stop: %v, want nil: no part failed", err)
	}
	if len(events) != 4 || !slices.Contains(events[:2], "part a returned") || !slices.Contains(events[:2], "part b returned") ||
		events[2] != "close tables" || events[3] != "close store" {
		t.Fatalf("events %q: want both parts returned, then the clean-ups last added first", events)
	}
	if err := g.Stop(); err != nil || len(events) != 4 {
		t.Fatalf("second Stop: %v, events %q: want nothing more", err, events)
	}
}

// TestFirstFailureStopsTheRest: a part that fails ends the others'
// context, and Stop and Err say which error did it.
func TestFirstFailureStopsTheRest(t *testing.T) {
	g := lifecycle.New(context.Background())
	broken := errors.New("listen: address in use")
	stopped := make(chan struct{})
	g.Go(func(ctx context.Context) error {
		<-ctx.Done()
		close(stopped)
		return nil
	})
	g.Go(func(context.Context) error { return broken })
	<-stopped
	if err := g.Stop(); !errors.Is(err, broken) {
		t.Fatalf("Stop: %v, want %v", err, broken)
	}
	if !errors.Is(g.Err(), broken) {
		t.Fatalf("Err: %v", g.Err())
	}
	if g.Context().Err() == nil {
		t.Fatal("the group's context did not end")
	}
}

// TestParentEndsTheGroup: when the process's context ends, so do the
// parts.
func TestParentEndsTheGroup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	g := lifecycle.New(ctx)
	done := make(chan struct{})
	g.Go(func(ctx context.Context) error { <-ctx.Done(); close(done); return nil })
	cancel()
	<-done
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
}

// A server's composition: its sweeps run as parts, the store they use is
// closed after they return.
func Example() {
	g := lifecycle.New(context.Background())
	g.OnStop(func() { fmt.Println("store closed") })
	swept := make(chan struct{})
	g.Go(func(ctx context.Context) error {
		fmt.Println("sweeping")
		close(swept)
		<-ctx.Done()
		fmt.Println("sweep stopped")
		return nil
	})
	<-swept
	if err := g.Stop(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// sweeping
	// sweep stopped
	// store closed
}

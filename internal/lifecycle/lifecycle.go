// Package lifecycle owns a process's long-running parts: each runs until
// the process stops or one of them fails, and the process returns only
// after every part has returned and what the parts used is closed, in the
// one order written here rather than in a pair of goroutine and deferred
// wait per part.
package lifecycle

import (
	"context"
	"sync"
)

// Group runs parts, each in its own goroutine, under one context. The
// first part to fail (return an error) stops the rest; Stop stops them all.
// After every part has returned, the clean-ups given to OnStop run, last
// given first, so a part never outlives what it uses.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	err      error
	cleanups []func()
}

// New returns a group whose parts stop when ctx ends.
func New(ctx context.Context) *Group {
	ctx, cancel := context.WithCancel(ctx)
	return &Group{ctx: ctx, cancel: cancel}
}

// Context ends when the group stops: when its parent ends, a part fails,
// or Stop is called. Work outside the parts (a server's handlers) that
// should end with them takes it.
func (g *Group) Context() context.Context { return g.ctx }

// Go runs part until its context ends. A part that returns an error before
// then stops the group, and Err says why; one that returns nil has simply
// finished its work.
func (g *Group) Go(part func(ctx context.Context) error) {
	g.wg.Go(func() {
		if err := part(g.ctx); err != nil && g.ctx.Err() == nil {
			g.mu.Lock()
			if g.err == nil {
				g.err = err
			}
			g.mu.Unlock()
			g.cancel()
		}
	})
}

// OnStop adds a clean-up that runs once every part has returned: closing
// what the parts used. Clean-ups run last added first.
func (g *Group) OnStop(cleanup func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cleanups = append(g.cleanups, cleanup)
}

// Stop ends the group's context, waits for every part and runs the
// clean-ups. It returns the first part's error, if one failed. Calling it
// again waits for nothing and returns the same error.
func (g *Group) Stop() error {
	g.cancel()
	g.wg.Wait()
	g.mu.Lock()
	cleanups := g.cleanups
	g.cleanups = nil
	err := g.err
	g.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	return err
}

// Err is the error of the first part that failed, or nil.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

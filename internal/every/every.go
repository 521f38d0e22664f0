// Package every runs a function every so often until its context ends:
// the one loop of a ticker and a select that the long-running parts of a
// process (sweeps, expiries, rereads) would otherwise each write again.
package every

import (
	"context"
	"time"
)

// Run calls fn every d until ctx ends, the first time after d. It
// returns when ctx ends; a call under way is let finish first.
func Run(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ctx.Err() != nil {
			return
		}
		fn()
	}
}

// RunNow is Run with a first call at once, before the first wait.
func RunNow(ctx context.Context, d time.Duration, fn func()) {
	if ctx.Err() != nil {
		return
	}
	fn()
	Run(ctx, d, fn)
}

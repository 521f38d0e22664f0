package every_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/plumb-dev/plumb/internal/every"
)

// TestRun: with simulated time, Run calls after each period and not
// before, RunNow calls at once too, and both return when the context
// ends without another call.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var at []time.Duration
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			every.Run(ctx, time.Minute, func() { at = append(at, time.Since(start)) })
		}()
		time.Sleep(3*time.Minute + time.Second)
		cancel()
		<-done
		if len(at) != 3 || at[0] != time.Minute || at[2] != 3*time.Minute {
			t.Errorf("Run called at %v, want 1m, 2m, 3m", at)
		}
		ctx, cancel = context.WithCancel(context.Background())
		n := 0
		done = make(chan struct{})
		go func() { defer close(done); every.RunNow(ctx, time.Hour, func() { n++ }) }()
		synctest.Wait()
		cancel()
		<-done
		if n != 1 {
			t.Errorf("RunNow called %d times before the first period, want 1", n)
		}
	})
}

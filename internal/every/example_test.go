package every_test

import (
	"context"
	"fmt"
	"time"

	"github.com/plumb-dev/plumb/internal/every"
)

// A sweep that runs at once and then every 10 ms, until its context
// ends; the caller owns the goroutine and waits for it.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		every.RunNow(ctx, 10*time.Millisecond, func() {
			if n++; n == 3 {
				cancel()
			}
		})
	}()
	<-done
	fmt.Println("swept", n, "times")
	// Output: swept 3 times
}

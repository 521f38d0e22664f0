package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
)

func followCommand() command {
	var (
		group, out, from string
		once             bool
	)
	return clientCommand("follow", "QUEUE --group G --out DIR", "receive a queue's blocks as a consumer group into a directory, acking each once it is on disk", 1,
		func(fs *flag.FlagSet) {
			fs.StringVar(&group, "group", "", "consumer `GROUP` (required, except with --once: then a temporary group deleted at the end)")
			fs.StringVar(&out, "out", "", "`DIR` to write blocks into (required)")
			fs.StringVar(&from, "from", "latest", "where a new group starts: earliest, latest, or a `TIME` in RFC 3339 (2025-05-05T00:00:00Z: the blocks kept from that event time on, and all that arrive)")
			fs.BoolVar(&once, "once", false, "stop when no block is owed instead of waiting for more")
		},
		func(ctx context.Context, c *client.Client, args []string) error {
			if out == "" || group == "" && !once {
				return errUsage
			}
			if err := flight.Start(from).Valid(); err != nil {
				return fmt.Errorf("--%w", err)
			}
			switch known, err := queueKnown(ctx, c, args[0]); {
			case err != nil:
				return err
			case !known && once:
				return fmt.Errorf("no queue %q (plumb queues lists those you may read)", args[0])
			case !known:
				fmt.Fprintf(os.Stderr, "plumb follow: queue %q holds no block yet (plumb queues lists those that do); waiting for its first\n", args[0])
			}
			if group == "" { // --once, checked above
				// A one-off look: a group of its own, deleted at the end, so
				// it pins nothing afterwards.
				group = fmt.Sprintf("tmp-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
				defer func() {
					dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
					defer cancel()
					if err := c.DeleteGroup(dctx, args[0], group); err != nil {
						fmt.Fprintf(os.Stderr, "plumb follow: the temporary group %s was not deleted (%v); delete it with `plumb group delete %s %s`\n", group, err, args[0], group)
					}
				}()
			}
			if err := os.MkdirAll(out, 0o750); err != nil {
				return err
			}
			t := flight.Ticket{Queue: args[0], Group: group, Follow: !once, From: flight.Start(from)}
			backoff := time.Second
			for {
				err := followOnce(ctx, c, t, out)
				if err == nil || ctx.Err() != nil {
					return nil
				}
				if !client.Transient(err) {
					return err
				}
				fmt.Fprintf(os.Stderr, "plumb follow: %v; reconnecting in %s\n", err, backoff)
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 30*time.Second)
			}
		})
}

func followOnce(ctx context.Context, c *client.Client, t flight.Ticket, out string) error {
	err := c.Consume(ctx, t, func(h flight.Header, r io.Reader) error {
		if err := writeAtomic(filepath.Join(out, h.Name), r); err != nil {
			return err
		}
		fmt.Println(h.Name)
		return nil
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

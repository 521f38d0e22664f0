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

	"github.com/plumb-dev/plumb/flight"
)

func followCommand() command {
	return command{
		name:  "follow",
		usage: "QUEUE --group G --out DIR",
		short: "receive a queue's blocks as a consumer group into a directory, acking each once it is on disk",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			server := serverFlag(fs)
			group := fs.String("group", "", "consumer `GROUP` (required)")
			out := fs.String("out", "", "`DIR` to write blocks into (required)")
			from := fs.String("from", "latest", "where a new group starts: earliest or latest")
			once := fs.Bool("once", false, "stop when no block is owed instead of waiting for more")
			pos, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if len(pos) != 1 || *group == "" || *out == "" {
				return errUsage
			}
			if err := os.MkdirAll(*out, 0o750); err != nil {
				return err
			}
			c, err := dial(*server)
			if err != nil {
				return err
			}
			defer c.Close()
			queue := pos[0]
			backoff := time.Second
			for {
				err := followOnce(ctx, c, flight.Ticket{Queue: queue, Group: *group, Follow: !*once, From: *from}, *out)
				if err == nil || ctx.Err() != nil {
					return nil
				}
				if !flight.Transient(err) {
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
		},
	}
}

func followOnce(ctx context.Context, c *flight.Client, t flight.Ticket, out string) error {
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

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"
)

func queuesCommand() command {
	return command{
		name:  "queues",
		short: "list the server's queues with block counts, bytes and consumer groups",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			server := serverFlag(fs)
			if err := fs.Parse(args); err != nil {
				return err
			}
			if fs.NArg() != 0 {
				return errUsage
			}
			c, err := dial(*server)
			if err != nil {
				return err
			}
			defer c.Close()
			qs, err := c.Queues(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "QUEUE\tBLOCKS\tBYTES\tGROUPS (owed/reserved/done)")
			for _, q := range qs {
				groups := ""
				for _, g := range q.Groups {
					groups += fmt.Sprintf("%s:%d/%d/%d ", g.Group, g.Unreserved, g.Reserved, g.Done)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", q.Queue, q.Blocks, q.Bytes, groups)
			}
			return tw.Flush()
		},
	}
}

func blocksCommand() command {
	return command{
		name:  "blocks",
		usage: "QUEUE",
		short: "list a queue's blocks in arrival order",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			server := serverFlag(fs)
			if err := fs.Parse(args); err != nil {
				return err
			}
			if fs.NArg() != 1 {
				return errUsage
			}
			c, err := dial(*server)
			if err != nil {
				return err
			}
			defer c.Close()
			bs, err := c.Blocks(ctx, fs.Arg(0))
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tSHA256\tARRIVED")
			for _, b := range bs {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", b.Name, b.Size, b.SHA256, b.Arrived.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
}

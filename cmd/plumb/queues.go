package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/plumb-dev/plumb/client"
)

func queuesCommand() command {
	return clientCommand("queues", "", "list the server's queues with block counts, bytes and consumer groups", 0, nil,
		func(ctx context.Context, c *client.Client, _ []string) error {
			qs, err := c.Queues(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "QUEUE\tBLOCKS\tBYTES\tGROUPS (owed/reserved/done)")
			var notes []string
			for _, q := range qs {
				groups := ""
				for _, g := range q.Groups {
					name := g.Group
					if g.Stage != "" {
						name = g.Stage // people know stages by name, not by group id
					}
					groups += fmt.Sprintf("%s:%d/%d/%d ", name, g.Unreserved, g.Reserved, g.Done)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", q.Queue, q.Blocks, humanBytes(q.Bytes), groups)
				if q.Warning != "" {
					notes = append(notes, "warning: queue "+q.Queue+": "+q.Warning)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, n := range notes {
				fmt.Println(n)
			}
			return nil
		})
}

func blocksCommand() command {
	return clientCommand("blocks", "QUEUE", "list a queue's blocks in arrival order", 1, nil,
		func(ctx context.Context, c *client.Client, args []string) error {
			bs, err := c.Blocks(ctx, args[0])
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tSHA256\tARRIVED")
			for _, b := range bs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Name, humanBytes(b.Size), b.SHA256, b.Arrived.Format(time.RFC3339))
			}
			return tw.Flush()
		})
}

// humanBytes prints a size as a reader takes it in at a glance: "46.8
// KiB", "1.2 GiB"; bytes below a KiB as they are.
func humanBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}

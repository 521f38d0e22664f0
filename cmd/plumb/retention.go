package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/plumb-dev/plumb/flight"
)

func retentionCommand() command {
	var drop *bool
	return clientCommand("retention", "[QUEUE [RETENTION]]", "show every queue's retention, or set a source queue's (forever, 30d, 500GiB, 30d,500GiB; \"\" removes it)", anyArgs,
		func(fs *flag.FlagSet) {
			drop = fs.Bool("drop-unconsumed", false, "let blocks go even while a subscriber still owes them (it is told which: plumb lost)")
		},
		func(ctx context.Context, c *flight.Client, pos []string) error {
			switch len(pos) {
			case 2:
				p, err := c.SetRetention(ctx, pos[0], pos[1], *drop)
				if err != nil {
					return err
				}
				fmt.Printf("%s: retention %q, drop unconsumed %v\n", pos[0], p.Retention, p.DropUnconsumed)
				return nil
			case 0, 1:
				rows, err := c.Retentions(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "QUEUE\tRETENTION\tDROP UNCONSUMED\tSET BY")
				for _, r := range rows {
					if len(pos) == 1 && r.Queue != pos[0] {
						continue
					}
					fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", r.Queue, r.Retention, r.DropUnconsumed, r.By)
				}
				return tw.Flush()
			}
			return errUsage
		})
}

func lostCommand() command {
	var group *string
	return clientCommand("lost", "QUEUE", "list blocks the queue's retention dropped before a subscriber was done with them", 1,
		func(fs *flag.FlagSet) { group = fs.String("group", "", "only this consumer group's") },
		func(ctx context.Context, c *flight.Client, pos []string) error {
			ls, err := c.LostBlocks(ctx, pos[0], *group)
			if err != nil {
				return err
			}
			for _, l := range ls {
				fmt.Printf("%s\tfor %s\t%s\n", l.Block, l.Group, l.Why)
			}
			return nil
		})
}

func fsckCommand() command {
	var repair, verify *bool
	var grace *time.Duration
	return clientCommand("fsck", "", "check the server's metadata against its blobs; --repair deletes old orphan blobs and marks blocks with missing bytes lost", 0,
		func(fs *flag.FlagSet) {
			repair = fs.Bool("repair", false, "delete orphan blobs older than --grace and mark blocks whose blob is missing or corrupt lost")
			verify = fs.Bool("verify", false, "read every blob and check its SHA-256 (slow), not only its size")
			grace = fs.Duration("grace", time.Hour, "leave orphan blobs younger than this (uploads about to commit)")
		},
		func(ctx context.Context, c *flight.Client, _ []string) error {
			rep, err := c.Fsck(ctx, flight.FsckRequest{Repair: *repair, Verify: *verify, GraceSeconds: grace.Seconds()})
			if err != nil {
				return err
			}
			fmt.Println(rep)
			for _, n := range rep.Missing {
				fmt.Println("missing:", n)
			}
			for _, n := range rep.Corrupt {
				fmt.Println("corrupt:", n)
			}
			if !rep.Clean() && !*repair {
				return fmt.Errorf("fsck found problems; run `plumb fsck --repair` to mend what can be")
			}
			return nil
		})
}

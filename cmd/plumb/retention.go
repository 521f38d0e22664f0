//go:build !agent

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/fsck"
)

func retentionCommand() command {
	var drop *bool
	return clientCommand("retention", "[QUEUE [RETENTION]]", "show every queue's retention, or set a source queue's (forever, 30d, 500GiB, 30d,500GiB; \"\" removes it)", anyArgs,
		func(fs *flag.FlagSet) {
			drop = fs.Bool("drop-unconsumed", false, "let blocks go even while a subscriber still owes them (it is told which: plumb lost)")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
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
		func(ctx context.Context, c *client.Client, pos []string) error {
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
		func(ctx context.Context, c *client.Client, _ []string) error {
			var rep fsck.Report
			err := c.Do(ctx, flight.ActFsck, flight.FsckRequest{Repair: *repair, Verify: *verify, GraceSeconds: grace.Seconds()}, &rep)
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

func storeCommand() command {
	var deadline *time.Duration
	var workers *int
	return clientCommand("store", "list | add NAME URL | drain NAME | remove NAME", "manage the server's blob stores: add one, drain one into the others while reads go on, remove an empty one", anyArgs,
		func(fs *flag.FlagSet) {
			deadline = fs.Duration("deadline", 30*time.Second, "drain: stop after this long and list what was not moved")
			workers = fs.Int("workers", 4, "drain: blobs moved at once")
		},
		func(ctx context.Context, c *client.Client, pos []string) error {
			switch {
			case len(pos) == 1 && pos[0] == "list":
				ms, err := client.List[blob.MemberInfo](ctx, c, flight.ActStoreList, struct{}{})
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "STORE\tURL\tSTATE\tFREE\tTOTAL")
				for _, m := range ms {
					st := "active"
					switch {
					case m.Draining:
						st = "draining"
					case m.Primary:
						st = "primary"
					}
					free, total := "-", "-"
					if m.Free >= 0 {
						free, total = fmt.Sprintf("%d MiB", m.Free>>20), fmt.Sprintf("%d MiB", m.Total>>20)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, m.URL, st, free, total)
				}
				return tw.Flush()
			case len(pos) == 3 && pos[0] == "add":
				var out map[string]string
				return c.Do(ctx, flight.ActStoreAdd, flight.StoreRequest{Name: pos[1], URL: pos[2]}, &out)
			case len(pos) == 2 && pos[0] == "remove":
				var out map[string]string
				return c.Do(ctx, flight.ActStoreRemove, flight.StoreRequest{Name: pos[1]}, &out)
			case len(pos) == 2 && pos[0] == "drain":
				var rep blob.DrainReport
				err := c.Do(ctx, flight.ActStoreDrain, flight.StoreRequest{Name: pos[1], DeadlineSeconds: deadline.Seconds(), Workers: *workers}, &rep)
				if err != nil {
					return err
				}
				fmt.Printf("moved %d blobs (%.1f MiB) off %s in %.1fs (%.0f MiB/s); %d left\n", rep.Moved, float64(rep.Bytes)/(1<<20), pos[1],
					rep.Seconds, float64(rep.Bytes)/(1<<20)/max(rep.Seconds, 1e-9), len(rep.Left))
				for _, k := range rep.Left {
					fmt.Println("not moved:", k)
				}
				if len(rep.Left) > 0 {
					return fmt.Errorf("%d blobs are still on %s; run the drain again with a longer --deadline", len(rep.Left), pos[1])
				}
				return nil
			}
			return errUsage
		})
}

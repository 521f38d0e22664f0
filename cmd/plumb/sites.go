package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/plumb-dev/plumb/client"
)

func siteCommand() command {
	return clientCommand("site", "owners [QUEUE] | assign QUEUE SITE USER | release QUEUE SITE | end QUEUE SITE",
		"list who may put blocks into each site (its first writer, or whom an admin assigned), assign or release one, or end the capture of one whose agent died (admin)", -1, nil,
		func(ctx context.Context, c *client.Client, args []string) error {
			switch verb, rest := args[0], args[1:]; {
			case verb == "owners" && len(rest) <= 1:
				queue := ""
				if len(rest) == 1 {
					queue = rest[0]
				}
				owners, err := c.SiteOwners(ctx, queue)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "QUEUE\tSITE\tOWNER\tSINCE\tBY")
				for _, o := range owners {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.Queue, o.Instance, o.User, o.Since.Local().Format(time.DateTime), o.By)
				}
				return tw.Flush()
			case verb == "assign" && len(rest) == 3:
				if _, err := c.AssignSite(ctx, rest[0], rest[1], rest[2]); err != nil {
					return err
				}
				fmt.Printf("site %s of %s assigned to %s\n", rest[1], rest[0], rest[2])
				return nil
			case verb == "release" && len(rest) == 2:
				if _, err := c.AssignSite(ctx, rest[0], rest[1], ""); err != nil {
					return err
				}
				fmt.Printf("site %s of %s has no owner: its next writer claims it\n", rest[1], rest[0])
				return nil
			case verb == "end" && len(rest) == 2:
				res, err := c.EndCapture(ctx, rest[0], rest[1])
				if err != nil {
					return err
				}
				if !res.Ended {
					fmt.Printf("site %s of %s already ends with block %s, marked final\n", rest[1], rest[0], res.Block)
					return nil
				}
				fmt.Printf("site %s of %s ended with block %s: stages let go of what they held for it\n", rest[1], rest[0], res.Block)
				return nil
			}
			return errUsage
		})
}

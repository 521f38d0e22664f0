package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/plumb-dev/plumb/client"
)

func groupCommand() command {
	return clientCommand("group", "list QUEUE | delete QUEUE GROUP", "list a queue's consumer groups, or delete one (its creator or an admin), releasing what it was owed", -1, nil,
		func(ctx context.Context, c *client.Client, args []string) error {
			switch verb, rest := args[0], args[1:]; {
			case verb == "list" && len(rest) == 1:
				gs, err := c.Groups(ctx, rest[0])
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "GROUP\tOWNER\tOWED\tRESERVED\tDONE\tFAULTY\tLAST USED")
				for _, g := range gs {
					used := "-"
					if !g.Used.IsZero() {
						used = g.Used.Format(time.DateTime)
					} else if !g.Created.IsZero() {
						used = g.Created.Format(time.DateTime) + " (created)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", g.Group, g.Owner, g.Unreserved, g.Reserved, g.Done, g.Faulty, used)
				}
				return tw.Flush()
			case verb == "delete" && len(rest) == 2:
				if err := c.DeleteGroup(ctx, rest[0], rest[1]); err != nil {
					return err
				}
				fmt.Printf("consumer group %s of %s deleted\n", rest[1], rest[0])
				return nil
			}
			return errUsage
		})
}

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
)

func programCommand() command {
	var sha *string
	var network *bool
	return clientCommand("program", "add NAME PATH [--sha256 HEX] [--network] | list | remove NAME",
		"register the executables jobs may run (admin): PATH is on the server, which keeps a copy by checksum", -1,
		func(fs *flag.FlagSet) {
			sha = fs.String("sha256", "", "refuse the file unless its SHA-256 is `HEX`")
			network = fs.Bool("network", false, "let stages that ask for it (network: true) reach the network")
		},
		func(ctx context.Context, c *client.Client, args []string) error {
			switch verb, rest := args[0], args[1:]; {
			case verb == "add" && len(rest) == 2:
				p, err := c.AddProgram(ctx, flight.AddProgramRequest{Name: rest[0], Path: rest[1], SHA256: *sha, Network: *network})
				if err != nil {
					return err
				}
				fmt.Printf("program %s registered: %s (sha256 %s); jobs name it as [%s, ARGS...]\n", p.Name, p.Source, p.SHA256, p.Name)
				return nil
			case verb == "list" && len(rest) == 0:
				ps, err := c.Programs(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PROGRAM\tSOURCE\tSHA256\tNETWORK\tADDED BY")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", p.Name, p.Source, p.SHA256[:16], p.Network, p.AddedBy)
				}
				return tw.Flush()
			case verb == "remove" && len(rest) == 1:
				if err := c.RemoveProgram(ctx, rest[0]); err != nil {
					return err
				}
				fmt.Printf("program %s removed\n", rest[0])
				return nil
			}
			return errUsage
		})
}

package main

import (
	"cmp"
	"context"
	"flag"
	"os"

	"github.com/plumb-dev/plumb/flight"
)

// serverFlag adds --server, defaulting to $PLUMB_SERVER or 127.0.0.1:8815.
func serverFlag(fs *flag.FlagSet) *string {
	return fs.String("server", cmp.Or(os.Getenv("PLUMB_SERVER"), "127.0.0.1:8815"), "server `ADDR` (also from PLUMB_SERVER)")
}

// optionalArg as clientCommand's nargs takes zero or one argument; -1
// takes one or more; anyArgs any number (the command checks).
const (
	optionalArg = -2
	anyArgs     = -3
)

// clientCommand is a subcommand that talks to a server: it parses the
// flags (before or after the arguments), checks the argument count, dials
// --server and hands the client to do.
func clientCommand(name, usage, short string, nargs int, flags func(fs *flag.FlagSet),
	do func(ctx context.Context, c *flight.Client, args []string) error) command {
	return command{name: name, usage: usage, short: short,
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			server := serverFlag(fs)
			if flags != nil {
				flags(fs)
			}
			pos, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			switch {
			case nargs == optionalArg && len(pos) > 1,
				nargs >= 0 && len(pos) != nargs,
				nargs == -1 && len(pos) == 0:
				return errUsage
			}
			c, err := flight.Dial(*server)
			if err != nil {
				return err
			}
			defer c.Close()
			return do(ctx, c, pos)
		}}
}

package main

import (
	"cmp"
	"flag"
	"os"

	"github.com/plumb-dev/plumb/flight"
)

// serverFlag adds --server, defaulting to $PLUMB_SERVER or 127.0.0.1:8815.
func serverFlag(fs *flag.FlagSet) *string {
	return fs.String("server", cmp.Or(os.Getenv("PLUMB_SERVER"), "127.0.0.1:8815"), "server `ADDR` (also from PLUMB_SERVER)")
}

func dial(addr string) (*flight.Client, error) { return flight.Dial(addr) }

//go:build !agent

package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/server"
)

func rotateTokenKeyCommand() command {
	var keep *bool
	return clientCommand("rotate-token-key", "", "make a new key for signing login tokens on every server sharing the metadata (admin); --keep leaves tokens signed before good until they expire", 0,
		func(fs *flag.FlagSet) {
			keep = fs.Bool("keep", false, "tokens signed with the old key stay good until they expire (a routine rotation); without it they are refused at once (a key that leaked)")
		},
		func(ctx context.Context, c *client.Client, _ []string) error {
			if err := c.Do(ctx, flight.ActRotateTokenKey, flight.RotateTokenKeyRequest{Keep: *keep}, nil); err != nil {
				return err
			}
			if *keep {
				fmt.Fprintf(os.Stderr, "token signing key rotated; tokens signed before stay good until they expire; every server sharing the metadata signs with the new key within %v\n", server.TokenKeysEvery)
			} else {
				fmt.Fprintf(os.Stderr, "token signing key rotated; every token signed before is refused, on every server sharing the metadata within %v: users log in again (API keys stay good)\n", server.TokenKeysEvery)
			}
			return nil
		})
}

package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"os"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
)

// serverFlag adds --server, defaulting to $PLUMB_SERVER or 127.0.0.1:8815.
func serverFlag(fs *flag.FlagSet) *string {
	return fs.String("server", cmp.Or(os.Getenv("PLUMB_SERVER"), "127.0.0.1:8815"), "server `ADDR` (also from PLUMB_SERVER); several servers sharing their metadata comma-separated, or one DNS name with a record for each")
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
	do func(ctx context.Context, c *client.Client, args []string) error) command {
	return command{name: name, usage: usage, short: short,
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			server := serverFlag(fs)
			sec := securityFlags(fs)
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
			sec.Secret = os.Getenv("PLUMB_SECRET")
			c, err := client.DialSecure(*server, *sec)
			if err != nil {
				return err
			}
			defer c.Close()
			return do(ctx, c, pos)
		}}
}

// securityFlags adds how to reach a server that wants TLS or a login:
// --tls, --tls-ca, --tls-server-name, --token-file (or PLUMB_TOKEN_FILE),
// --user (or PLUMB_USER, with the secret in PLUMB_SECRET).
func securityFlags(fs *flag.FlagSet) *client.Security {
	var sec client.Security
	fs.BoolVar(&sec.TLS, "tls", false, "connect with TLS, verifying the server against the system's roots")
	fs.StringVar(&sec.CAFile, "tls-ca", os.Getenv("PLUMB_TLS_CA"), "connect with TLS, verifying the server against the PEM roots in `FILE` (also PLUMB_TLS_CA)")
	fs.StringVar(&sec.ServerName, "tls-server-name", "", "`NAME` to verify in the server's certificate, when it differs from --server")
	fs.StringVar(&sec.CertFile, "tls-client-cert", "", "present the PEM client certificate in `FILE` (mutual TLS; with --tls-client-key)")
	fs.StringVar(&sec.KeyFile, "tls-client-key", "", "the PEM private key of --tls-client-cert in `FILE`")
	fs.StringVar(&sec.TokenFile, "token-file", os.Getenv("PLUMB_TOKEN_FILE"), "send the token or API key in `FILE` on every call (also PLUMB_TOKEN_FILE)")
	fs.StringVar(&sec.User, "user", os.Getenv("PLUMB_USER"), "log in as `NAME` with the secret in PLUMB_SECRET (also PLUMB_USER)")
	return &sec
}

// queueKnown says whether the server has the queue (it holds blocks, or
// a stage reads or writes it) among those the caller may read: a typo
// in a queue's name should not read as a queue with nothing in it.
func queueKnown(ctx context.Context, c *client.Client, queue string) (bool, error) {
	_, err := client.List[flight.Block](ctx, c, flight.ActListBlocks, flight.ListBlocksRequest{Queue: queue, Limit: 1})
	if errors.Is(err, client.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/plumb-dev/plumb/flight"
)

func serveCommand() command {
	return command{
		name:  "serve",
		usage: "",
		short: "run the Plumb server (Arrow Flight) on a data directory",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			var cfg flight.Config
			fs.StringVar(&cfg.Data, "data", "plumb-data", "data `DIR`: metadata, and blobs unless --store says otherwise")
			fs.StringVar(&cfg.Store, "store", "", "blob store `URL`: file:///DIR or s3://BUCKET?endpoint=HOST:PORT (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY); default DATA/blobs")
			fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8815", "`ADDR` to serve Arrow Flight on")
			fs.DurationVar(&cfg.Visibility, "visibility", 60*time.Second, "how long a block handed to a consumer group stays reserved without an ack")
			level := fs.String("log-level", "info", "log level: debug, info, warn, error")
			if err := fs.Parse(args); err != nil {
				return err
			}
			if fs.NArg() != 0 {
				return errUsage
			}
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(*level)); err != nil {
				return err
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
			return flight.Run(ctx, cfg)
		},
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/plumb-dev/plumb/rssac"
)

func rssacCommand() command {
	return command{
		name:  "rssac",
		usage: "--service NAME --date YYYY-MM-DD FILE...",
		short: "compute a day's RSSAC002 metrics from dns.arrow blocks or captures",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			service := fs.String("service", "", "the service the metrics describe, e.g. a.root-servers.net")
			date := fs.String("date", "", "the UTC day, YYYY-MM-DD")
			out := fs.String("o", "-", "output `FILE`, or - for stdout")
			files, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if *service == "" || *date == "" || len(files) == 0 {
				return errUsage
			}
			day, err := time.Parse(time.DateOnly, *date)
			if err != nil {
				return fmt.Errorf("--date %q: want YYYY-MM-DD", *date)
			}
			d := rssac.NewDay()
			for _, f := range files {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				data, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				if err := d.AddFile(data, rssac.UTCDay(day)); err != nil {
					return fmt.Errorf("%s: %w (give dns.arrow blocks or captures)", f, err)
				}
			}
			w := os.Stdout
			if *out != "-" {
				if w, err = os.Create(*out); err != nil {
					return err
				}
			}
			err = d.Write(w, *service, day)
			if w != os.Stdout {
				err = errors.Join(err, w.Close())
			}
			return err
		},
	}
}

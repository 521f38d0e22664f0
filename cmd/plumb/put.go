package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
)

func putCommand() command {
	return command{
		name:  "put",
		usage: "FILE...",
		short: "upload files as blocks; each file's base name is its block name unless --name is given",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			server := serverFlag(fs)
			asName := fs.String("name", "", "block `NAME` for a single FILE (YYYYMMDD-HHMMSS-SEQ[-INFO].INSTANCE.QUEUE)")
			if err := fs.Parse(args); err != nil {
				return err
			}
			files := fs.Args()
			if len(files) == 0 || *asName != "" && len(files) != 1 {
				return errUsage
			}
			// One stream per queue and instance, in the order given.
			type key struct{ queue, instance string }
			var order []key
			groups := map[key][]flight.Source{}
			for _, f := range files {
				src, err := flight.FileSource(f)
				if *asName != "" {
					src, err = namedSource(f, *asName)
				}
				if err != nil {
					return err
				}
				n, _ := block.Parse(src.Name)
				k := key{n.Queue, n.Instance}
				if _, ok := groups[k]; !ok {
					order = append(order, k)
				}
				groups[k] = append(groups[k], src)
			}
			c, err := dial(*server)
			if err != nil {
				return err
			}
			defer c.Close()
			for _, k := range order {
				res, err := c.Put(ctx, groups[k]...)
				for _, r := range res {
					fmt.Fprintf(os.Stdout, "%s\t%s\n", r.Status, r.Name)
				}
				if err != nil {
					return fmt.Errorf("queue %s instance %s: %w", k.queue, k.instance, err)
				}
			}
			return nil
		},
	}
}

func namedSource(path, name string) (flight.Source, error) {
	if _, err := block.Parse(name); err != nil {
		return flight.Source{}, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return flight.Source{}, err
	}
	return flight.Source{Name: name, Size: fi.Size(), Open: func() (io.ReadCloser, error) { return os.Open(path) }}, nil
}

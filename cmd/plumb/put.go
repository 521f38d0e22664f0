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
	var asName string
	return clientCommand("put", "FILE...", "upload files as blocks; each file's base name is its block name unless --name is given", -1,
		func(fs *flag.FlagSet) {
			fs.StringVar(&asName, "name", "", "block `NAME` for a single FILE (YYYYMMDD-HHMMSS-SEQ[-INFO].INSTANCE.QUEUE)")
		},
		func(ctx context.Context, c *flight.Client, files []string) error {
			if asName != "" && len(files) != 1 {
				return errUsage
			}
			// One stream per queue and instance, in the order given.
			type key struct{ queue, instance string }
			var order []key
			groups := map[key][]flight.Source{}
			for _, f := range files {
				src, err := flight.FileSource(f)
				if asName != "" {
					src, err = namedSource(f, asName)
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
		})
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

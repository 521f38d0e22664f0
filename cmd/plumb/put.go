package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
)

func putCommand() command {
	var asName string
	return clientCommand("put", "FILE...", "upload files as blocks; each file's base name is its block name unless --name is given", -1,
		func(fs *flag.FlagSet) {
			fs.StringVar(&asName, "name", "", "block `NAME` for a single FILE (YYYYMMDD-HHMMSS-SEQ[-INFO].INSTANCE.QUEUE)")
		},
		func(ctx context.Context, c *client.Client, files []string) error {
			if asName != "" && len(files) != 1 {
				return errUsage
			}
			// One stream per queue and instance, in the order given.
			type key struct{ queue, instance string }
			var order []key
			groups := map[key][]client.Source{}
			for _, f := range files {
				src, err := client.FileSource(f)
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

func namedSource(path, name string) (client.Source, error) {
	if _, err := block.Parse(name); err != nil {
		return client.Source{}, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return client.Source{}, err
	}
	return client.Source{Name: name, Size: fi.Size(), Open: func() (io.ReadCloser, error) { return os.Open(path) }}, nil
}

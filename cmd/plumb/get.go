package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/plumb-dev/plumb/client"
)

func getCommand() command {
	var out string
	return clientCommand("get", "NAME", "download one block (checked against its SHA-256) to a file, a directory or stdout", 1,
		func(fs *flag.FlagSet) {
			fs.StringVar(&out, "o", ".", "output `PATH`: a directory (the block keeps its name), a file, or - for stdout")
		},
		func(ctx context.Context, c *client.Client, args []string) error {
			s, err := c.Get(ctx, args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			if !s.Next() {
				if s.Err() != nil {
					return s.Err()
				}
				return fmt.Errorf("block %s: the server sent nothing", args[0])
			}
			if out == "-" {
				_, err := io.Copy(os.Stdout, s)
				return err
			}
			path := out
			if fi, err := os.Stat(path); err == nil && fi.IsDir() {
				path = filepath.Join(path, s.Header().Name)
			}
			return writeAtomic(path, s)
		})
}

// writeAtomic writes r to path through a temp file, fsync and rename, so a
// reader of path never sees a partial file and a crash loses nothing that
// was reported written.
//
// An existing path that is not a regular file (a device such as
// /dev/null, a FIFO) is written into directly: renaming over it would
// replace the device node with a file (as root, /dev/null itself).
func writeAtomic(path string, r io.Reader) error {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

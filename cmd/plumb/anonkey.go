package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func anonKeyCommand() command {
	return command{
		name:  "anon-key",
		usage: "NAME [--dir DIR]",
		short: "make a random Crypto-PAn key for builtin:anonymize?key=NAME (never overwrites one)",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			dir := fs.String("dir", filepath.Join("plumb-data", "keys"), "the server's --anon-keys `DIR`")
			pos, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if len(pos) != 1 {
				return errUsage
			}
			name := pos[0]
			if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") || len(name) > 64 {
				return fmt.Errorf("key name %q: a plain file name, at most 64 characters", name)
			}
			if err := os.MkdirAll(*dir, 0o700); err != nil {
				return err
			}
			key := make([]byte, 32)
			rand.Read(key)
			path := filepath.Join(*dir, name)
			// O_EXCL: a key in use keeps its mapping; replacing it would
			// break every anonymized copy made with it.
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("key %s exists; it is kept (the same key keeps the same mapping across blocks and sites)", path)
			}
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintln(f, hex.EncodeToString(key)); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "key %s written (mode 600); name it in a job as builtin:anonymize?key=%s, and copy it to workers' --anon-keys\n", path, name)
			return nil
		},
	}
}

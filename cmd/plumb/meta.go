//go:build !agent

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/plumb-dev/plumb/metakv"
)

func metaCopyCommand() command {
	return command{
		name:  "meta-copy",
		usage: "FROM TO",
		short: "copy a server's metadata between stores, each a meta.db file or a postgres:// URL (the server stopped; TO empty)",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			pos, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if len(pos) != 2 {
				return errUsage
			}
			src, err := openMetaStore(ctx, pos[0], true)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := openMetaStore(ctx, pos[1], false)
			if err != nil {
				return err
			}
			defer dst.Close()
			n, err := metakv.Copy(ctx, dst, src)
			if err != nil {
				return fmt.Errorf("%s to %s: %w", redact(pos[0]), redact(pos[1]), err)
			}
			fmt.Fprintf(os.Stderr, "copied %d keys from %s to %s; start the server with %s\n", n, redact(pos[0]), redact(pos[1]), serveFlag(pos[1]))
			return nil
		},
	}
}

// openMetaStore opens a metadata store: a PostgreSQL database by URL, or
// a bbolt file, which must exist when it is copied from.
func openMetaStore(ctx context.Context, where string, from bool) (metakv.DB, error) {
	if isPostgres(where) {
		return metakv.OpenPostgres(ctx, where)
	}
	if _, err := os.Stat(where); from && err != nil {
		return nil, fmt.Errorf("metadata file %s: %w", where, err)
	}
	db, err := metakv.OpenBolt(where)
	if err != nil {
		return nil, fmt.Errorf("metadata file %s: %w (is a plumb serve using it? stop it first)", where, err)
	}
	return db, nil
}

func isPostgres(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// redact hides a URL's password.
func redact(s string) string {
	if !isPostgres(s) {
		return s
	}
	scheme, rest, _ := strings.Cut(s, "://")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, ok := strings.Cut(rest[:at], ":"); ok {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	return scheme + "://" + rest
}

func serveFlag(to string) string {
	if isPostgres(to) {
		return "--meta " + redact(to)
	}
	return "--data DIR holding it as DIR/meta.db"
}

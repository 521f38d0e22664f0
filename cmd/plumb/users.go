package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/client"
)

// groupsFlag collects repeated --group flags.
type groupsFlag []string

func (g *groupsFlag) String() string     { return strings.Join(*g, ",") }
func (g *groupsFlag) Set(v string) error { *g = append(*g, v); return nil }

func userCommand() command {
	return command{
		name:  "user",
		usage: "add NAME --group G... | key NAME [--site QUEUE/SITE...] | keys NAME | revoke NAME | revoke-key ID | remove NAME | list",
		short: "manage the users file: add a user (prints its secret once), make, list and revoke API keys, end a user's tokens",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			file := fs.String("users", cmp.Or(os.Getenv("PLUMB_USERS"), "users.yaml"), "the users `FILE` the server reads with --users (also PLUMB_USERS)")
			var groups groupsFlag
			fs.Var(&groups, "group", "a `GROUP` the user belongs to (repeat for several)")
			var sites groupsFlag
			fs.Var(&sites, "site", "with key: bind the key to `QUEUE/SITE` (repeat for several; patterns as in rules): a call with it may put blocks into those sites only")
			owner := fs.String("file-owner", "", "make the users file `USER`'s (and their group's), such as the server's own user, plumb (an existing file keeps its owner anyway)")
			pos, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if *owner != "" {
				u, err := user.Lookup(*owner)
				if err != nil {
					return fmt.Errorf("--file-owner: %w", err)
				}
				uid, _ := strconv.Atoi(u.Uid)
				gid, _ := strconv.Atoi(u.Gid)
				defer func() {
					if _, err := os.Stat(*file); err == nil {
						if err := os.Chown(*file, uid, gid); err != nil {
							fmt.Fprintf(os.Stderr, "plumb user: give %s to %s: %v\n", *file, *owner, err)
						}
					}
				}()
			}
			if len(pos) == 0 || pos[0] != "list" && len(pos) != 2 {
				return errUsage
			}
			f, err := auth.LoadOrNew(*file)
			if err != nil {
				return err
			}
			switch pos[0] {
			case "add":
				if len(groups) == 0 {
					return errors.New("give the user at least one --group; rules in the users file grant groups their permissions")
				}
				secret, err := f.AddUser(pos[1], groups)
				if err != nil {
					return err
				}
				if err := f.Save(*file); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "user %s (groups %s) written to %s; its secret, shown only now:\n", pos[1], strings.Join(groups, ", "), *file)
				fmt.Println(secret)
				fmt.Fprintf(os.Stderr, "a running server picks it up on SIGHUP (kill -HUP PID)\n")
			case "key":
				key, err := f.AddKey(pos[1], time.Now(), sites...)
				if err != nil {
					return err
				}
				if err := f.Save(*file); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "API key for %s written to %s; the key, shown only now (put it in the agent's --token-file):\n", pos[1], *file)
				fmt.Println(key)
			case "revoke":
				if err := f.Revoke(pos[1]); err != nil {
					return err
				}
				if err := f.Save(*file); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "every token of %s is revoked (its API keys stay: plumb user revoke-key ID); a server reading %s refuses them from its next call\n", pos[1], *file)
			case "keys":
				u := f.Users[pos[1]]
				if u == nil {
					return fmt.Errorf("no user %q in %s", pos[1], *file)
				}
				for _, k := range u.Keys {
					bound := ""
					if len(k.Sites) > 0 {
						bound = "\tsites " + strings.Join(k.Sites, ",")
					}
					fmt.Printf("%s\tcreated %s%s\n", k.ID, k.Created.Format(time.RFC3339), bound)
				}
			case "revoke-key":
				user, err := f.RevokeKey(pos[1])
				if err != nil {
					return err
				}
				if err := f.Save(*file); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "API key %s of %s revoked\n", pos[1], user)
			case "remove":
				if f.Users[pos[1]] == nil {
					return fmt.Errorf("no user %q in %s", pos[1], *file)
				}
				delete(f.Users, pos[1])
				return f.Save(*file)
			case "list":
				names := make([]string, 0, len(f.Users))
				for n := range f.Users {
					names = append(names, n)
				}
				slices.Sort(names)
				for _, n := range names {
					fmt.Printf("%s\tgroups: %s\tkeys: %d\n", n, strings.Join(f.Users[n].Groups, ","), len(f.Users[n].Keys))
				}
			default:
				return errUsage
			}
			return nil
		},
	}
}

func loginCommand() command {
	var out *string
	return clientCommand("login", "", "log in (--user, secret from PLUMB_SECRET) and write the bearer token to a file for --token-file", 0,
		func(fs *flag.FlagSet) {
			out = fs.String("o", "", "write the token to `FILE` (mode 600) instead of stdout")
		},
		func(ctx context.Context, c *client.Client, _ []string) error {
			user, secret := os.Getenv("PLUMB_USER"), os.Getenv("PLUMB_SECRET")
			if user == "" || secret == "" {
				return errors.New("set PLUMB_USER and PLUMB_SECRET (the secret `plumb user add` printed)")
			}
			tok, err := c.Login(ctx, user, secret)
			if err != nil {
				return err
			}
			if *out == "" {
				fmt.Println(tok)
				return nil
			}
			return os.WriteFile(*out, []byte(tok+"\n"), 0o600)
		})
}

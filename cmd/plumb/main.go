// Command plumb is the one Plumb binary: the server, and the client verbs
// that talk to it. Each subcommand lives in its own file, fills a config
// from flags and calls one library function.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name  string
	usage string // arguments after the name
	short string
	// run parses args with fs and does the work; ctx ends on SIGINT/SIGTERM.
	run func(ctx context.Context, fs *flag.FlagSet, args []string) error
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: plumb COMMAND [flags] [args]\n\ncommands:\n")
		sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
		for _, c := range cmds {
			fmt.Fprintf(w, "  %-8s %s\n", c.name, c.short)
		}
		fmt.Fprintf(w, "\nRun 'plumb COMMAND -h' for a command's flags, 'plumb version' for the build.\n")
	}
	switch {
	case len(args) == 0:
		usage(stderr)
		return 2
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		usage(stdout) // asked for: not an error
		return 0
	case args[0] == "version" || args[0] == "--version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet("plumb "+c.name, flag.ContinueOnError)
		// Help asked for goes to stdout (exit 0); usage after a mistake to
		// stderr (exit 2).
		out := stderr
		for _, a := range args[1:] {
			if a == "-h" || a == "-help" || a == "--help" {
				out = stdout
			}
		}
		fs.SetOutput(out)
		// The flag package shows the usage when it refuses a flag (after
		// saying which): that is a usage mistake, exit 2, like errUsage.
		usageShown := false
		fs.Usage = func() {
			usageShown = true
			fmt.Fprintf(out, "usage: plumb %s [flags] %s\n\n%s\n\nflags:\n", c.name, c.usage, c.short)
			fs.PrintDefaults()
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		// PLUMB_CPUPROFILE=FILE profiles any command, for finding where a
		// slow run spends its time; %p in it becomes the process id, so
		// a restarted server does not overwrite its predecessor's.
		if path := os.Getenv("PLUMB_CPUPROFILE"); path != "" {
			path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
			if f, err := os.Create(path); err == nil {
				pprof.StartCPUProfile(f)
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
		err := c.run(ctx, fs, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fs.Usage()
			return 2
		case usageShown:
			return 2 // the flag package said what was wrong
		}
		fmt.Fprintf(stderr, "plumb %s: %s\n", c.name, plainError(err))
		return 1
	}
	fmt.Fprintf(stderr, "plumb: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// rpcFraming is how grpc-go spells a status in an error's text.
var rpcFraming = regexp.MustCompile(`rpc error: code = (\w+) desc = `)

// plainError shows a gRPC status as words ("not found: no queue x")
// instead of its framing ("rpc error: code = NotFound desc = ...").
func plainError(err error) string {
	return rpcFraming.ReplaceAllStringFunc(err.Error(), func(m string) string {
		code := rpcFraming.FindStringSubmatch(m)[1]
		var words []string
		start := 0
		for i := 1; i < len(code); i++ {
			if code[i] >= 'A' && code[i] <= 'Z' {
				words = append(words, strings.ToLower(code[start:i]))
				start = i
			}
		}
		words = append(words, strings.ToLower(code[start:]))
		return strings.Join(words, " ") + ": "
	})
}

// version and commit are set by the Makefile (-ldflags -X), which knows
// them where Go stamps no version control information (-buildvcs=false).
var version, commit string

// buildVersion is the build's version and commit: the Makefile's, else
// what Go stamped, else "(devel)" and "unknown".
func buildVersion() (ver, rev string) {
	ver, rev = version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if ver == "" {
			ver = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && rev == "" {
				rev = s.Value
				for _, m := range bi.Settings {
					if m.Key == "vcs.modified" && m.Value == "true" {
						rev += "+dirty"
					}
				}
			}
		}
	}
	if ver == "" {
		ver = "(devel)"
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev
}

// versionLine says which build this is: the version, the commit and the
// Go version.
func versionLine() string {
	ver, rev := buildVersion()
	return fmt.Sprintf("plumb %s commit %s %s %s/%s", ver, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// parseInterspersed parses flags that may come before or after positional
// arguments (`plumb follow QUEUE --group G`), returning the positionals.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

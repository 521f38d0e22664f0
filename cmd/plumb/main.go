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
	"runtime/pprof"
	"sort"
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

func commands() []command {
	return []command{
		serveCommand(),
		putCommand(),
		getCommand(),
		queuesCommand(),
		blocksCommand(),
		followCommand(),
		agentCommand(),
		importCommand(),
		synthCommand(),
		jobCommand(),
		groupCommand(),
		programCommand(),
		graphCommand(),
		statsCommand(),
		faultyCommand(),
		retryCommand(),
		rssacCommand(),
		dnsCommand(),
		windowsCommand(),
		streamCommand(),
		statusCommand(),
		userCommand(),
		retentionCommand(),
		lostCommand(),
		fsckCommand(),
		storeCommand(),
		workerCommand(),
		workersCommand(),
		loginCommand(),
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	usage := func() {
		fmt.Fprintf(stderr, "usage: plumb COMMAND [flags] [args]\n\ncommands:\n")
		sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
		for _, c := range cmds {
			fmt.Fprintf(stderr, "  %-8s %s\n", c.name, c.short)
		}
		fmt.Fprintf(stderr, "\nRun 'plumb COMMAND -h' for a command's flags.\n")
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		return 2
	}
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet("plumb "+c.name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() {
			fmt.Fprintf(stderr, "usage: plumb %s [flags] %s\n\n%s\n\nflags:\n", c.name, c.usage, c.short)
			fs.PrintDefaults()
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		// PLUMB_CPUPROFILE=FILE profiles any command, for finding where a
		// slow run spends its time.
		if path := os.Getenv("PLUMB_CPUPROFILE"); path != "" {
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
		}
		fmt.Fprintf(stderr, "plumb %s: %v\n", c.name, err)
		return 1
	}
	fmt.Fprintf(stderr, "plumb: unknown command %q\n\n", args[0])
	usage()
	return 2
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

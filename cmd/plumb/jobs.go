package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
)

func jobCommand() command {
	return clientCommand("job", "submit FILE... | retract NAME | list", "submit, retract and list pipeline jobs", -1, nil,
		func(ctx context.Context, c *client.Client, args []string) error {
			switch verb, rest := args[0], args[1:]; {
			case verb == "submit" && len(rest) > 0:
				var refused int
				for _, file := range rest {
					src, err := os.ReadFile(file)
					if err != nil {
						return err
					}
					res, err := c.SubmitJob(ctx, file, src)
					if err != nil {
						return fmt.Errorf("submit %s: %w", file, err)
					}
					if res.State != "accepted" {
						refused++
						fmt.Fprintf(os.Stderr, "job %s rejected:\n%s\n", res.Job, indent(res.Reason))
						continue
					}
					fmt.Printf("job %s accepted; its stages: %s\n", res.Job, strings.Join(res.Stages, ", "))
					for _, w := range res.Warnings {
						fmt.Fprintf(os.Stderr, "warning: %s\n", w)
					}
				}
				if refused > 0 {
					return fmt.Errorf("%d of %d jobs rejected", refused, len(rest))
				}
				return nil
			case verb == "retract" && len(rest) == 1:
				if err := c.RetractJob(ctx, rest[0]); err != nil {
					return err
				}
				fmt.Printf("job %s retracted\n", rest[0])
				return nil
			case verb == "list" && len(rest) == 0:
				jobs, err := c.Jobs(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "JOB\tOWNER\tSTATE\tCHANGED\tREASON")
				for _, j := range jobs {
					reason, _, _ := strings.Cut(j.Reason, "\n")
					st := string(j.State)
					if j.Suspended != "" {
						// Accepted, but not running until its owner's rights return.
						st, reason = "suspended", j.Suspended
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", j.Name, j.Owner, st, j.Changed.Format("2006-01-02 15:04:05"), reason)
				}
				return tw.Flush()
			}
			return errUsage
		})
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

func graphCommand() command {
	var dot, svg, short *bool
	return clientCommand("graph", "", "print the merged pipeline graph (YAML, --short a line per stage, or --dot / --svg for Graphviz)", 0,
		func(fs *flag.FlagSet) {
			dot = fs.Bool("dot", false, "print Graphviz DOT")
			svg = fs.Bool("svg", false, "render SVG through Graphviz's dot (must be installed)")
			short = fs.Bool("short", false, "print a line per stage: its inputs and outputs, program, and the jobs that share it")
		},
		func(ctx context.Context, c *client.Client, _ []string) error {
			g, err := c.Graph(ctx, *dot || *svg)
			if err == nil && *short && !*dot && !*svg {
				return printShortGraph(g)
			}
			if err != nil || !*svg {
				fmt.Print(g)
				return err
			}
			path, err := exec.LookPath("dot")
			if err != nil {
				return errors.New("--svg needs Graphviz's dot (apt install graphviz); --dot prints the source")
			}
			cmd := exec.CommandContext(ctx, path, "-Tsvg")
			cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(g), os.Stdout, os.Stderr
			return cmd.Run()
		})
}

func statsCommand() command {
	var wait *bool
	return clientCommand("stats", "", "list stages with backlog, workers, bytes, CPU and I/O intensity", 0,
		func(fs *flag.FlagSet) {
			wait = fs.Bool("wait", false, "first wait until every stage is idle (no backlog, no run), showing progress")
		},
		func(ctx context.Context, c *client.Client, _ []string) error {
			st, err := c.Stats(ctx)
			if err != nil {
				return err
			}
			fi, _ := os.Stderr.Stat()
			tty := fi != nil && fi.Mode()&os.ModeCharDevice != 0 // redraw only on a terminal
			for idle := 0; *wait && idle < 2; {
				backlog, runs := int64(0), 0
				for _, s := range st {
					backlog += s.Backlog
					runs += s.Workers
				}
				if backlog == 0 && runs == 0 {
					idle++ // twice in a row, so a run that just ended has published
				} else {
					idle = 0
					if tty {
						fmt.Fprintf(os.Stderr, "\rwaiting: %d blocks in backlog, %d runs in progress   ", backlog, runs)
					}
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(500 * time.Millisecond):
				}
				if st, err = c.Stats(ctx); err != nil {
					return err
				}
			}
			if *wait && tty {
				fmt.Fprintf(os.Stderr, "\r%60s\r", "")
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STAGE\tOWNERS\tBACKLOG\tWAITING\tWORKERS\tRUNS\tFAILED\tFAULTY\tIN MB\tOUT MB\tPROC s\tCPU s\tWAIT s\tMB/s\t")
			var notes []string
			for _, s := range st {
				flag := ""
				if s.ChainCandidate {
					flag = "chain?"
					notes = append(notes, fmt.Sprintf("%s moves %.0f MB/s of I/O: chain it with a neighbour (program: [a, b]) to skip storing its blocks", s.Stage, s.Intensity))
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%.1f\t%s\n", s.Stage, len(s.Owners), s.Backlog, s.Waiting, s.Workers,
					s.Runs, s.Failed, s.Faulty, float64(s.BytesIn)/1e6, float64(s.BytesOut)/1e6, s.ProcessingSeconds, s.CPUSeconds, s.QueueWaitSeconds, s.Intensity, flag)
				if s.Detail != "" {
					notes = append(notes, s.Stage+": "+s.Detail)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, n := range notes {
				fmt.Println(n)
			}
			return nil
		})
}

func faultyCommand() command {
	return clientCommand("faulty", "[QUEUE]", "list blocks set aside after their last attempt, with the error", optionalArg, nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			q := ""
			if len(pos) == 1 {
				q = pos[0]
			}
			fb, err := c.Faulty(ctx, q)
			if err != nil {
				return err
			}
			for _, b := range fb {
				who := "group " + b.Group
				if b.Stage != "" {
					who = "stage " + b.Stage
				}
				fmt.Printf("%s\tfor %s\tafter %d attempts: %s\n", b.Block, who, b.Attempts, b.Error)
			}
			if len(fb) > 0 {
				fmt.Fprintf(os.Stderr, "%d faulty; fix the cause, then `plumb retry` requeues them\n", len(fb))
			}
			return nil
		})
}

func retryCommand() command {
	return clientCommand("retry", "[QUEUE | BLOCK]", "requeue faulty blocks: one block, a queue's, or all", optionalArg, nil,
		func(ctx context.Context, c *client.Client, pos []string) error {
			var q, name string
			if len(pos) == 1 {
				if _, err := block.Parse(pos[0]); err == nil {
					name = pos[0]
				} else {
					q = pos[0]
				}
			}
			n, err := c.Retry(ctx, q, name)
			if err == nil {
				fmt.Printf("requeued %d blocks\n", n)
			}
			return err
		})
}

func windowsCommand() command {
	var req client.WindowsRequest
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&req.Site, "site", "", "only the windows of `SITE`")
		fs.StringVar(&req.State, "state", "", "only windows in `STATE`: waiting, fired or faulty")
		fs.StringVar(&req.From, "from", "", "only windows ending after `TIME` (RFC 3339)")
		fs.StringVar(&req.To, "to", "", "only windows starting before `TIME` (RFC 3339)")
		fs.IntVar(&req.Limit, "limit", 100, "at most `N` windows (0: all)")
	}
	return clientCommand("windows", "[STAGE] | fire STAGE WINDOW", "list window stages' windows (waiting, fired), or fire one now", -3, flags,
		func(ctx context.Context, c *client.Client, args []string) error {
			if len(args) == 3 && args[0] == "fire" {
				if err := c.FireWindow(ctx, args[1], args[2]); err != nil {
					return err
				}
				fmt.Printf("window %s of %s fired\n", args[2], args[1])
				return nil
			}
			if len(args) > 1 {
				return errUsage
			}
			stage := ""
			if len(args) == 1 {
				stage = args[0]
			}
			req.Stage = stage
			limit := req.Limit
			if limit > 0 {
				req.Limit++ // one more says there are more
			}
			ws, err := c.WindowsMatching(ctx, req)
			if err != nil {
				return err
			}
			more := limit > 0 && len(ws) > limit
			if more {
				ws = ws[:limit]
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STAGE\tWINDOW\tFROM\tSTATE\tREV\tBLOCKS\tMISSING\tLATE\tWAITING FOR")
			for _, w := range ws {
				waiting := ""
				switch {
				case w.State == "faulty":
					waiting = w.Error
				case w.State == "fired" && w.Empty > 0:
					waiting = fmt.Sprintf("empty: %d windows to %s, skipped", w.Empty, w.To.Format(time.RFC3339))
				case w.State == "fired":
					waiting = w.Reason
				case w.BlockedBy != "":
					waiting = "window " + w.BlockedBy + " (strict order)"
				case !w.Bracketed:
					waiting = "a block past the end"
				case !w.WaitUntil.IsZero():
					waiting = "missing blocks until " + w.WaitUntil.Format(time.RFC3339)
				default:
					waiting = "missing blocks"
				}
				from := ""
				if !w.From.IsZero() {
					from = w.From.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", w.Stage, w.ID, from, w.State, w.Revision, w.Blocks,
					strings.Join(w.Missing, ","), strings.Join(w.Late, ","), waiting)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(os.Stderr, "more windows match than the %d shown: narrow with --site, --state, --from, --to, or --limit 0 for all\n", limit)
			}
			return nil
		})
}

// backfillAge is the event-time latency past which a block's data is
// old (an import of last year's captures) rather than late: its latency
// is its age, and "56.9y" read as a fault.
const backfillAge = 30 * 24 * time.Hour

// eventLatency is an event-time latency as status prints it: "backfill"
// for data older than backfillAge.
func eventLatency(x time.Duration) string {
	if x > backfillAge {
		return "backfill"
	}
	return humanDuration(x)
}

// humanDuration prints a duration at the size a reader wants: "850ms",
// "12.3s", "4m05s", "5h12m", "3d", "2y" — the event-time latency of
// backfilled data is its age, not 498913h3m14s. Zero is "-".
func humanDuration(x time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case x == 0:
		return "-"
	case x < 0:
		return "-" + humanDuration(-x)
	case x < time.Second:
		return x.Round(time.Millisecond).String()
	case x < time.Minute:
		return fmt.Sprintf("%.1fs", x.Seconds())
	case x < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(x/time.Minute), int(x%time.Minute/time.Second))
	case x < 3*day:
		return fmt.Sprintf("%dh%02dm", int(x/time.Hour), int(x%time.Hour/time.Minute))
	case x < 365*day:
		return fmt.Sprintf("%dd", int(x/day))
	}
	return fmt.Sprintf("%.1fy", x.Hours()/24/365.25)
}

func statusCommand() command {
	return clientCommand("status", "", "how far behind each stage and consumer group is: backlog, oldest block owed, latency p50/p99", 0, nil,
		func(ctx context.Context, c *client.Client, _ []string) error {
			rows, err := c.Status(ctx)
			if err != nil {
				return err
			}
			d := humanDuration
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STAGE / GROUP\tQUEUE\tBACKLOG\tWORKERS\tOLDEST OWED\tARRIVAL→OUT p50\tp99\tEVENT→OUT p50\tp99\tSAMPLES")
			for _, r := range rows {
				who := r.Stage
				switch r.Kind {
				case "group":
					who = "group " + r.Group
				case "stream":
					who = "stream " + r.Group
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", who, r.Queue, r.Backlog, r.Workers, d(r.OldestAge),
					d(r.ArrivalTo.P50), d(r.ArrivalTo.P99), eventLatency(r.EventTo.P50), eventLatency(r.EventTo.P99), r.ArrivalTo.Samples)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			// How the read deadlines' estimates fare: actual ÷ estimated.
			if ra, err := c.ReadAdmission(ctx); err == nil && ra.Transfers > 0 {
				fmt.Printf("reads: %d transfers, %d longer than estimated (%.1f%%), %d refused as hopeless; actual÷estimate p50 %.2f, p99 %.2f; assumed rate %.1f MB/s per transfer; margin %v\n",
					ra.Transfers, ra.Late, 100*float64(ra.Late)/float64(ra.Transfers), ra.Refused, ra.RatioP50, ra.RatioP99, ra.Rate/1e6,
					time.Duration(ra.Margin*float64(time.Second)).Round(10*time.Microsecond))
				if ra.ExpiredWaiting+ra.PastDeadline > 0 {
					fmt.Printf("reads late at the server: %d expired while waiting for a slot, %d finished past their deadline\n", ra.ExpiredWaiting, ra.PastDeadline)
				}
			}
			return nil
		})
}

// printShortGraph prints the graph's YAML a line per stage: what a
// reader wants first, where the YAML takes a screen per stage.
func printShortGraph(g string) error {
	var graph struct {
		Stages []struct {
			Name    string   `yaml:"name"`
			Inputs  []string `yaml:"inputs"`
			Outputs []string `yaml:"outputs"`
			Program any      `yaml:"program"`
			Owners  []struct {
				Job string `yaml:"job"`
			} `yaml:"owners"`
		} `yaml:"stages"`
	}
	if err := yaml.Unmarshal([]byte(g), &graph); err != nil {
		return fmt.Errorf("the server's graph: %w", err)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tIN → OUT\tPROGRAM\tSHARED BY")
	for _, st := range graph.Stages {
		program := fmt.Sprint(st.Program)
		if list, ok := st.Program.([]any); ok { // a command and its arguments, or a chain
			words := make([]string, len(list))
			for i, w := range list {
				words[i] = fmt.Sprint(w)
			}
			program = strings.Join(words, " ")
		}
		var jobs []string
		if len(st.Owners) > 1 {
			for _, o := range st.Owners {
				jobs = append(jobs, o.Job)
			}
		}
		fmt.Fprintf(tw, "%s\t%s → %s\t%s\t%s\n", st.Name, strings.Join(st.Inputs, ","), strings.Join(st.Outputs, ","), program, strings.Join(jobs, ", "))
	}
	return tw.Flush()
}

//go:build !agent

package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/dns/enrich"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
	"github.com/plumb-dev/plumb/worker"
)

func workerCommand() command {
	var slots *int
	var stages, scratch, level, store, programs, anonKeys, geoip, metricsAddr *string
	var sbOpts *sandboxOptions
	var kafka kafkaFlags
	return clientCommand("worker", "", "run the server's stage runs on this machine: lease, run, heartbeat, commit (needs admin on \"*\" when auth is on)", 0,
		func(fs *flag.FlagSet) {
			slots = fs.Int("slots", 0, "runs at once; 0: one per CPU")
			stages = fs.String("stages", "", "only stages whose name matches `PATTERN` (path.Match, e.g. 'archive/*')")
			scratch = fs.String("scratch", filepath.Join(os.TempDir(), "plumb-worker"), "`DIR` for outputs before they are uploaded")
			level = fs.String("log-level", "info", "log level: debug, info, warn, error")
			anonKeys = fs.String("anon-keys", "", "`DIR` of the keys builtin:anonymize names: the same files as the server's --anon-keys")
			geoip = fs.String("geoip", "", "`DIR` of the databases builtin:enrich names: the same files as the server's --geoip")
			programs = fs.String("programs", "", "`DIR` of registered programs, each in a file named by its SHA-256 (copy them from the server's DATA/programs)")
			sbOpts = sandboxFlags(fs, "this process's user")
			kafka.register(fs)
			metricsAddr = fs.String("metrics", "", "serve Prometheus metrics on `ADDR` at /metrics, with /healthz and /readyz (ready while the server answers lease requests) for probes")
			store = fs.String("store", "", "the server's S3 store `URL` (s3://BUCKET?endpoint=HOST:PORT, credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) to read inputs and write outputs directly; without it all bytes go through the server")
		},
		func(ctx context.Context, c *client.Client, _ []string) error {
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(*level)); err != nil {
				return err
			}
			if *slots == 0 {
				*slots = runtime.NumCPU()
			}
			if *slots < 0 {
				return fmt.Errorf("--slots %d: want at least 1 (0: one per CPU)", *slots)
			}
			host, _ := os.Hostname()
			reg := stage.NewRegistry()
			builtin.Register(reg, builtin.FindXZ())
			builtin.RegisterAnonymize(reg, *anonKeys)
			refs := enrich.NewDatabases(*geoip, slog.Default())
			builtin.RegisterEnrich(reg, refs)
			builtin.RegisterFilter(reg, refs)
			kcfg, err := kafka.config()
			if err != nil {
				return err
			}
			builtin.RegisterKafka(reg, kcfg)
			runner := &worker.Runner{Registry: reg, Programs: *programs}
			switch sbOpts.mode {
			case "off":
				runner.Unconfined = true
			case "bwrap":
				sb, err := sandbox.New(ctx, sandbox.Config{Limits: sbOpts.limits, Shared: sbOpts.shared, NoCgroups: !sbOpts.cgroups})
				if err != nil {
					// Built-ins still run; runs of executables go back to the
					// server for a worker that can confine them.
					slog.Warn("stage executables will be given back; built-ins run", "err", err)
				} else if sb.Cgroups() || !sbOpts.cgroups {
					slog.Info("stage runs bounded as a whole", "how", sb.RunBounds())
				} else {
					slog.Warn("stage runs bounded as a whole, but not exactly", "how", sb.RunBounds())
				}
				runner.Sandbox = sb
			default:
				return fmt.Errorf("--sandbox %q: want bwrap or off", sbOpts.mode)
			}
			servers, err := c.Servers()
			if err != nil {
				return err
			}
			for _, s := range servers {
				if s != c {
					defer s.Close()
				}
			}
			cfg := worker.Config{Client: c, Servers: servers, ID: fmt.Sprintf("%s-%d", host, os.Getpid()), Host: host, Slots: *slots, Stages: *stages,
				Runner: runner, Scratch: *scratch, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))}
			if *store != "" {
				st, err := blob.Open(ctx, *store)
				if err != nil {
					return fmt.Errorf("--store: %w", err)
				}
				defer st.Close()
				cfg.Store = st
			}
			var mreg *prometheus.Registry
			if *metricsAddr != "" {
				mreg = prometheus.NewRegistry()
				mreg.MustRegister(processMetrics()...)
				cfg.Metrics = mreg
			}
			w := worker.New(cfg)
			if mreg != nil {
				stop, err := serveMetrics(ctx, *metricsAddr, mreg, w.Ready)
				if err != nil {
					return err
				}
				defer stop()
			}
			return w.Run(ctx)
		})
}

func workersCommand() command {
	return clientCommand("workers", "", "list the remote workers: host, slots, runs held, last heartbeat", 0, nil,
		func(ctx context.Context, c *client.Client, _ []string) error {
			ws, err := c.Workers(ctx)
			if err != nil {
				return err
			}
			for _, w := range ws {
				fmt.Printf("%s\thost %s\tslots %d\tdone %d\tlost %d\tlast seen %s\n", w.Worker, w.Host, w.Slots, w.Done, w.Lost, w.LastSeen.Format("15:04:05"))
				for _, r := range w.Runs {
					fmt.Printf("\t%s\n", r)
				}
			}
			return nil
		})
}

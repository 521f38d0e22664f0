package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"gopkg.in/yaml.v3"

	"github.com/plumb-dev/plumb/agent"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/internal/fdlimit"
	"github.com/plumb-dev/plumb/pcap/filter"
	"github.com/plumb-dev/plumb/pipeline"
)

// agentFlags are shared by agent and import.
type agentFlags struct {
	cfg        agent.Config
	site       string
	codec      string
	blockSize  string
	spoolMax   string
	spoolSet   bool // --spool was given
	sample     string
	logLevel   string
	logFormat  string
	configFile string
	sec        *client.Security
}

func (a *agentFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.cfg.Server, "server", cmp.Or(os.Getenv("PLUMB_SERVER"), "127.0.0.1:8815"), "server `ADDR` (also from PLUMB_SERVER); several servers sharing their metadata comma-separated, or one DNS name with a record for each")
	fs.StringVar(&a.site, "site", "", "capture `SITE` (required); the block instance unless --instance is given")
	fs.StringVar(&a.cfg.Instance, "instance", "", "instance `ID` in block names (default: the site)")
	fs.StringVar(&a.cfg.Queue, "queue", "", "queue `NAME` (default pcap plus the codec's extension, e.g. pcap.sz)")
	fs.StringVar(&a.codec, "codec", "snappy", "block compression: snappy, zstd, gzip, xz or none")
	fs.StringVar(&a.blockSize, "block-size", "256MiB", "cut a block at this many uncompressed bytes")
	fs.DurationVar(&a.cfg.Interval, "block-interval", 0, "also cut at every multiple of this in packet time, e.g. 5m (0: off)")
	fs.StringVar(&a.cfg.Spool, "spool", "", "spool `DIR` (default: plumb-spool/INSTANCE for agent; for import, a directory per server, queue and instance under $XDG_STATE_HOME/plumb/import, else ~/.local/state/plumb/import)")
	fs.StringVar(&a.spoolMax, "spool-max", "0", "most bytes of finished blocks to hold; files wait and live sources drop while full (0: no limit)")
	fs.IntVar(&a.cfg.InFlight, "in-flight", 4, "blocks uploading at once")
	fs.DurationVar(&a.cfg.MaxBackoff, "max-backoff", 30*time.Second, "longest wait between upload attempts while the server is unreachable")
	fs.BoolVar(&a.cfg.NewInstance, "new-instance", false, "this instance never shipped a block: start a fresh spool at sequence 1 without asking the server")
	fs.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&a.logFormat, "log-format", "text", "log as text, or json (one object a line, for Loki or Elastic)")
	fs.StringVar(&a.configFile, "config", "", "read flags from the YAML `FILE` first (keys are the flags' names, lists for repeatable ones, sources: [FILE, ...]); the command line overrides it")
	a.sec = securityFlags(fs)
	fs.StringVar(&a.sample, "sample", "", "keep the packets of one address pair in N, after --filter: `1/N`, whole flows (a client's queries, responses, fragments and TCP streams together); blocks and DNS rows carry N so counts scale back to totals")
	fs.StringVar(&a.cfg.Filter, "filter", "", "keep only packets this capture filter `EXPR` matches (tcpdump syntax: host, net, port, portrange, proto, src/dst, ip, ip6, tcp, udp, icmp, vlan, byte relations such as udp[10] & 0x80 = 0, and/or/not); on --interface the kernel applies it")
}

func (a *agentFlags) config() (agent.Config, error) {
	cfg := a.cfg
	cfg.Security = *a.sec
	if cfg.Security.User != "" {
		cfg.Security.Secret = os.Getenv("PLUMB_SECRET")
	}
	if a.site == "" {
		return cfg, fmt.Errorf("--site is required")
	}
	cfg.Instance = cmp.Or(cfg.Instance, a.site)
	codec, err := codecs.Parse(a.codec)
	if err != nil {
		return cfg, err
	}
	cfg.Codec = codec
	cfg.Queue = cmp.Or(cfg.Queue, "pcap"+codec.Ext())
	if cfg.MaxBytes, err = parseSize(a.blockSize); err != nil {
		return cfg, fmt.Errorf("--block-size: %w", err)
	}
	if cfg.MaxBytes < 1<<10 {
		return cfg, fmt.Errorf("--block-size %s is below 1 KiB", a.blockSize)
	}
	if cfg.SpoolMax, err = parseSize(a.spoolMax); err != nil {
		return cfg, fmt.Errorf("--spool-max: %w", err)
	}
	if cfg.Filter != "" {
		// Refused now, not at the first source: the syntax does not
		// depend on the link type a source turns out to have.
		if _, err := filter.Compile(cfg.Filter, layers.LinkTypeEthernet); err != nil {
			return cfg, fmt.Errorf("--filter: %w", err)
		}
	}
	if cfg.Sample, err = parseSample(a.sample); err != nil {
		return cfg, err
	}
	a.spoolSet = cfg.Spool != ""
	cfg.Spool = cmp.Or(cfg.Spool, filepath.Join("plumb-spool", cfg.Instance))
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(a.logLevel)); err != nil {
		return cfg, err
	}
	switch a.logFormat {
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	default:
		return cfg, fmt.Errorf("--log-format %q: want text or json", a.logFormat)
	}
	return cfg, nil
}

// parseSample reads --sample 1/N; "" and 1/1 keep everything.
func parseSample(v string) (uint32, error) {
	if v == "" {
		return 1, nil
	}
	one, n, ok := strings.Cut(v, "/")
	rate, err := strconv.ParseUint(n, 10, 32)
	if !ok || one != "1" || err != nil || rate < 1 || rate > block.MaxSampleRate {
		return 0, fmt.Errorf("--sample %q: want 1/N with N from 1 to %d, e.g. 1/100", v, block.MaxSampleRate)
	}
	return uint32(rate), nil
}

// importSpool is an import's default spool: in the user's state
// directory ($XDG_STATE_HOME, else ~/.local/state), one per server
// address, queue and instance, so an import run from anywhere resumes
// where it stopped and imports to two servers do not share one.
func importSpool(server, queue, instance string) (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no state directory for the import's spool (%v); pass --spool DIR", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	safe := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, server)
	return filepath.Join(base, "plumb", "import", safe, queue+"."+instance), nil
}

// parseSize reads sizes such as 64KiB or 256MiB.
func parseSize(s string) (int64, error) { return pipeline.ParseSize(s) }

// parse reads the flags and arguments of agent or import and returns the
// configuration and the sources named by the arguments. allowNone permits
// no arguments (an agent may only watch or capture live).
func (a *agentFlags) parse(ctx context.Context, fs *flag.FlagSet, args []string, allowNone func() bool) (agent.Config, []agent.Source, error) {
	fromFile, err := applyConfig(fs, args)
	if err != nil {
		return agent.Config{}, nil, err
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return agent.Config{}, nil, err
	}
	pos = append(fromFile, pos...)
	if len(pos) == 0 && !allowNone() {
		return agent.Config{}, nil, errUsage
	}
	cfg, err := a.config()
	if err != nil {
		return cfg, nil, err
	}
	srcs, err := sourcesOf(ctx, pos)
	return cfg, srcs, err
}

// applyConfig sets the flags a --config file names, before the command
// line is parsed (so the command line wins), and returns its sources.
func applyConfig(fs *flag.FlagSet, args []string) ([]string, error) {
	var file string
	for i, a := range args {
		switch {
		case (a == "--config" || a == "-config") && i+1 < len(args):
			file = args[i+1]
		case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-config="):
			file = a[strings.IndexByte(a, '=')+1:]
		}
	}
	if file == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("--config %s: %w", file, err)
	}
	var sources []string
	keys := slices.Sorted(maps.Keys(doc))
	for _, k := range keys {
		vals, list := doc[k].([]any)
		if !list {
			vals = []any{doc[k]}
		}
		for _, v := range vals {
			s := fmt.Sprint(v)
			if k == "sources" {
				sources = append(sources, s)
				continue
			}
			if k == "config" || fs.Lookup(k) == nil {
				return nil, fmt.Errorf("--config %s: unknown key %q (the keys are the flags' names, and sources)", file, k)
			}
			if err := fs.Set(k, s); err != nil {
				return nil, fmt.Errorf("--config %s: %s: %w", file, k, err)
			}
		}
	}
	return sources, nil
}

func sourcesOf(ctx context.Context, args []string) ([]agent.Source, error) {
	var out []agent.Source
	for _, a := range args {
		if a == "-" {
			out = append(out, agent.StdinSource())
			continue
		}
		if strings.HasPrefix(a, "s3://") {
			objs, err := s3Sources(ctx, a)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
			continue
		}
		s, err := agent.FileSource(a)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func agentCommand() command {
	return command{
		name:  "agent",
		usage: "--site SITE [SOURCE...] [--watch DIR] [--follow FILE] [--interface IFACE]... [--dnstap-socket PATH] (a SOURCE is a capture file, a dnstap file, or - for stdin)",
		short: "cut captures (files, or - for stdin) into sequence-numbered blocks, spool and ship them; ends when finite sources are shipped",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			var a agentFlags
			a.register(fs)
			watch := fs.String("watch", "", "`DIR` of rotated capture files (tcpdump -G, dnscap -t) to cut as each is closed, or s3://BUCKET/PREFIX?endpoint=HOST:PORT whose objects are cut as they appear, in key order; runs until stopped")
			pattern := fs.String("pattern", "", "with --watch, only file names matching this shell `PATTERN`")
			settle := fs.Duration("settle", 30*time.Second, "with --watch, a file that has not grown for this long is closed; with --follow, the block being cut is shipped")
			metricsAddr := fs.String("metrics", "", "serve Prometheus metrics on `ADDR` (e.g. 127.0.0.1:9815) at /metrics")
			var live agent.LiveConfig
			fs.Func("interface", "capture live from network `IFACE` (AF_PACKET; needs root or CAP_NET_RAW); repeat it for several, or any for all (then the blocks are Linux cooked v2 captures, as tcpdump -i any writes); runs until stopped", func(v string) error {
				live.Interfaces = append(live.Interfaces, v)
				return nil
			})
			fs.IntVar(&live.Fanout, "fanout", 1, "readers per interface, sharing its packets by flow hash (PACKET_FANOUT): a TCP connection stays on one reader")
			fs.IntVar(&live.Snaplen, "snaplen", 262144, "keep at most this many bytes of each live packet")
			fs.BoolVar(&live.Promisc, "promisc", false, "put the interfaces in promiscuous mode")
			bufSize := fs.String("buffer-size", "32MiB", "each reader's capture ring; the kernel drops (and counts) packets when it is full")
			summary := fs.Duration("summary", time.Minute, "log a summary this often")
			iface := new(string)
			follow := fs.String("follow", "", "a capture `FILE` still being written (tcpdump -w FILE): read it as it grows, like tail -f; runs until stopped")
			tapSocket := fs.String("dnstap-socket", "", "take dnstap from DNS servers (Unbound, BIND, Knot, PowerDNS) on the unix socket `PATH` (Frame Streams, bidirectional); the blocks are captures of dnstap frames, which builtin:dns reads; runs until stopped")
			tapListen := fs.String("dnstap-listen", "", "take dnstap from DNS servers that connect to TCP `ADDR` (host:port), as --dnstap-socket")
			pbListen := fs.String("protobuf-listen", "", "take the protobuf logs of PowerDNS Recursor (protobufServer) and dnsdist (newRemoteLogger) from servers that connect to TCP `ADDR` (host:port); each message becomes the dnstap frame of its query or response, so the blocks are as --dnstap-listen's; bounded as it is")
			tapConns := fs.Int("dnstap-max-conns", agent.DefaultDnstapConns, "with --dnstap-socket or --dnstap-listen, at most `N` senders connected at once; more are disconnected and counted (lowered to a quarter of the open-files limit)")
			tapIdle := fs.Duration("dnstap-idle-timeout", agent.DefaultDnstapIdle, "with --dnstap-socket or --dnstap-listen, disconnect a sender silent this long after its handshake (it reconnects)")
			cfg, srcs, err := a.parse(ctx, fs, args, func() bool {
				return *watch != "" || len(live.Interfaces) > 0 || *follow != "" || *tapSocket != "" || *tapListen != "" || *pbListen != ""
			})
			if err != nil {
				return err
			}
			cfg.Summary = *summary
			if len(live.Interfaces) > 0 {
				*iface = "set"
				n, err := parseSize(*bufSize)
				if err != nil {
					return fmt.Errorf("--buffer-size: %w", err)
				}
				live.BufferSize, live.Filter = int(n), cfg.Filter
				if slices.Contains(live.Interfaces, "any") && len(live.Interfaces) > 1 {
					return fmt.Errorf("--interface any already takes every interface; give it alone")
				}
			}
			if *follow != "" {
				g, err := agent.GrowingSource(*follow, 0, *settle)
				if err != nil {
					return err
				}
				srcs = append(srcs, g)
			}
			for _, tap := range [][3]string{{"unix", *tapSocket, "dnstap"}, {"tcp", *tapListen, "dnstap"}, {"tcp", *pbListen, "protobuf"}} {
				if tap[1] == "" {
					continue
				}
				if *tapConns < 1 || *tapIdle <= 0 {
					return fmt.Errorf("--dnstap-max-conns and --dnstap-idle-timeout: want at least 1 and a positive duration")
				}
				open := agent.DnstapSource
				if tap[2] == "protobuf" {
					open = agent.PowerDNSSource
				}
				src, err := open(agent.DnstapConfig{Network: tap[0], Addr: tap[1], Settle: *settle,
					MaxConns: *tapConns, IdleTimeout: *tapIdle, Log: cfg.Logger})
				if err != nil {
					return fmt.Errorf("%s: %w", tap[2], err)
				}
				srcs = append(srcs, src)
			}
			if *iface != "" {
				cfg.Live = &agent.LiveStats{}
				src, err := agent.LiveSource(live, cfg.Live, cfg.Logger)
				if err != nil {
					return err
				}
				srcs = append(srcs, src)
			}
			var w agent.Watcher
			switch {
			case strings.HasPrefix(*watch, "s3://"):
				list, _, err := s3Lister(ctx, *watch)
				if err != nil {
					return err
				}
				w = &agent.Listed{List: list, Settle: *settle}
			case *watch != "":
				w = &agent.Watch{Dir: *watch, Pattern: *pattern, Settle: *settle}
			}
			if *metricsAddr != "" {
				reg := prometheus.NewRegistry()
				reg.MustRegister(processMetrics()...)
				cfg.Metrics = reg
				stop, err := serveMetrics(ctx, *metricsAddr, reg, nil)
				if err != nil {
					return err
				}
				defer stop()
			}
			st, err := agent.Run(ctx, cfg, srcs, w)
			if err != nil {
				return err
			}
			finite := *watch == "" && *iface == "" && *follow == "" && *tapSocket == "" && *tapListen == "" && *pbListen == ""
			if n := st.Cut.BadSources.Load(); n > 0 && finite {
				// A broken pipeline must not look healthy (exit 0).
				return fmt.Errorf("%d of %d sources could not be read as captures (the log says why); what could be read was shipped", n, len(srcs))
			}
			return nil
		},
	}
}

func importCommand() command {
	return command{
		name:  "import",
		usage: "--site SITE FILE|s3://BUCKET/PREFIX?endpoint=HOST:PORT...",
		short: "backfill: cut capture files into blocks and ship them, with progress; done when every block is acknowledged",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			var a agentFlags
			a.register(fs)
			quiet := fs.Bool("quiet", false, "no progress line")
			cfg, srcs, err := a.parse(ctx, fs, args, func() bool { return false })
			if err != nil {
				return err
			}
			cfg.Once = true
			if !a.spoolSet {
				if cfg.Spool, err = importSpool(cfg.Server, cfg.Queue, cfg.Instance); err != nil {
					return err
				}
			}
			if !*quiet {
				cfg.Progress = os.Stderr
			}
			start := time.Now()
			st, err := agent.Run(ctx, cfg, srcs, nil)
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted; run the same command again to resume")
			}
			fmt.Printf("imported %d packets in %d blocks (%d already on the server) to %s in %s\n",
				st.Cut.Packets.Load(), st.Ship.Acked.Load(), st.Ship.Duplicates.Load(), cfg.Queue, time.Since(start).Round(time.Millisecond))
			if n := st.Cut.Blocks.Load(); n > 0 {
				fmt.Printf("spool state: %d bytes written, %.0f per block\n", st.StateBytesWritten(), float64(st.StateBytesWritten())/float64(n))
			}
			if n := st.Cut.Filtered.Load(); n > 0 {
				fmt.Printf("%d packets not kept by --filter %q\n", n, cfg.Filter)
			}
			if n := st.Cut.SampledOut.Load(); n > 0 {
				fmt.Printf("%d packets not kept by --sample 1/%d\n", n, cfg.Sample)
			}
			if bad := st.Cut.BadSources.Load(); bad > 0 {
				return fmt.Errorf("%d source(s) could not be read in full; see the log above", bad)
			}
			return nil
		},
	}
}

// serveMetrics serves reg at http://ADDR/metrics until stop is called,
// with /healthz (the process answers) and /readyz (ready says so; always
// when ready is nil) for probes.
func serveMetrics(ctx context.Context, addr string, reg prometheus.Gatherer, ready func() bool) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil && !ready() {
			http.Error(w, "not ready: the server has not answered lately", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	lis = netutil.LimitListener(lis, fdlimit.HTTPConns)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
		<-done
	}, nil
}

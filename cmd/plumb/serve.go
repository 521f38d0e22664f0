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
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumb-dev/plumb/admission"
	"github.com/plumb-dev/plumb/dns/enrich"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/internal/memlimit"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/server"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
)

func serveCommand() command {
	return command{
		name:  "serve",
		usage: "",
		short: "run the Plumb server (Arrow Flight) on a data directory",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			var anonKeys, geoip string
			var kafka kafkaFlags
			kafka.register(fs)
			var cfg server.Config
			fs.StringVar(&cfg.Data, "data", "plumb-data", "data `DIR`: metadata, and blobs unless --store says otherwise")
			fs.StringVar(&cfg.Meta, "meta", "", "keep the metadata in the PostgreSQL database at `URL` (postgres://USER@HOST/DB), not DATA/meta.db")
			fs.StringVar(&anonKeys, "anon-keys", "", "`DIR` of the keys builtin:anonymize names (default DATA/keys; make one with `plumb anon-key NAME`)")
			fs.StringVar(&geoip, "geoip", "", "`DIR` of the MaxMind-format databases (and resolver lists) builtin:enrich names (default DATA/geoip); a file renamed over one is used from the next block on")
			fs.StringVar(&cfg.Store, "store", "", "blob store `URL`: file:///DIR or s3://BUCKET?endpoint=HOST:PORT (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY); default DATA/blobs")
			fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8815", "`ADDR` to serve Arrow Flight on")
			fs.IntVar(&cfg.MaxConns, "max-conns", server.DefaultMaxConns, "serve at most `N` Flight connections at once (lowered to a quarter of the open-files limit); more wait, and a socket silent for 10 s is closed")
			fs.DurationVar(&cfg.Visibility, "visibility", 60*time.Second, "how long a block handed to a consumer group stays reserved without an ack")
			fs.IntVar(&cfg.Engine.Slots, "slots", 0, "stage runs at once (worker slots); 0 means one per CPU")
			fs.IntVar(&cfg.Engine.Nice, "stage-nice", engine.StageNice, "CPU priority (nice value, up to 19) of stage runs in this server, below serving reads and puts; 0: the server's own")
			policy := fs.String("workers", "backlog", "how slots are shared: backlog (in proportion to each stage's backlog) or static (equal split)")
			fs.BoolVar(&cfg.Jobs.NoDedup, "no-dedup", false, "run every job's stages on their own, sharing nothing (to measure what merging saves)")
			fs.DurationVar(&cfg.Engine.Tick, "tick", time.Second, "how often slots are re-shared")
			fs.IntVar(&cfg.Engine.MaxAttempts, "max-attempts", 4, "runs a block gets (every failure, timeout, crash or limit counts) before it is set aside as FAULTY")
			fs.Float64Var(&cfg.Engine.Replication, "replication", 1, "copies the store writes of each byte, for the I/O intensity (1 for a directory)")
			fs.Float64Var(&cfg.Engine.ChainAbove, "chain-above", 50, "flag stages above this I/O intensity (MB/s) as candidates to chain")
			fs.StringVar(&cfg.HTTP, "http", "", "serve the dashboard, /metrics, /healthz and /readyz on http://`ADDR`/ (e.g. 127.0.0.1:8816)")
			fs.DurationVar(&cfg.LatencyEvery, "latency-every", time.Minute, "how often the dashboard samples latency for its chart (it keeps 1440 samples)")
			fs.Var((*groupsFlag)(&cfg.HTTPHosts), "http-host", "a host `NAME` the dashboard answers to besides IP addresses, localhost and this machine's name (repeat for several); others get 421, which stops DNS rebinding")
			fs.DurationVar(&cfg.IcebergEvery, "iceberg-every", 10*time.Second, "bring the Iceberg table of each lake queue (QUEUE.parquet is plumb.QUEUE in the SQL catalog DATA/iceberg/catalog.db) in step with it this often (0: no tables)")
			fs.DurationVar(&cfg.IcebergCompactEvery, "iceberg-compact-every", time.Hour, "compact each Iceberg table's past days this often: a site's day of block files into files of up to 128 MiB, rows sorted by registered domain and name, a bloom filter on qname (0: never)")
			fs.DurationVar(&cfg.EndCaptureAfter, "end-capture-after", time.Hour, "end the capture of a site that shipped nothing for this long (its agent died without stopping): an empty final block follows its last, so stages let go of what they hold for it (0: never; plumb site end does it by hand)")
			fs.DurationVar(&cfg.SiteSilentAfter, "site-silent-after", 15*time.Minute, "the dashboard calls a site silent after this long without a block (or three of its block intervals, if longer)")
			metricsAddr := fs.String("metrics", "", "serve only Prometheus metrics on http://`ADDR`/metrics (--http serves them too)")
			readPolicy := fs.String("read-policy", "llf", "order of block reads waiting for a slot: llf (least laxity first; reads that cannot meet their deadline are refused) or fifo")
			fs.IntVar(&cfg.ReadSlots, "read-slots", 16, "block transfers at once (under --read-policy llf, blocks of at most 64 KiB have as many again of their own)")
			fs.DurationVar(&cfg.MaxVisibility, "max-visibility", time.Hour, "the longest visibility timeout a consumer may ask for; longer ones are refused")
			fs.DurationVar(&cfg.SendTimeout, "send-timeout", server.SendTimeout, "end a read whose client takes nothing for this long, freeing its slot")
			fs.DurationVar(&cfg.GroupIdle, "group-idle", server.GroupIdle, "delete a consumer group not read from for this long, releasing its blocks (stages' never; -1s: never)")
			fs.IntVar(&cfg.MaxGroupsPerUser, "max-groups-per-user", 16, "consumer groups one user may create on a queue (-1: no cap)")
			fs.DurationVar(&cfg.ReadMargin, "read-margin", 0, "slack a read keeps before its deadline for its request to arrive and its bytes to reach the reader, beyond twice the server's measured p99 wait to run; 0: 5ms, negative: no margin at all")
			fs.IntVar(&cfg.ReadSlotsPerUser, "read-slots-per-user", 0, "the most of the read slots one user (without --users, one client host) holds at once; 0: half of them, -1: no cap")
			fs.Float64Var(&cfg.ReadRate, "read-rate", 0, "cap block reads at this many bytes per second in all (0: no cap)")
			fs.DurationVar(&cfg.SweepEvery, "sweep-every", time.Minute, "how often blocks past their queue's retention are deleted")
			fs.DurationVar(&cfg.DutyTTL, "duty-ttl", 15*time.Second, "with --meta postgres://: how long a server holds a duty (scheduling, retention, fsck) unrenewed; one that dies hands them on within about this long")
			fs.Func("derived-retention", "the most a stage's output keeps a block when the stage gives no retention and no one has consumed it, a `DURATION` such as 30d (the default), or forever", func(v string) error {
				if v == "forever" {
					cfg.Engine.DerivedRetention = -1
					return nil
				}
				d, err := pipeline.ParseDuration(v)
				if err == nil && d <= 0 {
					err = fmt.Errorf("want a positive duration such as 30d, or forever")
				}
				cfg.Engine.DerivedRetention = time.Duration(d)
				return err
			})
			fs.DurationVar(&cfg.FsckEvery, "fsck-every", time.Hour, "how often metadata is checked against blobs, deleting orphan blobs older than an hour and marking blocks whose blob is gone lost (negative: never)")
			fs.Func("min-free", "keep `SIZE` free on a directory store: below it uploads are refused (agents keep spooling and retry) and stages pause, until space returns (default 100MiB; 0 for none)", func(v string) error {
				n, err := pipeline.ParseSize(v)
				cfg.MinFree = n
				if n == 0 {
					cfg.MinFree = -1
				}
				return err
			})
			gcHeadroom := int64(defaultGCHeadroom)
			fs.Func("gc-headroom", "let the server's heap grow at most `SIZE` past what is live (default 256MiB; 0: only the GOGC target, which lets it grow to five times what is live); a GOMEMLIMIT set in the environment replaces it", func(v string) (err error) {
				gcHeadroom, err = pipeline.ParseSize(v)
				return err
			})
			fs.Func("iceberg-memory", "the memory a compaction or privacy purge of an Iceberg table may hold at once, `SIZE` (default 1GiB): counted from the tables' row counts before a file is read, about 1,600 bytes a row; a day too large for it is named in the log and left as it is", func(v string) (err error) {
				cfg.IcebergMemory, err = pipeline.ParseSize(v)
				return err
			})
			fs.Func("store-cap", "store at most `SIZE` in all, likewise (default: no cap)", func(v string) (err error) {
				cfg.StoreCap, err = pipeline.ParseSize(v)
				return err
			})
			fs.DurationVar(&cfg.Engine.GapWait, "gap-wait", time.Minute, "how long a sequential stage (builtin:dns) waits for a missing block of a site before going on without it")
			fs.DurationVar(&cfg.Engine.Timeout, "stage-timeout", time.Hour, "how long a block or window run may take when its stage sets no timeout (-1s: no limit)")
			fs.Float64Var(&cfg.Engine.MaxExpansion, "max-expansion", engine.Expansion, "the most a block run may write to an output, as a multiple of its input (at least 256MiB); past it the block is set aside as faulty")
			fs.Func("max-output", "the most one block run may write to an output, `SIZE` (default 16GiB)", func(v string) (err error) {
				cfg.Engine.MaxOutput, err = pipeline.ParseSize(v)
				return err
			})
			fs.DurationVar(&cfg.Engine.LeaseTTL, "lease-ttl", 15*time.Second, "how long a remote worker's lease lives without a heartbeat; then its run goes to another worker")
			fs.BoolVar(&cfg.Engine.RemoteOnly, "remote-only", false, "run no stage here: remote workers (plumb worker) run them all")
			fs.StringVar(&cfg.Users, "users", "", "users `FILE` (plumb user add): every call must authenticate and the file's rules decide who may do what; reread on SIGHUP")
			fs.BoolVar(&cfg.ClaimStore, "claim-store", false, "take the store over from the server that claimed it before (when that server's metadata is gone for good: its blobs become orphans this server's fsck deletes)")
			fs.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", false, "serve a non-loopback address without --users (only behind something that authenticates)")
			fs.DurationVar(&cfg.TokenTTL, "token-ttl", 12*time.Hour, "how long a login's bearer token lasts")
			fs.StringVar(&cfg.TLSCert, "tls-cert", "", "serve TLS with the PEM certificate in `FILE` (with --tls-key)")
			fs.StringVar(&cfg.TLSKey, "tls-key", "", "the PEM private key of --tls-cert in `FILE`")
			fs.StringVar(&cfg.ClientCA, "client-ca", "", "require client certificates signed by the PEM CA in `FILE` (mutual TLS); a certificate's common name is its user")
			sb := sandboxFlags(fs, "the server's user; refused with --users")
			level := fs.String("log-level", "info", "log level: debug, info, warn, error")
			if err := fs.Parse(args); err != nil {
				return err
			}
			if fs.NArg() != 0 {
				return errUsage
			}
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(*level)); err != nil {
				return err
			}
			cfg.Sandbox, cfg.RunLimits, cfg.RunShared, cfg.RunNoCgroups = sb.mode, sb.limits, sb.shared, !sb.cgroups
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
			switch p := engine.Policy(*policy); p {
			case engine.Backlog, engine.Static:
				cfg.Engine.Policy = p
			default:
				return fmt.Errorf("--workers %q: want backlog or static", *policy)
			}
			switch p := admission.Policy(*readPolicy); p {
			case admission.LLF, admission.FIFO:
				cfg.ReadPolicy = p
			default:
				return fmt.Errorf("--read-policy %q: want llf or fifo", *readPolicy)
			}
			cfg.Registry = stage.NewRegistry()
			builtin.Register(cfg.Registry, builtin.FindXZ())
			if anonKeys == "" {
				anonKeys = filepath.Join(cfg.Data, "keys")
			}
			builtin.RegisterAnonymize(cfg.Registry, anonKeys)
			cfg.AnonKeys = anonKeys
			if geoip == "" {
				geoip = filepath.Join(cfg.Data, "geoip")
			}
			refs := enrich.NewDatabases(geoip, cfg.Logger)
			builtin.RegisterEnrich(cfg.Registry, refs)
			builtin.RegisterFilter(cfg.Registry, refs)
			kcfg, err := kafka.config()
			if err != nil {
				return err
			}
			builtin.RegisterKafka(cfg.Registry, kcfg)
			if *metricsAddr != "" || cfg.HTTP != "" {
				reg := prometheus.NewRegistry()
				reg.MustRegister(processMetrics()...)
				cfg.Engine.Registerer, cfg.Gatherer = reg, reg
			}
			if *metricsAddr != "" {
				stop, err := serveMetrics(ctx, *metricsAddr, cfg.Gatherer, nil)
				if err != nil {
					return err
				}
				defer stop()
			}
			if cfg.Engine.Nice < 0 || cfg.Engine.Nice > 19 {
				return fmt.Errorf("--stage-nice %d: give a nice value from 0 (the server's own priority) to 19 (the lowest)", cfg.Engine.Nice)
			}
			keepProcessorsForServing(cfg.Engine)
			collectLessOften()
			defer memlimit.Headroom(gcHeadroom, os.Getenv("GOMEMLIMIT"))()
			return server.Run(ctx, cfg)
		},
	}
}

// keepProcessorsForServing gives the Go scheduler a processor per stage
// slot beyond the CPUs. A stage run holds its processor while it
// computes; with one processor per CPU, runs on them all left the
// goroutines serving reads waiting up to the runtime's 10 ms preemption
// (the deadline replay measured 5–30 ms). With spare processors those
// goroutines run at once, and the kernel, seeing stage runs at a lower
// priority (--stage-nice), gives them the CPU first. An explicit
// GOMAXPROCS is left alone.
func keepProcessorsForServing(ec engine.Config) {
	if ec.RemoteOnly || ec.Nice == 0 || os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + ec.LocalSlots())
}

// serveGOGC is the server's garbage collection target (GOGC) unless the
// GOGC variable gives one.
const serveGOGC = 400

// defaultGCHeadroom is how far past what is live the server's heap may
// grow (--gc-headroom). With serveGOGC alone a burst that makes a few
// hundred MiB live (a block of 65,536 half-open TCP streams) let the
// heap grow by 450–520 MiB; the headroom holds it to what is live plus
// this, and leaves small heaps (under a quarter of it live) to GOGC.
const defaultGCHeadroom = 256 << 20

// collectLessOften sets the server's garbage collection target to
// serveGOGC, unless GOGC is set. Puts and stage runs allocate fast, and
// with the default target of 100 a small heap was collected several
// times a second; each cycle took CPU from the goroutines serving reads,
// and on a busy 2-core machine reads due in 20 ms reached the deadline
// replay's readers late (up to 0.2% of those accepted; at most 0.06%
// in six runs at 400). The heap may grow to five times what is live instead of
// twice; defaultGCHeadroom (or GOMEMLIMIT) caps it.
func collectLessOften() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
}

// sandboxOptions are how the server and workers confine stage programs.
type sandboxOptions struct {
	mode    string
	limits  sandbox.Limits
	shared  []string
	cgroups bool
}

// sandboxFlags adds the flags that choose and bound the confinement of
// stage programs; off says as whom unconfined programs run.
func sandboxFlags(fs *flag.FlagSet, off string) *sandboxOptions {
	o := &sandboxOptions{limits: sandbox.DefaultLimits()}
	fs.StringVar(&o.mode, "sandbox", "bwrap", "how stage executables are confined: bwrap (namespaces, an unprivileged uid, rlimits, seccomp; needs the bubblewrap package) or off (as "+off+")")
	fs.Var((*groupsFlag)(&o.shared), "run-ro", "a `PATH` every confined stage run may read, such as tools installed outside /usr (repeat for several)")
	lim := &o.limits
	fs.Func("run-memory", "address space of each stage program process, `SIZE` (default 4GiB)", func(v string) (err error) {
		lim.Memory, err = pipeline.ParseSize(v)
		return err
	})
	fs.Func("run-memory-all", "resident memory of all of one stage run's processes together, `SIZE` (default 4GiB); the run is stopped past it", func(v string) (err error) {
		lim.RunMemory, err = pipeline.ParseSize(v)
		return err
	})
	fs.Func("run-disk", "what one stage run may write into its working directory, `SIZE` (default 16GiB); the run is stopped past it", func(v string) (err error) {
		lim.Disk, err = pipeline.ParseSize(v)
		return err
	})
	fs.Func("run-file-size", "largest file a stage program may write, `SIZE` (default 64GiB)", func(v string) (err error) {
		lim.FileSize, err = pipeline.ParseSize(v)
		return err
	})
	fs.Func("run-tmp", "size of each stage run's private /tmp, a tmpfs held in memory, `SIZE` (default 256MiB)", func(v string) (err error) {
		lim.Tmp, err = pipeline.ParseSize(v)
		return err
	})
	fs.DurationVar(&lim.CPU, "run-cpu", 0, "CPU time of each stage program process (0: none; block stages also have their timeout)")
	fs.IntVar(&lim.Procs, "run-procs", lim.Procs, "processes and threads of one stage run at once (holds a fork bomb); the run is stopped past it")
	fs.BoolVar(&o.cgroups, "run-cgroups", true, "give each stage run a cgroup of its own, which holds --run-memory-all and --run-procs exactly, where this process can make one (as root, or with a delegated cgroup v2); false sums runs' processes from /proc")
	return o
}

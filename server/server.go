package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumb-dev/plumb/admission"
	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/dns/dnsmetrics"
	"github.com/plumb-dev/plumb/dns/dnstop"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/fsck"
	"github.com/plumb-dev/plumb/internal/every"
	"github.com/plumb-dev/plumb/internal/fdlimit"
	"github.com/plumb-dev/plumb/jobs"
	"github.com/plumb-dev/plumb/laketable"
	"github.com/plumb-dev/plumb/metakv"
	"github.com/plumb-dev/plumb/retention"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
	"github.com/plumb-dev/plumb/web"
)

// Config configures a server.
type Config struct {
	// Data is the data directory: metadata lives in DATA/meta.db and, unless
	// Store says otherwise, blobs in DATA/blobs.
	Data string
	// Store is a blob store URL (file:///DIR or s3://BUCKET?endpoint=...).
	Store string
	// Meta, when set, is a PostgreSQL URL (postgres://...) the metadata
	// lives in instead of DATA/meta.db.
	Meta string
	// Listen is the address to serve on; 127.0.0.1:8815 when empty.
	Listen string
	// MaxConns bounds the Flight connections served at once
	// (DefaultMaxConns when 0), lowered to a quarter of the open-files
	// limit; more wait in the kernel's queue. A connection that sends no
	// HTTP/2 preface within ten seconds is closed, so idle sockets cannot
	// hold the slots.
	MaxConns int
	// Visibility is how long a block handed to a consumer group stays
	// reserved without an ack; 60 s when zero.
	Visibility time.Duration
	// MaxVisibility is the most a ticket may ask for; 1 h when zero.
	MaxVisibility time.Duration
	// MaxBlockSize bounds the declared size of an uploaded block; 16 GiB
	// when zero.
	MaxBlockSize int64
	// ReadPolicy orders block reads waiting for a transfer slot: llf
	// (least laxity first, refusing hopeless reads; default) or fifo.
	ReadPolicy admission.Policy
	// ReadSlots is how many block transfers run at once; 16 when 0.
	// Under LLF, blocks of at most 64 KiB have as many slots again of
	// their own, so a read due in milliseconds does not wait behind long
	// transfers.
	ReadSlots int
	// SendTimeout ends a DoGet whose client takes nothing for that long;
	// SendTimeout (1 min) when 0.
	SendTimeout time.Duration
	// GroupIdle deletes consumer groups not read from for that long
	// (stages' never); GroupIdle (7 days) when 0, never when negative.
	GroupIdle time.Duration
	// MaxGroupsPerUser caps the consumer groups one user creates on a
	// queue; 16 when 0, none when negative.
	MaxGroupsPerUser int
	// ReadSlotsPerUser is the most of them (and of the small blocks'
	// slots) one user (or, without users, one client host) holds: half
	// when 0, no cap when negative.
	ReadSlotsPerUser int
	// ReadMargin is slack a read with a deadline keeps, beyond twice the
	// server's goroutines' recent 99th percentile wait to run, for its
	// request's way in and its bytes' way out (which the transfer slots
	// do not see): 5 ms when 0. Negative: no margin at all, not even the
	// measured one.
	ReadMargin time.Duration
	// ReadRate caps block reads at this many bytes per second in all: one
	// token bucket shared by every transfer, so one reader alone gets all
	// of it; 0 for no cap.
	ReadRate float64
	// ShutdownGrace is how long in-flight calls get to finish on shutdown;
	// 10 s when zero.
	ShutdownGrace time.Duration
	// Logger receives the server's logs; slog.Default() when nil.
	Logger *slog.Logger
	// Ready, when set, is called with the listening address once the
	// server accepts calls.
	Ready func(addr net.Addr)
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Registry holds the built-in stages; with nil the server runs no
	// pipelines.
	Registry *stage.Registry
	// Sandbox is how stage executables are confined: "bwrap" (the
	// default) or "off", which runs them as the server's user and is
	// refused with Users.
	Sandbox string
	// RunLimits bound each confined run; sandbox.DefaultLimits when zero.
	RunLimits sandbox.Limits
	// RunShared are more paths every confined run may read (tools
	// installed outside /usr).
	RunShared []string
	// RunNoCgroups keeps runs out of cgroups of their own even where the
	// server could make them (--run-cgroups=false).
	RunNoCgroups bool
	// Engine configures the pipeline engine; its Scratch defaults to
	// DATA/tmp.
	Engine engine.Config
	// Jobs configures the admission of jobs.
	Jobs jobs.Config
	// HTTP, when set, is the address of the dashboard, /metrics, /healthz
	// and /readyz; HTTPReady gets its listening address.
	HTTP      string
	HTTPReady func(addr net.Addr)
	// Gatherer serves /metrics on the HTTP listener; the default registry
	// when nil.
	Gatherer prometheus.Gatherer
	// LatencyEvery is how often the dashboard samples latency for its
	// chart; a minute when zero.
	LatencyEvery time.Duration
	// IcebergEvery is how often the Iceberg tables of the lake queues
	// (package laketable; catalog in DATA/iceberg) are brought in step
	// with them. Zero turns the tables off.
	IcebergEvery time.Duration
	// IcebergCompactEvery is how often the tables' past days are
	// compacted (laketable.Compact); zero never.
	IcebergCompactEvery time.Duration
	// IcebergMemory is the memory a compaction or privacy purge may hold
	// at once (laketable.DefaultMemory when zero).
	IcebergMemory int64
	// AnonKeys is the directory of the anonymization keys (--anon-keys):
	// a table's plumb.privacy-key names one.
	AnonKeys string
	// EndCaptureAfter is how long a site may ship nothing before the
	// server ends its capture (ends.go): an empty final block follows its
	// last, so what stages hold for it is let go of. Zero turns it off.
	EndCaptureAfter time.Duration
	// EndCaptureEvery is how often silent sites are looked for; when
	// zero, a quarter of EndCaptureAfter, at most a minute.
	EndCaptureEvery time.Duration
	// SiteSilentAfter is the least time without a block after which the
	// dashboard calls a site silent (15 minutes when zero, as the alert
	// rule; a site with longer blocks gets three of its intervals).
	SiteSilentAfter time.Duration
	// HTTPHosts are the names the dashboard answers to besides IP
	// addresses, localhost and the machine's host name (web.WithHosts).
	HTTPHosts []string

	// Users is the users file; when set every call must authenticate and
	// the file's rules decide what each user may do. Without it the server
	// serves loopback addresses only, unless InsecureNoAuth.
	Users          string
	InsecureNoAuth bool
	// ClaimStore takes the primary store over from the server that
	// claimed it before (see blob.Claim): for a server whose metadata was
	// lost and recreated.
	ClaimStore bool
	// TokenTTL is how long a login's bearer token lasts; 12 h when zero.
	TokenTTL time.Duration
	// SweepEvery is how often blocks past their queue's retention are
	// deleted; a minute when zero.
	SweepEvery time.Duration
	// DutyTTL is how long a server sharing its metadata holds a duty
	// (scheduling, retention, fsck) unrenewed: one that dies hands its
	// duties on within about this long. 15 s when zero.
	DutyTTL time.Duration
	// MinFree is the free space a directory store keeps: below it uploads
	// are refused (RESOURCE_EXHAUSTED) and stages pause until space
	// returns; 100 MiB when zero, none when negative.
	MinFree int64
	// StoreCap bounds the bytes stored in all, likewise; 0 for none.
	StoreCap int64
	// FsckEvery is how often metadata is checked against blobs, deleting
	// old orphan blobs and marking blocks with missing blobs lost; an hour
	// when zero, never when negative.
	FsckEvery time.Duration
	// TLSCert and TLSKey turn on TLS; ClientCA also requires client
	// certificates signed by it (mutual TLS), whose common name is the user.
	TLSCert, TLSKey, ClientCA string
}

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8815"
	}
	if c.GroupIdle == 0 {
		c.GroupIdle = GroupIdle
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = SendTimeout
	}
	if c.MaxGroupsPerUser == 0 {
		c.MaxGroupsPerUser = 16
	}
	if c.MaxVisibility == 0 {
		c.MaxVisibility = time.Hour
	}
	if c.Visibility == 0 {
		c.Visibility = 60 * time.Second
	}
	if c.MaxBlockSize == 0 {
		c.MaxBlockSize = 16 << 30
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.ReadMargin == 0 {
		// make bench's deadline replay: with no floor, 5–11 of 2,000–4,000
		// reads the server finished in time reached the bench late, quiet
		// or beside a CPU hog; with 5 ms, none.
		c.ReadMargin = 5 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Service implements the Flight service over a metadata database and a
// blob store.
type Service struct {
	aflight.BaseFlightServer
	authz *auth.Authority // nil when authentication is off
	// lim is the shared --read-rate bucket, made once.
	limOnce sync.Once
	lim     *rate.Limiter
	audit   *slog.Logger
	space   *space // nil: no space checks

	cfg   Config
	db    *state.DB
	store blob.Store
	eng   *engine.Engine // nil: no pipelines
	jobs  *jobs.Control  // with eng
	// shared: the metadata is in PostgreSQL, where other servers may
	// schedule.
	shared bool
	adm    *admission.Controller
	ctr    *counters
	log    *slog.Logger
	// readers are the group reads their clients named, for nack.
	readers readers

	// ctx ends when the server shuts down, so that follow streams end
	// instead of holding up a graceful stop.
	ctx context.Context
}

// NewService returns a service over an open database and store.
func NewService(ctx context.Context, cfg Config, db *state.DB, store blob.Store) *Service {
	cfg.defaults()
	ctr := newCounters()
	ac := admission.Config{Policy: cfg.ReadPolicy, Slots: cfg.ReadSlots, PerUser: cfg.ReadSlotsPerUser, Now: cfg.Now,
		Observe: func(est, actual time.Duration) { ctr.readEstimate.Observe(actual.Seconds() / est.Seconds()) }}
	if cfg.ReadMargin >= 0 {
		// Reads keep slack for the way in and out, and for this process's
		// own waits to run, which delay a request and its answer unseen.
		sched := admission.NewSchedLatency()
		ac.Margin = func() time.Duration { return cfg.ReadMargin + sched.Margin() }
	}
	adm := admission.New(ac)
	return &Service{cfg: cfg, db: db, store: store, adm: adm, ctr: ctr, log: cfg.Logger, audit: cfg.Logger.With("log", "audit"), ctx: ctx}
}

// reloadOnHUP rereads the users file on each SIGHUP until ctx ends.
func reloadOnHUP(ctx context.Context, authz *auth.Authority, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := authz.Reload(); err != nil {
				log.Error("users file not reloaded; the previous one stays in force", "err", err)
				continue
			}
			log.Info("users file reloaded", "users", authz.Users())
		}
	}
}

// Run opens the data directory and store, serves Flight until ctx ends,
// then stops gracefully: follow streams end at once, other calls get
// ShutdownGrace to finish.
func Run(ctx context.Context, cfg Config) (err error) {
	cfg.defaults()
	if cfg.Data == "" {
		return errors.New("no data directory; pass --data DIR")
	}
	// Made absolute once, here: every path and store URL below is built
	// from it, and a relative one made "file://plumb-data/blobs", a store
	// at /blobs shared by every server started anywhere.
	if cfg.Data, err = filepath.Abs(cfg.Data); err != nil {
		return fmt.Errorf("data directory %s: %w", cfg.Data, err)
	}
	var (
		authz   *auth.Authority
		signKey []byte // this server's own token signing key
	)
	if cfg.Users == "" {
		for flag, addr := range map[string]string{"--listen": cfg.Listen, "--http": cfg.HTTP} {
			if addr != "" && !IsLoopback(addr) && !cfg.InsecureNoAuth {
				return fmt.Errorf("refusing to serve on %s (%s) without authentication: pass --users FILE (create users with `plumb user add NAME --group G --users FILE`), "+
					"or --insecure-no-auth if something in front of Plumb authenticates", addr, flag)
			}
		}
		cfg.Logger.Warn("authentication is off (no --users): every caller may do everything; serving on loopback only unless --insecure-no-auth", "listen", cfg.Listen)
	} else {
		if signKey, err = auth.SignKey(filepath.Join(cfg.Data, "auth.key")); err != nil {
			return fmt.Errorf("token signing key: %w", err)
		}
		if authz, err = auth.NewAuthority(cfg.Users, signKey, cfg.TokenTTL, cfg.Now); err != nil {
			return err
		}
		cfg.Logger.Info("authentication is on", "users", cfg.Users, "count", authz.Users(), "tls", cfg.TLSCert != "", "mtls", cfg.ClientCA != "")
	}
	if cfg.ClientCA != "" && cfg.TLSCert == "" {
		return errors.New("--client-ca needs --tls-cert and --tls-key")
	}
	if cfg.Store == "" {
		cfg.Store = (&url.URL{Scheme: "file", Path: filepath.Join(cfg.Data, "blobs")}).String()
	}
	primary, err := blob.Open(ctx, cfg.Store)
	if err != nil {
		return err
	}
	db, err := openMeta(ctx, cfg)
	if err != nil {
		primary.Close()
		return err
	}
	defer db.Close()
	if authz != nil {
		// Servers sharing the metadata sign tokens with one key, kept
		// there: a login made on one is good on all, and a rotation
		// (rotate-token-key) reaches all. The first server's own key
		// seeds it, so the tokens it gave out go on working.
		if _, err := db.TokenKey(signKey); err != nil {
			primary.Close()
			return fmt.Errorf("the token signing key shared through the metadata: %w", err)
		}
		if err := refreshTokenKeys(db, authz); err != nil {
			primary.Close()
			return fmt.Errorf("the token signing key shared through the metadata: %w", err)
		}
	}
	if authz != nil {
		authz.SetLogger(cfg.Logger)
	}
	if err := blob.Claim(ctx, primary, db.ID(), cfg.ClaimStore); err != nil {
		primary.Close()
		return err
	}
	// The primary store and those added with `plumb store add`; each blob's
	// store is in the metadata.
	store := blob.NewMulti(db, flight.PrimaryStore, cfg.Store, primary)
	defer store.Close()
	recs, err := db.Stores()
	if err != nil {
		return err
	}
	for _, r := range recs {
		s, err := blob.Open(ctx, r.URL)
		if err != nil {
			cfg.Logger.Error("a store could not be opened; its blocks are unreadable until it can", "store", r.Name, "url", r.URL, "err", err)
			continue
		}
		if err := blob.Claim(ctx, s, db.ID(), false); err != nil {
			cfg.Logger.Error("a store is another server's: its blocks are unreadable here until it is this server's alone", "store", r.Name, "url", r.URL, "err", err)
			s.Close()
			continue
		}
		store.Add(r.Name, r.URL, s)
		store.SetDraining(r.Name, r.Draining)
	}

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another server running? choose another with --listen)", cfg.Listen, err)
	}
	lis = netutil.LimitListener(lis, fdlimit.Fit(cmp.Or(cfg.MaxConns, DefaultMaxConns), "the Flight listener", "max_conns", cfg.Logger))
	srvCtx, stop := context.WithCancel(ctx)
	defer stop()
	// The server's long-running parts (the scheduler, sweeps, rereads, the
	// dashboard) run in one group: at return every part stops and is
	// waited for, and then the tables they use are closed, before the
	// metadata and the stores closed by the defers above.
	parts, partsCtx := errgroup.WithContext(srvCtx)
	run := func(part func(ctx context.Context)) {
		parts.Go(func() error { part(partsCtx); return nil })
	}
	var tables *laketable.Tables // the lake's, closed once the part syncing them returned
	defer func() {
		stop()
		parts.Wait()
		if tables != nil {
			tables.Close()
		}
	}()
	// builtin:dnsmetrics's counts and builtin:dnstop's ranks, added as
	// runs commit.
	dnsCounts := dnsmetrics.NewCollector()
	dnsTop := dnstop.NewCollector(cfg.Now)
	cfg.Engine.Tallier = stage.Talliers{{Prefix: dnstop.TallyPrefix, Tallier: dnsTop}, {Tallier: dnsCounts}}
	svc := NewService(srvCtx, cfg, db, store)
	// Work one server does for all: with the metadata in PostgreSQL,
	// several servers may share it.
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	duty := newDuties(db, cfg.Meta != "", lis.Addr().String(), cfg.DutyTTL, cfg.Logger, now)
	svc.shared = duty.shared
	svc.space = &space{store: store, db: db, minFree: max(cfg.MinFree, 0), capBytes: cfg.StoreCap}
	if cfg.MinFree == 0 {
		svc.space.minFree = 100 << 20
	}
	if r := cfg.Engine.Registerer; r != nil {
		r.MustRegister(dnsCounts, dnsTop)
		// Per queue and per site, read from the metadata at each scrape.
		qc := queueCollector{db: db}
		qc.stageOf = func(g string) (string, bool) {
			if svc.eng == nil {
				return "", false
			}
			return svc.eng.StageOf(g)
		}
		qc.waiting = func(g string) int64 {
			if svc.eng == nil {
				return 0
			}
			return svc.eng.WaitingForWindows(g)
		}
		qc.derived = func() map[string]bool {
			_, written := svc.stageQueues()
			return written
		}
		for _, c := range append([]prometheus.Collector{qc, metaCollector{db}, storeCollector{svc.space}}, svc.ctr.collectors()...) {
			if err := r.Register(c); err != nil {
				cfg.Logger.Warn("Flight metrics not registered", "err", err)
			}
		}
	}
	svc.authz = authz
	var grpcOpts []grpc.ServerOption
	if cfg.TLSCert != "" {
		tcfg, err := serverTLS(cfg.TLSCert, cfg.TLSKey, cfg.ClientCA)
		if err != nil {
			lis.Close()
			return err
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tcfg)))
	}
	if authz != nil {
		a := &authenticator{authz: authz, audit: svc.audit, failures: svc.ctr.authFailures}
		grpcOpts = append(grpcOpts, grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream))
		run(func(ctx context.Context) { reloadOnHUP(ctx, authz, cfg.Logger) })
		run(func(ctx context.Context) { followTokenKeys(ctx, db, authz, cfg.Logger) })
	}
	grpcOpts = append(grpcOpts, grpc.ChainStreamInterceptor(new(receivers).stream)) // after authentication, which names the caller
	if cfg.Registry != nil {
		ecfg := cfg.Engine
		if ecfg.Scratch == "" {
			ecfg.Scratch = filepath.Join(cfg.Data, "tmp")
		}
		if ecfg.Programs == "" {
			ecfg.Programs = filepath.Join(cfg.Data, "programs")
		}
		if err := confine(ctx, cfg, &ecfg); err != nil {
			lis.Close()
			return err
		}
		if ecfg.Logger == nil {
			ecfg.Logger = cfg.Logger
		}
		if ecfg.Now == nil {
			ecfg.Now = cfg.Now
		}
		ecfg.Full = svc.space.full
		ecfg.Shared = duty.shared
		eng, err := engine.New(db, store, cfg.Registry, ecfg)
		if err != nil {
			lis.Close()
			return fmt.Errorf("start the pipeline engine: %w", err)
		}
		jcfg := cfg.Jobs
		if jcfg.Logger == nil {
			jcfg.Logger = cfg.Logger
		}
		ctl, err := jobs.New(db, eng, jcfg)
		if err != nil {
			lis.Close()
			return fmt.Errorf("load the accepted jobs: %w", err)
		}
		svc.eng, svc.jobs = eng, ctl
		if authz != nil {
			run(func(ctx context.Context) { svc.watchRights(ctx, 2*time.Second) })
		}
		run(func(ctx context.Context) {
			duty.run(ctx, "scheduling", func(ctx context.Context) {
				// Another server may have taken jobs while this one did
				// not schedule: the graph starts from what the metadata
				// holds now.
				if err := ctl.Follow(); err != nil {
					cfg.Logger.Warn("reading the jobs before scheduling", "err", err)
				}
				if err := eng.Run(ctx); err != nil {
					cfg.Logger.Error("scheduling stage runs stopped", "err", err)
				}
			})
		})
		if duty.shared {
			// The graph follows the jobs taken through other servers, for
			// what this one answers while another schedules.
			run(func(ctx context.Context) { followJobs(ctx, ctl, cfg.Logger) })
		}
	}
	if cfg.GroupIdle > 0 {
		run(func(ctx context.Context) {
			duty.run(ctx, "idle groups", func(ctx context.Context) {
				svc.expireGroups(ctx, cfg.GroupIdle, cmp.Or(cfg.SweepEvery, min(cfg.GroupIdle/10, time.Minute)))
			})
		})
	}
	run(func(ctx context.Context) {
		duty.run(ctx, "retention", func(ctx context.Context) {
			retention.Run(ctx, db, store, cmp.Or(cfg.SweepEvery, time.Minute), cfg.Logger)
		})
	})
	// Waiting reads are checked against their deadlines as time passes,
	// not only when a transfer ends. Every 5 ms: checked every 20 ms, a
	// read due in 20 ms that became hopeless was refused too late for the
	// refusal to reach its reader before its deadline, and on a busy
	// machine most reads the bench's readers saw late were such refusals.
	run(func(ctx context.Context) { svc.adm.Run(ctx, 5*time.Millisecond) })
	if cfg.IcebergEvery > 0 {
		// Beside shared metadata the catalog is shared too, so the tables
		// move with the duty.
		where := filepath.Join(cfg.Data, "iceberg", "catalog.db")
		var err error
		if cfg.Meta != "" {
			where = "the --meta database"
			// Servers started together race to make the catalog's
			// tables, and PostgreSQL refuses the loser: it tries again.
			for try := 0; try < 3 && srvCtx.Err() == nil; try++ {
				if tables, err = laketable.OpenShared(srvCtx, filepath.Join(cfg.Data, "iceberg"), cfg.Meta, db, store); err == nil {
					break
				}
				select { // a server stopped while it waits stops at once
				case <-srvCtx.Done():
				case <-time.After(time.Second):
				}
			}
			if tables == nil && err == nil {
				err = srvCtx.Err()
			}
		} else {
			tables, err = laketable.Open(srvCtx, filepath.Join(cfg.Data, "iceberg"), db, store)
		}
		if err != nil {
			cfg.Logger.Warn("no Iceberg tables of the lake queues", "err", err)
			tables = nil
		} else {
			cfg.Logger.Info("Iceberg tables of the lake queues", "catalog", where, "warehouse", tables.Warehouse())
			if cfg.IcebergMemory > 0 {
				tables.SetMemory(cfg.IcebergMemory)
			}
			tables.SetKeys(cfg.AnonKeys)
			tables.SetKeyCheck(func(queue, key string) error { return ownersMayUseKey(svc.eng.Graph(), authz, queue, key) })
			run(func(ctx context.Context) {
				duty.run(ctx, "iceberg", func(ctx context.Context) {
					syncTables(ctx, tables, cfg.IcebergEvery, cfg.IcebergCompactEvery, cfg.Logger)
				})
			})
		}
	}
	if cfg.EndCaptureAfter > 0 {
		// Looked for a few times within the wait, at most each minute.
		every := cmp.Or(cfg.EndCaptureEvery, min(time.Minute, max(cfg.EndCaptureAfter/4, 100*time.Millisecond)))
		run(func(ctx context.Context) {
			duty.run(ctx, "silent captures", func(ctx context.Context) {
				svc.endSilentCaptures(ctx, cfg.EndCaptureAfter, every)
			})
		})
	}
	if cfg.FsckEvery >= 0 {
		var recompute func(context.Context, state.Block) error
		if svc.eng != nil {
			recompute = svc.eng.Recompute
		}
		run(func(ctx context.Context) {
			duty.run(ctx, "fsck", func(ctx context.Context) {
				fsck.Run(ctx, db, store, cmp.Or(cfg.FsckEvery, time.Hour), recompute, cfg.Logger)
			})
		})
	}
	if cfg.HTTP != "" {
		dash := web.New(svc.eng, svc.jobs, db, cfg.Gatherer, cfg.Logger).WithSilentAfter(cfg.SiteSilentAfter).WithHosts(cfg.HTTPHosts...)
		if authz != nil {
			dash.WithAuth(authz)
		}
		hlis, err := net.Listen("tcp", cfg.HTTP)
		if err != nil {
			lis.Close()
			return fmt.Errorf("listen on %s: %w (choose another with --http)", cfg.HTTP, err)
		}
		run(func(ctx context.Context) { dash.Serve(ctx, hlis, cfg.LatencyEvery) })
		cfg.Logger.Info("plumb serving the dashboard", "url", "http://"+hlis.Addr().String()+"/")
		if cfg.HTTPReady != nil {
			cfg.HTTPReady(hlis.Addr())
		}
	}
	gs := NewGRPCServer(cfg.Logger, svc.ctr.panics, grpcOpts...)
	aflight.RegisterFlightServiceServer(gs, svc)

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	cfg.Logger.Info("plumb serving Arrow Flight", "addr", lis.Addr().String(), "store", store.String(), "data", cfg.Data)
	if cfg.Ready != nil {
		cfg.Ready(lis.Addr())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	cfg.Logger.Info("plumb shutting down", "grace", cfg.ShutdownGrace)
	stop()
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.ShutdownGrace):
		gs.Stop()
		<-done
	}
	<-errc
	return nil
}

// DefaultMaxConns is Config.MaxConns when zero.
const DefaultMaxConns = 1024

// NewGRPCServer makes the Flight service's gRPC server: message and
// window sizes for blocks, keepalive, a preface deadline, and panic
// recovery around every call, each recovered panic counted on panics
// (when not nil).
func NewGRPCServer(log *slog.Logger, panics prometheus.Counter, extra ...grpc.ServerOption) *grpc.Server {
	recoverErr := func(method string, p any) error {
		// The last net: each panic is a bug to fix, so one short line says
		// where, and a counter says how often.
		if panics != nil {
			panics.Inc()
		}
		log.Error("panic in Flight call", "method", method, "panic", fmt.Sprint(p), "at", stage.PanicSite())
		return status.Errorf(codes.Internal, "internal error in %s; the server logged the details", method)
	}
	return grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(flight.MaxMessage),
		grpc.ForceServerCodecV2(flight.Codec()),
		// Blocks are large: bigger socket buffers cut syscalls per byte, and
		// fixed flow-control windows keep loopback and LAN links full.
		grpc.WriteBufferSize(1 << 20),
		grpc.ReadBufferSize(1 << 20),
		grpc.InitialWindowSize(flight.StreamWindow),
		grpc.InitialConnWindowSize(flight.ConnWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}),
		// A socket that never speaks HTTP/2 is let go in 10 s, not the
		// default 120 s, so idle sockets cannot hold MaxConns; an idle
		// connection gives its 1 MiB write buffer back.
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.SharedWriteBuffer(true),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = recoverErr(info.FullMethod, p)
				}
			}()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = recoverErr(info.FullMethod, p)
				}
			}()
			return h(srv, ss)
		}),
	}, extra...)...)
}

// statusOf turns an error into a gRPC status, keeping one that already is.
func statusOf(err error, code codes.Code) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, state.ErrNotFound), errors.Is(err, blob.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, state.ErrConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return status.Error(code, err.Error())
}

// logRunBounds says how each run's memory and tasks are held: a
// warning where no cgroup could be had, which the operator can fix.
func logRunBounds(log *slog.Logger, sb *sandbox.Sandbox, off bool) {
	if sb.Cgroups() || off {
		log.Info("stage runs bounded as a whole", "how", sb.RunBounds())
		return
	}
	log.Warn("stage runs bounded as a whole, but not exactly", "how", sb.RunBounds())
}

// confine sets up the sandbox for the engine's executables. Where it
// cannot be set up the server still starts: built-ins run, executables
// are refused with the reason.
func confine(ctx context.Context, cfg Config, ecfg *engine.Config) error {
	switch cfg.Sandbox {
	case "off":
		if cfg.Users != "" {
			return errors.New("--sandbox off would run every user's programs as the server's own user; it is refused with --users")
		}
		ecfg.Unconfined = true
		cfg.Logger.Warn("stage executables run unconfined, as the server's user (--sandbox off)")
		return nil
	case "", "bwrap":
	default:
		return fmt.Errorf("--sandbox %q: want bwrap or off", cfg.Sandbox)
	}
	lim := cfg.RunLimits
	if lim == (sandbox.Limits{}) {
		lim = sandbox.DefaultLimits()
	}
	private := []string{cfg.Data}
	if cfg.Users != "" {
		private = append(private, cfg.Users)
	}
	sb, err := sandbox.New(ctx, sandbox.Config{Limits: lim, Private: private, Shared: cfg.RunShared, NoCgroups: cfg.RunNoCgroups})
	if err != nil {
		ecfg.NoSandbox = err
		cfg.Logger.Warn("stage executables will be refused; built-ins run", "err", err)
		return nil
	}
	logRunBounds(cfg.Logger, sb, cfg.RunNoCgroups)
	ecfg.Sandbox = sb
	return nil
}

// openMeta opens the metadata: DATA/meta.db, or the PostgreSQL database
// cfg.Meta names.
func openMeta(ctx context.Context, cfg Config) (*state.DB, error) {
	if cfg.Meta == "" {
		return state.Open(filepath.Join(cfg.Data, "meta.db"), state.Options{Now: cfg.Now})
	}
	kv, err := metakv.OpenPostgres(ctx, cfg.Meta)
	if err != nil {
		return nil, fmt.Errorf("--meta: %w (is PostgreSQL up, and the URL's user allowed to make a table?)", err)
	}
	db, err := state.OpenKV(ctx, kv, state.Options{Now: cfg.Now})
	if err != nil {
		kv.Close()
		return nil, fmt.Errorf("--meta: %w", err)
	}
	return db, nil
}

// followJobs keeps the engine's graph that of the jobs in the metadata,
// which other servers sharing it change.
func followJobs(ctx context.Context, ctl *jobs.Control, log *slog.Logger) {
	every.Run(ctx, 2*time.Second, func() {
		if err := ctl.Follow(); err != nil {
			log.Warn("reading the jobs other servers took", "err", err)
		}
	})
}

// TokenKeysEvery is how often a server reads the token signing keys
// from the metadata: a rotation made on another server sharing it takes
// effect here within this.
const TokenKeysEvery = 5 * time.Second

// refreshTokenKeys gives authz the signing keys the metadata holds now.
func refreshTokenKeys(db *state.DB, authz *auth.Authority) error {
	cur, prev, err := db.TokenKeys()
	if err != nil {
		return err
	}
	return authz.SetKeys(cur, prev)
}

// followTokenKeys keeps authz's signing keys those of the metadata until
// ctx ends, so a rotation (rotate-token-key) on any server sharing it
// reaches this one.
func followTokenKeys(ctx context.Context, db *state.DB, authz *auth.Authority, log *slog.Logger) {
	failing := false
	every.Run(ctx, TokenKeysEvery, func() {
		err := refreshTokenKeys(db, authz)
		if err != nil && !failing {
			log.Warn("the token signing keys could not be read from the metadata; the ones read before stay in force", "err", err)
		}
		failing = err != nil
	})
}

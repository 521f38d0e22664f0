package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"golang.org/x/sync/errgroup"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/codecs"
)

// Config configures an agent or an import.
type Config struct {
	Server   string
	Security client.Security // TLS and token for the server
	Queue    string          // e.g. pcap.sz
	Instance string          // site or capture host
	Spool    string          // spool directory
	Codec    codecs.Codec
	MaxBytes int64
	Interval time.Duration
	SpoolMax int64
	InFlight int
	// Filter is a capture filter in tcpdump's syntax (package filter):
	// packets it does not keep are not cut into blocks. A live capture
	// attaches it to the socket, so the kernel drops them.
	Filter string
	// Sample, above 1, keeps the packets of one address pair in Sample
	// (netpkt.PairSampler), after the filter: whole flows, so a site
	// under a flood ships a known share of it. Each block names its rate
	// (block.SampleInfo), and the DNS rows made of it carry it, so every
	// count can be scaled back to a total.
	Sample uint32
	// MaxBackoff caps the wait between upload attempts; 30 s when zero.
	MaxBackoff time.Duration
	// NewInstance asserts that the instance never shipped a block, so a
	// fresh spool may start at sequence 1 without asking the server.
	NewInstance bool
	// Once marks an import: a block the server refuses ends the run with
	// an error instead of staying in the spool for an operator.
	Once bool
	// Progress, when set, receives a progress line every second.
	Progress io.Writer
	// StopGrace is how long a stopped agent keeps shipping what it has
	// spooled; 5 s when zero.
	StopGrace time.Duration
	// Metrics, when set, receives the agent's Prometheus metrics.
	Metrics prometheus.Registerer
	// Live, when set, holds the counts of the live sources (kernel drops
	// per interface), for the metrics, the summary and the last line.
	Live *LiveStats
	// Summary is how often a summary is logged; one minute when zero.
	Summary time.Duration
	Logger  *slog.Logger

	totalSourceBytes int64 // for the progress line; set by Run
}

// Stats are the totals of a run.
type Stats struct {
	Cut  *Counters
	Ship *ShipCounters
	// Recovered says what the spool found on start.
	Recovered Recovered
	// StateBytesWritten is what the spool has written to its state
	// journal and snapshots so far (nil before the spool opens): the
	// cost per block, flat however many sources are done.
	StateBytesWritten func() int64
}

// Run cuts the sources into blocks in the spool and ships them. Watch,
// when set, is a directory whose rotated capture files are cut after the
// listed sources, until ctx ends.
func Run(ctx context.Context, cfg Config, sources []Source, watch Watcher) (Stats, error) {
	st := Stats{Cut: &Counters{}, Ship: &ShipCounters{}}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := block.ValidateQueue(cfg.Queue); err != nil {
		return st, err
	}
	if err := block.ValidateInstance(cfg.Instance); err != nil {
		return st, err
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 256 << 20
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 5 * time.Second
	}
	log = log.With("queue", cfg.Queue, "instance", cfg.Instance)
	for _, s := range sources {
		if s.Size > 0 {
			cfg.totalSourceBytes += s.Size
		}
	}
	spool, rec, err := OpenSpool(cfg.Spool, cfg.Queue, cfg.Instance)
	if err != nil {
		return st, err
	}
	st.StateBytesWritten = spool.StateBytesWritten
	st.Recovered = rec
	if rec.Promoted+rec.Discarded > 0 {
		log.Warn("spool recovered after a crash", "promoted", rec.Promoted, "discarded_partial_blocks", rec.Discarded, "discarded_bytes", rec.DiscardedSize)
	}
	for _, s := range sources {
		if !s.Rereadable && rec.Discarded > 0 {
			// A block was cut short and this run reads a source that cannot
			// be rewound: those packets are gone. Say so. (The bytes on
			// disk undercount: the tail was still in the compressor.)
			log.Error("packets lost: a block cut short by a crash came from a source that cannot be read again",
				"partial_blocks", rec.Discarded, "lost_bytes_at_least", rec.DiscardedSize)
			if err := spool.AddLost(rec.DiscardedSize); err != nil {
				return st, err
			}
			break
		}
	}
	client, err := client.DialSecure(cfg.Server, cfg.Security)
	if err != nil {
		return st, err
	}
	defer client.Close()
	client.Retries = 0 // the shipper backs off itself

	if _, ok := spool.NextSeq(); !ok {
		if err := learnSeq(ctx, cfg, spool, client, log); err != nil {
			return st, err
		}
	} else if err := checkServer(ctx, cfg, spool, client); err != nil {
		return st, err
	}

	if cfg.Metrics != nil {
		if err := registerMetrics(cfg.Metrics, st, spool, cfg.SpoolMax, cfg.Sample, cfg.Live, prometheus.Labels{"queue": cfg.Queue, "site": cfg.Instance}); err != nil {
			return st, err
		}
	}
	cutCfg := CutConfig{Queue: cfg.Queue, Instance: cfg.Instance, Codec: cfg.Codec, MaxBytes: cfg.MaxBytes, Interval: cfg.Interval, SpoolMax: cfg.SpoolMax, Filter: cfg.Filter, Sample: cfg.Sample}
	sh := &Shipper{Spool: spool, Client: client, InFlight: cfg.InFlight, MaxWait: cfg.MaxBackoff, Log: log, Counters: st.Ship, FailFast: cfg.Once}
	// The cutter stops with ctx, finishing its open block. The shipper
	// outlives it by up to StopGrace, so a stopped agent ships what it cut
	// if the server is there; what it cannot ship stays in the spool.
	shipCtx, stopShip := context.WithCancel(context.WithoutCancel(ctx))
	defer stopShip()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(cfg.StopGrace, stopShip)
		context.AfterFunc(shipCtx, func() { t.Stop() })
	})
	defer stopGrace()
	var g errgroup.Group
	cutDone := make(chan struct{})
	g.Go(func() error {
		defer close(cutDone)
		var srcs Sources = List(sources...)
		if watch != nil {
			watch.use(spool, log)
			srcs = chain{List(sources...), watch}
		}
		err := Cut(ctx, cutCfg, spool, srcs, log, st.Cut)
		switch {
		case err == nil:
			log.Info("sources exhausted; shipping what is spooled, then stopping")
		case ctx.Err() != nil:
			log.Info("stopping; shipping what is spooled", "grace", cfg.StopGrace)
			err = nil
		default:
			stopShip()
		}
		return err
	})
	g.Go(func() error {
		// Finite sources (files, a stdin that closes) end the run once all
		// is shipped; live sources end when ctx does.
		err := sh.Run(shipCtx, cutDone)
		if shipCtx.Err() != nil {
			err = nil
		}
		stopShip()
		return err
	})
	g.Go(func() error {
		report(shipCtx, cfg, spool, st, log)
		return nil
	})
	err = g.Wait()
	if cfg.Progress != nil {
		progressLine(cfg.Progress, st, spool, cfg.totalSourceBytes, time.Time{})
		if isTerminal(cfg.Progress) {
			fmt.Fprintln(cfg.Progress) // leave the redrawn line
		}
	}
	if cfg.Live != nil {
		// As tcpdump ends: what the kernel could not hand over is said.
		cfg.Live.Each(func(name string, st *IfaceStats) {
			log.Info(fmt.Sprintf("%s: %d packets captured, %d packets dropped by kernel", name, st.Packets.Load(), st.KernelDropped.Load()),
				"interface", name, "packets", st.Packets.Load(), "kernel_dropped", st.KernelDropped.Load())
		})
	}
	if left, _ := spool.Ready(); len(left) > 0 && err == nil {
		log.Warn("stopped with blocks still in the spool; they are shipped at the next start", "blocks", len(left), "bytes", spool.Bytes())
	}
	return st, err
}

// learnSeq sets a fresh spool's sequence from the server, so a lost spool
// never makes the instance reuse a number.
func learnSeq(ctx context.Context, cfg Config, spool *Spool, c *client.Client, log *slog.Logger) error {
	if cfg.NewInstance {
		log.Info("new instance: first block is sequence 1")
		return spool.SetLastSeq(0, false)
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := c.LastSeq(qctx, cfg.Queue, cfg.Instance)
	if err == nil {
		err = spool.BindServer(res.Server)
		if errors.Is(err, ErrOtherServer) {
			return err
		}
	}
	if err != nil && cfg.Once {
		// An import is run by hand: say at once that the server is away.
		return fmt.Errorf("the server could not be asked for instance %s's last sequence (%v); run the import when the server is reachable, or pass --new-instance if this instance never shipped a block",
			cfg.Instance, err)
	}
	if err != nil {
		// Capture now: the blocks are numbered when the server is reached.
		log.Warn("the server cannot be asked where this instance stands; capturing with provisional sequence numbers, fixed at the first contact",
			"spool", filepath.Clean(cfg.Spool), "err", err)
		return spool.StartProvisional()
	}
	if res.Found {
		log.Warn("spool has no sequence state; continuing after the server's last sequence", "last_seq", res.Seq)
	}
	return spool.SetLastSeq(res.Seq, res.Found)
}

// checkServer asks the server who it is before anything is cut, so a
// spool kept from another server is refused before it skips a source it
// finished there. An unreachable server is no error (a site captures
// while its WAN is down); the shipper asks again at its first contact.
func checkServer(ctx context.Context, cfg Config, spool *Spool, c *client.Client) error {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := c.LastSeq(qctx, cfg.Queue, cfg.Instance)
	if err != nil {
		return nil
	}
	return spool.BindServer(res.Server)
}

// chain yields the sources of a, then of b.
type chain struct{ a, b Sources }

func (c chain) Next(ctx context.Context) (Source, error) {
	if c.a != nil {
		s, err := c.a.Next(ctx)
		if err != io.EOF {
			return s, err
		}
	}
	return c.b.Next(ctx)
}

package agent

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/dns/dnstap"
	"github.com/plumb-dev/plumb/internal/countio"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/filter"
	"github.com/plumb-dev/plumb/pcap/netpkt"
)

// Source is where packets come from.
type Source struct {
	// Name identifies the source in the spool's state and in logs: a file's
	// absolute path, or "-" for stdin.
	Name string
	// Rereadable sources (files) are read again after a crash from where
	// the last finished block ended; the others (stdin, live) lose what
	// was in the block being cut.
	Rereadable bool
	// Live sources drop packets, and count them, while the spool is full;
	// the others wait.
	Live bool
	// Size in bytes, when known, for progress.
	Size int64
	// Stamp recognises a file when it is met again (watched directories).
	Stamp Stamp
	Open  func() (io.ReadCloser, error)
}

// FileSource reads a capture file (plain or compressed).
func FileSource(path string) (Source, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Source{}, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return Source{}, err
	}
	if fi.IsDir() {
		return Source{}, fmt.Errorf("%s is a directory; give capture files", path)
	}
	// A Frame Streams file of dnstap is cut as its capture (dnstap.OpenCapture).
	return Source{Name: abs, Rereadable: true, Size: fi.Size(), Open: func() (io.ReadCloser, error) {
		f, err := os.Open(abs)
		if err != nil {
			return nil, err
		}
		return dnstap.OpenCapture(f), nil
	}}, nil
}

// StdinSource reads a capture stream from standard input, as written by
// `tcpdump -w -`. Closing it ends its reads at once, even while the
// writer is quiet: a read of a blocking pipe or terminal cannot be
// interrupted, so stdin is read on a goroutine of its own through a
// pipe, and a stop closes the pipe. That goroutine stays in its last
// read until the process ends.
func StdinSource() Source {
	return Source{Name: "-", Open: func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() {
			_, err := io.Copy(pw, os.Stdin)
			pw.CloseWithError(err) // nil: the reader sees EOF
		}()
		return pr, nil
	}}
}

// CutConfig says how to cut blocks.
type CutConfig struct {
	Queue    string
	Instance string
	Codec    codecs.Codec
	// MaxBytes is the most uncompressed pcap bytes in a block.
	MaxBytes int64
	// Interval, when set, also cuts at every multiple of it in packet time
	// (blocks line up on the clock, like tcpdump -G).
	Interval time.Duration
	// SpoolMax bounds the bytes waiting in the spool; 0 is no bound.
	SpoolMax int64
	// Filter keeps only the packets it matches (tcpdump syntax).
	Filter string
	// Sample, above 1, keeps one address pair in Sample (Config.Sample).
	Sample uint32

	// perPacket turns off copying runs of records whole, so tests can
	// check that both ways cut the same bytes.
	perPacket bool
}

// Counters are the cutter's running totals, safe to read while it runs.
type Counters struct {
	Packets     atomic.Int64
	BytesIn     atomic.Int64 // uncompressed pcap bytes cut into blocks
	Blocks      atomic.Int64
	Dropped     atomic.Int64 // packets dropped while the spool was full
	Filtered    atomic.Int64 // packets read from files and stdin that --filter did not keep
	SampledOut  atomic.Int64 // packets --sample did not keep
	BadSources  atomic.Int64
	SourceBytes atomic.Int64 // bytes read from the sources (compressed, if they are)
}

// cutter writes the packets of sources into spooled blocks.
type cutter struct {
	cfg   CutConfig
	spool *Spool
	log   *slog.Logger
	c     *Counters

	// The block being cut.
	f       *os.File
	fw      *bufio.Writer
	sum     hash.Hash // of the compressed bytes, as written to f
	cw      io.WriteCloser
	pw      *pcap.Writer
	name    block.Name
	end     time.Time // packet time at which an Interval cut falls
	packets int64
	link    linkInfo
	pos     map[string]SourcePos // source positions once this block is finished
	nextSeq uint64
	// drops, for a live source, is what its kernel dropped before the
	// packet the cutter is at (or, between packets, before the next);
	// droppedCounted is how much of it the blocks cut so far record. A
	// block records what was dropped since the block before it, so drops
	// before a block's first packet, or after the last packet of all, are
	// in a block too: a run that captured one packet of 3,000 had its
	// 2,999 drops in none.
	drops          func() int64
	droppedCounted int64
	// gone: the source read last cannot be read on after a stop (a live
	// capture, stdin): what passes while the agent is stopped is not
	// captured, so the block a stop finishes ends the site's capture.
	gone bool

	// Finishing a block (fsyncs and renames) runs on its own goroutine, in
	// order, while the next block is cut: a live source is not left
	// waiting in the kernel's ring while a large block is fsynced.
	jobs    chan finishJob
	pending atomic.Int64 // bytes of blocks queued or being finished
	finDone chan struct{}
	finMu   sync.Mutex
	finErr  error
}

type finishJob struct {
	f       *os.File
	name    block.Name
	pos     map[string]SourcePos
	packets int64
	bytes   int64
	size    int64  // compressed size on disk
	sum     string // SHA-256 of what was written, hex
	dropped int64  // by the kernel while the block was cut
	final   bool   // the sources ended with it
}

// finisher makes queued blocks durable in order. After a failure it
// finishes nothing more: a later block's state would claim packets the
// failed block never made durable. Those blocks are discarded and their
// packets read again (or counted lost) at the next start.
func (ct *cutter) finisher() {
	defer close(ct.finDone)
	for j := range ct.jobs {
		if ct.finishError() != nil {
			ct.spool.Discard(j.f, j.name)
			ct.pending.Add(-j.size)
			continue
		}
		// Uncounted for the moment Finish takes: never counted twice, so a
		// writer waiting for room is woken by Finish's signal with the
		// true total.
		ct.pending.Add(-j.size)
		err := ct.spool.Finish(j.f, j.name, j.pos, Finished{SHA256: j.sum, KernelDropped: j.dropped, Final: j.final})
		if err != nil {
			ct.finMu.Lock()
			ct.finErr = err
			ct.finMu.Unlock()
			continue
		}
		ct.c.Blocks.Add(1)
		ct.log.Debug("block cut", "block", j.name.String(), "packets", j.packets, "bytes", j.bytes, "kernel_dropped", j.dropped)
	}
}

func (ct *cutter) finishError() error {
	ct.finMu.Lock()
	defer ct.finMu.Unlock()
	return ct.finErr
}

type linkInfo struct {
	linkType layers.LinkType
	snaplen  uint32
	nanos    bool
}

// Cut reads every source in order into blocks in the spool. Rereadable
// sources resume where the last finished block ended. It returns when the
// sources are exhausted or ctx ends, after finishing the open block either
// way (only a crash leaves a block unfinished). It returns ctx's error when
// stopped.
func Cut(ctx context.Context, cfg CutConfig, spool *Spool, sources Sources, log *slog.Logger, c *Counters) (err error) {
	next, ok := spool.NextSeq()
	if !ok {
		return errors.New("spool has no sequence state; the agent must learn the last sequence from the server first")
	}
	ct := &cutter{cfg: cfg, spool: spool, log: log, c: c, pos: map[string]SourcePos{}, nextSeq: next,
		jobs: make(chan finishJob, 1), finDone: make(chan struct{})}
	go ct.finisher()
	defer func() {
		ct.abandon()
		close(ct.jobs)
		<-ct.finDone
		if ferr := ct.finishError(); ferr != nil && (err == nil || errors.Is(err, ctx.Err())) {
			err = ferr
		}
	}()
	return ct.run(ctx, sources)
}

func (ct *cutter) run(ctx context.Context, sources Sources) error {
	for {
		if ctx.Err() != nil {
			// Stopped. Where the source cannot be read on from here, the
			// capture ends with this block: marked final, so the stages
			// let go of what they hold at its end rather than wait for a
			// next block that may never come (the site stopped for good).
			// A capture started again is a new one, as it is on the wire.
			finish := ct.finish
			if ct.gone {
				finish = ct.stopLast
			}
			if err := finish(); err != nil {
				return err
			}
			return ctx.Err()
		}
		src, err := sources.Next(ctx)
		switch {
		case err == io.EOF:
			// Finite sources that ended: the block is their last.
			return ct.finishLast()
		case errors.Is(err, ErrIdle):
			// Nothing new for a while: ship what is cut so far.
			if err := ct.finish(); err != nil {
				return err
			}
			continue
		case err != nil && ctx.Err() != nil:
			continue // finish the open block above
		case err != nil:
			return err
		}
		if err := ct.source(ctx, src); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// source cuts one source; a followed file that is replaced under its
// name is read again from the start of the new one.
func (ct *cutter) source(ctx context.Context, src Source) error {
	for {
		err := ct.read(ctx, src)
		if !errors.Is(err, ErrReplaced) {
			return err
		}
		ct.log.Warn("capture file replaced or truncated (did its writer restart?); reading the new one from its start", "source", src.Name)
		// Nothing of the new file is read yet; the positions of the
		// old one are no use.
		ct.pos[src.Name] = SourcePos{}
		ct.spool.Reopen(src.Name, false)
	}
}

func (ct *cutter) read(ctx context.Context, src Source) error {
	pos := ct.spool.Source(src.Name)
	ct.gone = !src.Rereadable
	if src.Rereadable && pos.Done {
		ct.log.Debug("source already cut into blocks; skipping", "source", src.Name)
		return nil
	}
	rc, err := src.Open()
	if err != nil {
		ct.c.BadSources.Add(1)
		ct.log.Error("cannot open source; skipping it", "source", src.Name, "err", err)
		return nil
	}
	defer rc.Close()
	// When the agent is stopped, a source that can drain (a live capture)
	// is asked to end after what it already holds; any other is closed,
	// which also unblocks a read waiting on an idle stdin.
	st, drains := rc.(interface{ Stop() })
	defer context.AfterFunc(ctx, func() {
		if drains {
			st.Stop()
		} else {
			rc.Close()
		}
	})()
	// A growing file that pauses finishes the block being cut, from
	// within its Read: the cutter is between packets there.
	if g, ok := rc.(interface{ OnIdle(func()) }); ok {
		g.OnIdle(func() {
			if ct.f == nil {
				return
			}
			ct.log.Debug("source idle; finishing the block being cut", "source", src.Name, "block", ct.name)
			if err := ct.finish(); err != nil {
				ct.log.Error("finish block", "block", ct.name, "err", err)
			}
		})
	}
	counted := &countio.Reader{R: rc, N: &ct.c.SourceBytes}
	rd, closer, err := pcap.NewReader(counted)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, ErrReplaced) {
		return err
	}
	if err != nil {
		ct.c.BadSources.Add(1)
		ct.log.Error("not a capture; skipping it", "source", src.Name, "err", err)
		ct.pos[src.Name] = SourcePos{Done: true, Stamp: src.Stamp}
		return nil
	}
	defer closer.Close()
	link := linkInfo{rd.LinkType, rd.Snaplen, rd.Nanos}
	// A live source has its filter on the socket already.
	var flt *filter.Filter
	if ct.cfg.Filter != "" && !src.Live {
		if flt, err = filter.Compile(ct.cfg.Filter, rd.LinkType); err != nil {
			ct.c.BadSources.Add(1)
			ct.log.Error("the filter cannot apply to this source; skipping it", "source", src.Name, "err", err)
			ct.pos[src.Name] = SourcePos{Done: true, Stamp: src.Stamp}
			return nil
		}
	}

	var n int64        // packets read from this source
	var inPacket int64 // 1 while the packet read last is being added
	if d, ok := rc.(interface{ DropsAt(int64) int64 }); ok {
		ct.drops = func() int64 { return d.DropsAt(n - inPacket) }
		ct.droppedCounted = 0
	}
	skip := int64(0)
	if src.Rereadable {
		skip = pos.Packets
		if skip > 0 && pos.Head != "" && HeadOf(src.Name, pos.Head) != pos.Head {
			ct.log.Warn("capture file replaced while the agent was down; reading the new one from its start", "source", src.Name)
			skip = 0
		}
		if skip > 0 {
			ct.log.Info("resuming source after its last finished block", "source", src.Name, "packets", skip)
		}
	}
	// What the positions recognise the file by: a followed file learns
	// its head as it grows.
	stamp := func() Stamp { return src.Stamp }
	if st, ok := rc.(interface{ Stamp() Stamp }); ok {
		stamp = st.Stamp
	}
	sampler := netpkt.PairSampler{N: ct.cfg.Sample}
	runs := rd.Raw() && !ct.cfg.perPacket && flt == nil && ct.cfg.Sample <= 1
	for {
		if err := ctx.Err(); err != nil && !drains {
			return err
		}
		// Within an open block, records the block can take are copied
		// as runs, as they are in the file; the first packet of each
		// block and anything unusual go one at a time below, where the
		// cutting decisions are made.
		if runs && ct.f != nil && ct.link == link && n >= skip {
			run, k := rd.NextRun(pcap.RunLimit{Bytes: ct.cfg.MaxBytes - ct.pw.Bytes, Before: ct.end})
			if k > 0 {
				if err := ct.pw.WriteRun(run); err != nil {
					return fmt.Errorf("block %s: write: %w", ct.name, err)
				}
				n += int64(k)
				ct.packets += int64(k)
				ct.c.Packets.Add(int64(k))
				ct.c.BytesIn.Add(int64(len(run)))
				ct.pos[src.Name] = SourcePos{Packets: n, Stamp: stamp()}
				continue
			}
		}
		data, ci, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil && ctx.Err() != nil && !drains {
			return ctx.Err()
		}
		if errors.Is(err, ErrReplaced) {
			return err
		}
		if err != nil {
			// The packets before the fault are kept; the rest of this
			// source cannot be read past it.
			ct.c.BadSources.Add(1)
			ct.log.Error("capture damaged; keeping the packets before the damage", "source", src.Name, "packets", n, "err", err)
			break
		}
		n++
		if n <= skip {
			continue
		}
		if flt != nil && !flt.MatchLen(data, ci.Length) {
			ct.c.Filtered.Add(1)
			continue
		}
		if !sampler.Keep(rd.LinkType, data) {
			ct.c.SampledOut.Add(1)
			continue
		}
		inPacket = 1
		written, err := ct.packet(ctx, src, link, ci, data)
		inPacket = 0
		if err != nil {
			return err
		}
		if written {
			ct.pos[src.Name] = SourcePos{Packets: n, Stamp: stamp()}
		}
	}
	ct.pos[src.Name] = SourcePos{Packets: n, Done: true, Stamp: stamp()}
	return nil
}

// waitForRoom holds a new block until the spool has room. A live source
// cannot wait: its packet is dropped and counted instead.
func (ct *cutter) waitForRoom(ctx context.Context, src Source) (dropped bool, err error) {
	full := func() bool { return ct.spool.Bytes()+ct.pending.Load() >= ct.cfg.SpoolMax }
	for full() {
		if src.Live {
			ct.c.Dropped.Add(1)
			return true, nil
		}
		changed := ct.spool.Changed()
		if !full() {
			break
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-changed:
		}
	}
	return false, nil
}

// packet adds a packet to the current block, cutting first when the block
// is full, crosses an interval boundary or changes link type. It reports
// false when a live source's packet was dropped for want of spool room.
func (ct *cutter) packet(ctx context.Context, src Source, link linkInfo, ci gopacket.CaptureInfo, data []byte) (bool, error) {
	size := int64(pcap.RecordHeaderSize + len(data))
	if ct.f != nil {
		cut := link != ct.link ||
			ct.pw.Bytes+size > ct.cfg.MaxBytes ||
			!ct.end.IsZero() && !ci.Timestamp.Before(ct.end)
		if cut {
			if err := ct.finish(); err != nil {
				return false, err
			}
		}
	}
	if ct.f == nil {
		if ct.cfg.SpoolMax > 0 {
			if dropped, err := ct.waitForRoom(ctx, src); err != nil || dropped {
				return false, err
			}
		}
		if err := ct.begin(link, ci.Timestamp); err != nil {
			return false, err
		}
	}
	if err := ct.pw.WritePacket(ci, data); err != nil {
		return false, fmt.Errorf("block %s: write: %w", ct.name, err)
	}
	ct.packets++
	ct.c.Packets.Add(1)
	ct.c.BytesIn.Add(size)
	return true, nil
}

func (ct *cutter) begin(link linkInfo, first time.Time) error {
	if err := ct.finishError(); err != nil {
		return err
	}
	ct.name = block.Name{Time: first.UTC().Truncate(time.Second), Seq: ct.nextSeq, Info: block.SampleInfo(ct.cfg.Sample),
		Instance: ct.cfg.Instance, Queue: ct.cfg.Queue}
	if err := ct.name.Validate(); err != nil {
		return err
	}
	f, err := ct.spool.Create(ct.name)
	if err != nil {
		return fmt.Errorf("spool: create block %s: %w", ct.name, err)
	}
	sum := sha256.New()
	// Compressors write a chunk at a time (snappy: ~25 KB); gathering
	// them saves most of the system calls.
	fw := bufio.NewWriterSize(f, 1<<20)
	cw, err := ct.cfg.Codec.NewWriter(io.MultiWriter(fw, sum))
	if err != nil {
		f.Close()
		return err
	}
	pw, err := pcap.NewWriter(cw, link.linkType, link.snaplen, link.nanos)
	if err != nil {
		f.Close()
		return err
	}
	ct.f, ct.fw, ct.sum, ct.cw, ct.pw, ct.link, ct.packets = f, fw, sum, cw, pw, link, 0
	ct.end = time.Time{}
	if ct.cfg.Interval > 0 {
		ct.end = first.Truncate(ct.cfg.Interval).Add(ct.cfg.Interval)
	}
	return nil
}

// finish closes the current block and queues it to be made durable in
// the spool.
func (ct *cutter) finish() error { return ct.finishBlock(false) }

// stopLast ends a capture stopped for good: its open block is the
// last. With none open (the stop came between a block cut at its size
// and the next packet), the last finished block may have shipped
// already, where it can no longer be marked: an empty block (a capture
// header, no packet) follows it, marked final, so the stages still learn
// where the capture ends.
func (ct *cutter) stopLast() error {
	if ct.f != nil || ct.name.Seq == 0 { // a block open, or none cut yet
		return ct.finishLast()
	}
	if err := ct.begin(ct.link, ct.name.Time); err != nil {
		return err
	}
	return ct.finishBlock(true)
}

// finishLast finishes the open block as the last of the sources. With
// none open (the last was cut at a size or interval boundary), the last
// one finished is marked if it has not shipped yet.
func (ct *cutter) finishLast() error {
	if ct.f == nil {
		return ct.spool.MarkFinal(ct.nextSeq - 1)
	}
	return ct.finishBlock(true)
}

func (ct *cutter) finishBlock(final bool) error {
	if ct.f == nil {
		return nil
	}
	if err := ct.pw.Flush(); err != nil {
		return fmt.Errorf("block %s: %w", ct.name, err)
	}
	if err := ct.cw.Close(); err != nil {
		return fmt.Errorf("block %s: %w", ct.name, err)
	}
	if err := ct.fw.Flush(); err != nil {
		return fmt.Errorf("block %s: %w", ct.name, err)
	}
	job := finishJob{f: ct.f, name: ct.name, pos: ct.pos, packets: ct.packets, bytes: ct.pw.Bytes, sum: hex.EncodeToString(ct.sum.Sum(nil)),
		dropped: ct.dropsNow() - ct.droppedCounted, final: final}
	ct.droppedCounted += job.dropped
	if fi, err := ct.f.Stat(); err == nil {
		job.size = fi.Size()
	}
	ct.pending.Add(job.size)
	ct.f, ct.pos = nil, map[string]SourcePos{}
	ct.nextSeq++
	ct.jobs <- job
	return ct.finishError()
}

func (ct *cutter) dropsNow() int64 {
	if ct.drops == nil {
		return 0
	}
	return ct.drops()
}

// abandon drops an unfinished block (on cancellation or error).
func (ct *cutter) abandon() {
	if ct.f != nil {
		ct.spool.Discard(ct.f, ct.name)
		ct.f = nil
	}
}

// GrowingSource reads a capture file that is still being written
// (`tcpdump -w FILE`), as tail -f does: at its end it waits for more.
// It never ends by itself; stop the agent to stop it. After a restart it
// is read again from the start, skipping the packets already cut.
// When the file has not grown for idle, the block being cut is finished
// and shipped, so a quiet writer's packets do not wait for the next ones.
func GrowingSource(path string, poll, idle time.Duration) (Source, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Source{}, err
	}
	if fi, err := os.Stat(abs); err != nil {
		return Source{}, err
	} else if fi.IsDir() {
		return Source{}, fmt.Errorf("%s is a directory; --follow takes a capture file (use --watch for a directory)", path)
	}
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	return Source{Name: abs, Rereadable: true, Open: func() (io.ReadCloser, error) {
		f, err := os.Open(abs)
		if err != nil {
			return nil, err
		}
		return &growingFile{f: f, path: abs, poll: poll, idle: idle, closed: make(chan struct{})}, nil
	}}, nil
}

// ErrReplaced says a file being followed was truncated or replaced by a
// new one under its name, as when its writer restarts (`tcpdump -w FILE`
// truncates FILE): the new file is read from its start.
var ErrReplaced = errors.New("capture file was truncated or replaced under its name")

// growingFile reads a file that grows: at its end it waits instead of
// returning io.EOF, until closed.
type growingFile struct {
	f      *os.File
	path   string
	off    int64  // bytes read
	head   string // HeadOf the file so far
	waited bool   // the last read found the end
	poll   time.Duration
	closed chan struct{}
	once   sync.Once
	// onIdle runs, on the reading goroutine, once the file has not grown
	// for idle.
	idle   time.Duration
	onIdle func()
}

// OnIdle sets what to do when the file stops growing for a while.
func (g *growingFile) OnIdle(fn func()) { g.onIdle = fn }

func (g *growingFile) Read(p []byte) (int, error) {
	var since time.Time
	for {
		// After a pause, what comes next may be a new file's: a writer
		// that restarted truncated the file or put another in its place.
		if g.waited && g.replaced() {
			return 0, ErrReplaced
		}
		n, err := g.f.Read(p)
		g.off += int64(n)
		if n > 0 || err != io.EOF {
			g.waited = false
			return n, err
		}
		g.waited = true
		if since.IsZero() {
			since = time.Now()
		} else if g.onIdle != nil && g.idle > 0 && time.Since(since) >= g.idle {
			g.onIdle()
			since = time.Now().Add(24 * time.Hour) // once per pause
		}
		select {
		case <-g.closed:
			return 0, os.ErrClosed
		case <-time.After(g.poll):
		}
	}
}

// Stamp is what is known of the file's head so far.
func (g *growingFile) Stamp() Stamp { return Stamp{Head: g.head} }

// replaced reports whether the name now holds another file, or this one
// was cut shorter than what was read of it, or its first bytes changed
// (rewritten in place and already longer again).
func (g *growingFile) replaced() bool {
	now, err := os.Stat(g.path)
	if err != nil {
		return false // gone for now (being rotated?): keep waiting
	}
	this, err := g.f.Stat()
	if err != nil {
		return false
	}
	if !os.SameFile(now, this) || this.Size() < g.off {
		return true
	}
	if g.head != "" && HeadOf(g.path, g.head) != g.head {
		return true
	}
	if n := headLength(g.head); n < headLen && g.off > int64(n) {
		g.head = HeadOf(g.path) // a longer head, of the same file
	}
	return false
}

func (g *growingFile) Close() error {
	g.once.Do(func() { close(g.closed) })
	return g.f.Close()
}

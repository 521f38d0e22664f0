package dns

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/dns/dnspair"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/filter"
	"github.com/plumb-dev/plumb/stage"
)

// Register adds builtin:dns and builtin:dnspairs to reg.
func Register(reg *stage.Registry) {
	reg.Add(stage.Factory{
		Name: "dns",
		Doc: "Finds every DNS message of a capture block (UDP, IP fragments, TCP reassembled) and writes one row each " +
			"as an Arrow IPC file (ZSTD). ?ports=53,853 chooses the ports (default 53). A site's blocks are read in " +
			"parallel; what straddles their cuts is joined in sequence, bounded by ?budget=16MiB (TCP streams, fragments " +
			"and a block's edge each; the oldest held data goes first). ?sections=all (or question, or answer,authority,additional) " +
			"chooses the record sections read: the others are null, and a team that reads header and question pays for no more. " +
			"?names=all (or none, or qname_raw,labels,tld,registered_domain) chooses the columns derived from qname, the others null. " +
			"?zstd=fast (or balanced, or small: files 8-31% smaller for 18-93% more CPU, bench/dns) chooses the compression.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args, "ports", "budget", "sections", "names", "zstd"); err != nil {
				return nil, err
			}
			ports, err := ParsePorts(args.Get("ports"))
			if err != nil {
				return nil, err
			}
			sections, err := dnsmsg.ParseSections(args.Get("sections"))
			if err != nil {
				return nil, err
			}
			names, err := dnsrec.ParseNames(args.Get("names"))
			if err != nil {
				return nil, err
			}
			level, err := dnsrec.ParseZstd(args.Get("zstd"))
			if err != nil {
				return nil, err
			}
			d := &Messages{Ports: ports, Skip: dnsmsg.AllSections &^ sections, SkipNames: dnsrec.AllNames &^ names, Zstd: level}
			if v := args.Get("budget"); v != "" {
				if d.Budget, err = parseBytes(v); err != nil || d.Budget < 64<<10 || d.Budget > 1<<30 {
					return nil, fmt.Errorf("budget=%q: want a size between 64KiB and 1GiB, e.g. 16MiB", v)
				}
			}
			return d, nil
		},
	})
	reg.Add(stage.Factory{
		Name: "dnspairs",
		Doc: "Pairs each DNS response of a capture with its query (transport, both addresses and ports, id and question) " +
			"and writes one row per query, answered or not, and one per orphan response, as an Arrow IPC file (ZSTD): " +
			"query and response times, latency, sizes, rcode, flags and answers. A query waits ?window=5s of packet time " +
			"for its response, across the blocks of its site; at most ?max_pending=262144 wait at once (the oldest is " +
			"then given up and marked evicted). ?ports=, ?budget= and ?zstd= as builtin:dns: a site's blocks are paired in parallel and " +
			"what straddles their cuts is joined in sequence.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args, "ports", "window", "max_pending", "budget", "zstd"); err != nil {
				return nil, err
			}
			ports, err := ParsePorts(args.Get("ports"))
			if err != nil {
				return nil, err
			}
			level, err := dnsrec.ParseZstd(args.Get("zstd"))
			if err != nil {
				return nil, err
			}
			p := &Pairs{Ports: ports, Window: dnspair.DefaultWindow, MaxPending: dnspair.DefaultMaxPending, Zstd: level}
			if v := args.Get("budget"); v != "" {
				if p.Budget, err = parseBytes(v); err != nil || p.Budget < 64<<10 || p.Budget > 1<<30 {
					return nil, fmt.Errorf("budget=%q: want a size between 64KiB and 1GiB, e.g. 16MiB", v)
				}
			}
			if v := args.Get("window"); v != "" {
				if p.Window, err = time.ParseDuration(v); err != nil || p.Window <= 0 || p.Window > time.Hour {
					return nil, fmt.Errorf("window=%q: want a duration between 1ns and 1h, e.g. 5s", v)
				}
			}
			if v := args.Get("max_pending"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > 1<<22 {
					return nil, fmt.Errorf("max_pending=%q: want a count between 1 and %d", v, 1<<22)
				}
				p.MaxPending = n
			}
			return p, nil
		},
	})
}

// parseBytes reads a size in bytes, with an optional KiB, MiB or GiB.
func parseBytes(v string) (int, error) {
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = n, u.mult
			break
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size", v)
	}
	return n * mult, nil
}

// parsePorts reads ?ports=53,853; none is dnsrec.DefaultPorts.
// ParsePorts reads a list of port numbers separated by commas ("53,853"),
// as ?ports= and plumb dns --ports take it; "" is none (the default).
func ParsePorts(v string) ([]uint16, error) {
	if v == "" {
		return nil, nil
	}
	var ports []uint16
	for _, p := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("ports=%q: want port numbers separated by commas", v)
		}
		ports = append(ports, uint16(n))
	}
	return ports, nil
}

// Messages extracts DNS messages into Arrow rows.
type Messages struct {
	Ports []uint16 // dnsrec.DefaultPorts when empty
	// Budget bounds the bytes a block's edge and a site's carried state
	// may each hold (dnsrec.DefaultEdgeBudget when zero).
	Budget int
	// Skip are the record sections not read: null in every row.
	Skip dnsmsg.Sections
	// SkipNames are the columns derived from qname not made: null in
	// every row.
	SkipNames dnsrec.Names
	// Zstd is the ZSTD level of the records (dnsrec.RecordsZstdLevel
	// when zero).
	Zstd int
	// Filter, when set, is a capture filter (tcpdump's syntax, as plumb
	// agent --filter) choosing the frames read: plumb dns --filter.
	Filter string
}

// Run implements stage.Builtin: Start and Finish at once.
func (d *Messages) Run(ctx context.Context, sin stage.Input, in io.Reader, out io.Writer) error {
	return stage.RunEdged(ctx, d, sin, in, out)
}

// Start implements stage.Edged: it reads the block on its own, writes
// the rows the block completes alone and keeps its edge for Finish.
func (d *Messages) Start(ctx context.Context, sin stage.Input, in io.Reader, out io.Writer) (stage.Part, error) {
	name := sin.Block
	w, err := dnsrec.NewWriterLevel(out, name.Instance, name.Seq, d.Zstd)
	if err != nil {
		return nil, err
	}
	w.SetSampleRate(name.SampleRate())
	sections := dnsmsg.AllSections &^ d.Skip
	w.SetSections(sections)
	w.SetNames(dnsrec.AllNames &^ d.SkipNames)
	p := &dnsPart{w: w, ports: d.Ports, budget: d.Budget, sections: sections}
	var werr error
	p.emit = func(rec *dnsrec.Record) {
		if werr == nil {
			werr = w.Add(rec)
		}
	}
	r, match, closer, err := openCapture(in, d.Filter)
	if err != nil {
		p.Discard()
		return nil, err
	}
	defer closer.Close()
	x := dnsrec.NewExtractor(r.LinkType, d.Ports, p.emit)
	x.ReadSections(sections)
	x.SplitEdges(d.Budget)
	if p.truncated, err = readPackets(ctx, r, x, match, func() error { return werr }); err != nil {
		p.Discard()
		return nil, err
	}
	p.edge, p.stats = x.Edge(), x.Stats()
	if err := errors.Join(werr, w.Suspend()); err != nil {
		p.Discard()
		return nil, err
	}
	p.werr = &werr
	return p, nil
}

// openCapture reads a block's capture, with the capture filter expr
// (none when empty) compiled for its link type. A block that is no
// capture is malformed.
func openCapture(in io.Reader, expr string) (*pcap.Reader, *filter.Filter, io.Closer, error) {
	r, closer, err := pcap.NewReader(in)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %v", stage.ErrMalformed, err)
	}
	if expr == "" {
		return r, nil, closer, nil
	}
	f, err := filter.Compile(expr, r.LinkType)
	if err != nil {
		closer.Close()
		return nil, nil, nil, fmt.Errorf("filter %q: %w", expr, err)
	}
	return r, f, closer, nil
}

// readPackets feeds a capture's packets, those match takes when there
// is one, to an extractor. A truncated last record is dropped, as
// everywhere, and returned as truncated.
func readPackets(ctx context.Context, r *pcap.Reader, x *dnsrec.Extractor, match *filter.Filter, failed func() error) (truncated error, err error) {
	for n := 0; ; n++ {
		if n%8192 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		data, ci, err := r.Next()
		if err == io.EOF {
			return nil, nil
		}
		if errors.Is(err, pcap.ErrTruncated) {
			return err, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", stage.ErrMalformed, err)
		}
		if match != nil && !match.MatchLen(data, ci.Length) {
			continue
		}
		x.Packet(ci.Timestamp, data)
		if err := failed(); err != nil {
			return nil, err
		}
	}
}

// Read is what a run of builtin:dns or builtin:dnspairs read, for a
// command's summary (plumb dns): its part says once it has finished.
type Read struct {
	// Messages counts the frames and DNS messages of the block and of
	// its edges' join.
	Messages dnsrec.Stats
	// Pairs is how builtin:dnspairs paired them; nil for builtin:dns.
	Pairs *dnspair.Stats
	// Truncated is the error of a truncated last record, which was
	// dropped; nil when the capture ended whole.
	Truncated error
}

// joinedStats adds up what a block read on its own and what its edges'
// join read: frames once (the join reads the edge's frames again), the
// messages of both.
func joinedStats(block, join dnsrec.Stats) dnsrec.Stats {
	s := block
	s.Messages += join.Messages
	s.UDP += join.UDP
	s.TCP += join.TCP
	s.Malformed += join.Malformed
	s.Reassembled += join.Reassembled
	s.Partial += join.Partial
	s.EdgeDropped += join.EdgeDropped
	s.TCPSkipped += join.TCPSkipped
	s.TCPEvicted += join.TCPEvicted
	s.TCPLost += join.TCPLost
	s.DefragDropped += join.DefragDropped
	return s
}

// dnsPart is a block of builtin:dns read on its own: its rows so far in
// a suspended writer, and its edge.
type dnsPart struct {
	w        *dnsrec.Writer
	emit     func(*dnsrec.Record)
	werr     *error
	edge     *dnsrec.Edge
	stats    dnsrec.Stats // the block's own reading
	joined   dnsrec.Stats // and its edges', once finished
	ports    []uint16
	budget   int
	sections dnsmsg.Sections
	// truncated is why the capture's last record was dropped, if it was.
	truncated error
}

// Read says what the finished run read.
func (p *dnsPart) Read() Read { return Read{Messages: p.joined, Truncated: p.truncated} }

// Finish implements stage.Part: the joiner goes on from the carried
// state, takes the block's edge, and its rows end the block's file.
func (p *dnsPart) Finish(ctx context.Context, sin stage.Input) error {
	carry := sin.Carry
	if err := ctx.Err(); err != nil {
		return err
	}
	p.w.Resume()
	j := dnsrec.NewJoiner(p.ports, p.emit)
	j.SetBudget(p.budget)
	j.ReadSections(p.sections)
	if carry != nil {
		if err := j.LoadState(carry.In); err != nil {
			return fmt.Errorf("DNS stage state: %w", err) // the server's own state: not the block's fault
		}
		if carry.Gap {
			j.Gap() // blocks went missing: what was held cannot be completed
		}
	}
	j.Join(p.edge)
	if carry == nil || carry.Final {
		j.Flush()
	}
	countDrops(sin.Drops, p.stats, j.Stats())
	p.joined = joinedStats(p.stats, j.Stats())
	if carry != nil && !carry.Final {
		out, err := j.SaveState()
		if err != nil {
			return err
		}
		carry.Out = out
	}
	if err := *p.werr; err != nil {
		return err
	}
	return p.w.Close()
}

// Discard implements stage.Part.
func (p *dnsPart) Discard() { p.w.Close() }

// countDrops counts what reading a block and joining its edges let go
// of to stay within the budget, or gave up on.
func countDrops(d *stage.Drops, block, join dnsrec.Stats) {
	for _, s := range []dnsrec.Stats{block, join} {
		d.Add(stage.DropEdgeBudget, s.EdgeDropped)
		d.Add(stage.DropTCPEvicted, int64(s.TCPEvicted))
		d.Add(stage.DropTCPHoles, int64(s.TCPSkipped))
		d.Add(stage.DropDefrag, int64(s.DefragDropped))
	}
}

var _ stage.Edged = (*Messages)(nil)

// Sequential marks the stage as run per site in sequence order.
func (d *Messages) Sequential() {}

// Pairs pairs queries and responses into transactions.
type Pairs struct {
	Ports      []uint16
	Window     time.Duration
	MaxPending int
	// Budget bounds the bytes a block leaves to the join and a site
	// carries, as Messages.Budget (dnsrec.DefaultEdgeBudget when zero).
	Budget int
	// Zstd is the ZSTD level of the transactions, as Messages.Zstd.
	Zstd int
	// Filter chooses the frames read, as Messages.Filter.
	Filter string
}

func (d *Pairs) budget() int {
	if d.Budget > 0 {
		return d.Budget
	}
	return dnsrec.DefaultEdgeBudget
}

func (d *Pairs) pairer(emit func(*dnspair.Txn)) *dnspair.Pairer {
	p := dnspair.New(emit)
	p.Window, p.MaxPending = d.Window, d.MaxPending
	return p
}

// Run implements stage.Builtin: Start and Finish at once.
func (d *Pairs) Run(ctx context.Context, sin stage.Input, in io.Reader, out io.Writer) error {
	return stage.RunEdged(ctx, d, sin, in, out)
}

// Start implements stage.Edged: it reads and pairs the block on its
// own, writes what the block decides alone and keeps the rest for
// Finish (see dnspair.Edge).
func (d *Pairs) Start(ctx context.Context, sin stage.Input, in io.Reader, out io.Writer) (stage.Part, error) {
	name := sin.Block
	w, err := dnspair.NewWriterLevel(out, name.Instance, name.Seq, d.Zstd)
	if err != nil {
		return nil, err
	}
	w.SetSampleRate(name.SampleRate())
	p := &pairsPart{d: d, w: w}
	p.emit = func(t *dnspair.Txn) {
		if p.werr == nil {
			p.werr = w.Add(t)
		}
	}
	r, match, closer, err := openCapture(in, d.Filter)
	if err != nil {
		p.Discard()
		return nil, err
	}
	defer closer.Close()
	pr := d.pairer(p.emit)
	pr.Split(d.budget())
	var x *dnsrec.Extractor
	x = dnsrec.NewExtractor(r.LinkType, d.Ports, func(rec *dnsrec.Record) { pr.AddAt(rec, int(x.Packets()-1)) })
	x.SplitEdges(d.budget())
	x.OnEdge(pr.Taint)
	if p.truncated, err = readPackets(ctx, r, x, match, func() error { return p.werr }); err != nil {
		p.Discard()
		return nil, err
	}
	p.edge, p.pairs, p.stats, p.paired = x.Edge(), pr.Edge(), x.Stats(), pr.Stats()
	if err := errors.Join(p.werr, w.Suspend()); err != nil {
		p.Discard()
		return nil, err
	}
	return p, nil
}

// pairsPart is a block of builtin:dnspairs paired on its own: its
// transactions so far in the writer, and its edges.
type pairsPart struct {
	d     *Pairs
	w     *dnspair.Writer
	emit  func(*dnspair.Txn)
	werr  error
	edge  *dnsrec.Edge
	pairs *dnspair.Edge
	stats dnsrec.Stats // the block's own reading
	// paired is how the block paired on its own, and once finished with
	// its edges' join; joined its messages with the join's.
	paired    dnspair.Stats
	joined    dnsrec.Stats
	truncated error
}

// Read says what the finished run read and how it paired.
func (p *pairsPart) Read() Read {
	paired := p.paired
	return Read{Messages: p.joined, Pairs: &paired, Truncated: p.truncated}
}

// carried is the state of builtin:dnspairs between blocks: the joiner's
// and the pairer's.
type carried struct {
	Extractor, Stage []byte
}

// Finish implements stage.Part: the joiner and the pairer go on from
// the carried state, take the block's edges in packet order, and their
// transactions end the block's file.
func (p *pairsPart) Finish(ctx context.Context, sin stage.Input) error {
	carry := sin.Carry
	if err := ctx.Err(); err != nil {
		return err
	}
	pr := p.d.pairer(p.emit)
	add := pr.Add
	j := dnsrec.NewJoiner(p.d.Ports, func(r *dnsrec.Record) { add(r) })
	j.SetBudget(p.d.budget())
	if carry != nil && len(carry.In) > 0 {
		var c carried
		if err := gob.NewDecoder(bytes.NewReader(carry.In)).Decode(&c); err != nil {
			return fmt.Errorf("DNS pairing state: %w", err) // the server's own state: not the block's fault
		}
		if err := j.LoadState(c.Extractor); err != nil {
			return err
		}
		if err := pr.LoadState(c.Stage); err != nil {
			return err
		}
	}
	if carry != nil && carry.Gap {
		// Blocks went missing: what was held cannot be completed, and
		// the responses of waiting queries, if any, were in them.
		j.Gap()
		pr.Flush()
	}
	jn := pr.Join(p.pairs)
	add = jn.Add
	j.Before = jn.Before
	j.Join(p.edge)
	jn.End()
	add = pr.Add
	if carry == nil || carry.Final {
		// Nothing follows: what is held comes out now, at its own times.
		j.Flush()
		pr.Flush()
	}
	countDrops(sin.Drops, p.stats, j.Stats())
	sin.Drops.Add(stage.DropPairingInexact, jn.Inexact)
	p.joined = joinedStats(p.stats, j.Stats())
	p.paired = addPairStats(p.paired, pr.Stats())
	if carry != nil && !carry.Final {
		var c carried
		var err error
		if c.Extractor, err = j.SaveState(); err != nil {
			return err
		}
		if c.Stage, err = pr.SaveState(); err != nil {
			return err
		}
		var b bytes.Buffer
		if err := gob.NewEncoder(&b).Encode(c); err != nil {
			return err
		}
		carry.Out = b.Bytes()
	}
	if p.werr != nil {
		return p.werr
	}
	return p.w.Close()
}

// Discard implements stage.Part.
func (p *pairsPart) Discard() { p.w.Close() }

// Sequential marks the stage as run per site in sequence order.
func (d *Pairs) Sequential() {}

var (
	_ stage.Sequential = (*Pairs)(nil)
	_ stage.Edged      = (*Pairs)(nil)
)

// addPairStats adds up how a block paired on its own and how its edges'
// join did.
func addPairStats(a, b dnspair.Stats) dnspair.Stats {
	a.Answered += b.Answered
	a.Unanswered += b.Unanswered
	a.Orphans += b.Orphans
	a.Evicted += b.Evicted
	a.Retransmissions += b.Retransmissions
	a.Unpairable += b.Unpairable
	return a
}

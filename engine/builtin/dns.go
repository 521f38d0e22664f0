package builtin

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

	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/dnspair"
	"github.com/plumb-dev/plumb/pcap/dnsrec"
)

func registerDNS(reg *engine.Registry) {
	reg.Add(engine.Factory{
		Name: "dns",
		Doc: "Finds every DNS message of a capture block (UDP, IP fragments, TCP reassembled) and writes one row each " +
			"as an Arrow IPC file (LZ4). ?ports=53,853 chooses the ports (default 53).",
		New: func(args url.Values) (engine.Builtin, error) {
			if err := engine.StrictArgs(args, "ports"); err != nil {
				return nil, err
			}
			ports, err := parsePorts(args.Get("ports"))
			return &DNS{Ports: ports}, err
		},
	})
	reg.Add(engine.Factory{
		Name: "dnspairs",
		Doc: "Pairs each DNS response of a capture with its query (transport, both addresses and ports, id and question) " +
			"and writes one row per query, answered or not, and one per orphan response, as an Arrow IPC file (LZ4): " +
			"query and response times, latency, sizes, rcode, flags and answers. A query waits ?window=5s of packet time " +
			"for its response, across the blocks of its site; at most ?max_pending=262144 wait at once (the oldest is " +
			"then given up and marked evicted). ?ports= as builtin:dns.",
		New: func(args url.Values) (engine.Builtin, error) {
			if err := engine.StrictArgs(args, "ports", "window", "max_pending"); err != nil {
				return nil, err
			}
			ports, err := parsePorts(args.Get("ports"))
			if err != nil {
				return nil, err
			}
			p := &DNSPairs{Ports: ports, Window: dnspair.DefaultWindow, MaxPending: dnspair.DefaultMaxPending}
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

// parsePorts reads ?ports=53,853; none is dnsrec.DefaultPorts.
func parsePorts(v string) ([]uint16, error) {
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

// DNS extracts DNS messages into Arrow rows.
type DNS struct {
	Ports []uint16 // dnsrec.DefaultPorts when empty
}

// Run implements engine.Builtin.
func (d *DNS) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	name, _ := engine.BlockOf(ctx)
	w, err := dnsrec.NewWriter(out, name.Instance, name.Seq)
	if err != nil {
		return err
	}
	defer w.Close() // ends its writer on early returns; the last Close below reports
	var werr error
	x := &extraction{ports: d.Ports, emit: func(rec *dnsrec.Record) {
		if werr == nil {
			werr = w.Add(rec)
		}
	}, failed: func() error { return werr }}
	if err := x.run(ctx, in); err != nil {
		return err
	}
	return w.Close()
}

// extraction is the packet loop of the DNS stages: it reads a capture
// block and emits its records. In a pipeline the blocks of a site run in
// sequence, each going on from what the previous one held (its carry): a
// message or datagram the agent's cut split is found once, in the block
// that completes it, and a stage built on the records (pairing) carries
// its own state beside the extractor's.
type extraction struct {
	ports  []uint16
	emit   func(*dnsrec.Record)
	failed func() error // the first error of emit's writer
	// load and save carry a stage's own state after the extractor's.
	load  func(state []byte) error
	save  func() ([]byte, error)
	flush func() // nothing more can come: the capture ended, or blocks are missing
}

// carried is the state of the DNS stages between blocks.
type carried struct {
	Extractor, Stage []byte
}

func (e *extraction) run(ctx context.Context, in io.Reader) error {
	r, closer, err := pcap.NewReader(in)
	if err != nil {
		return fmt.Errorf("%w: %v", engine.ErrMalformed, err)
	}
	defer closer.Close()
	x := dnsrec.NewExtractor(r.LinkType, e.ports, e.emit)
	carry := engine.CarryOf(ctx)
	if carry != nil {
		var c carried
		if e.load == nil {
			c.Extractor = carry.In // builtin:dns's state is the extractor's alone
		} else if len(carry.In) > 0 {
			if err := gob.NewDecoder(bytes.NewReader(carry.In)).Decode(&c); err != nil {
				return fmt.Errorf("DNS stage state: %w", err) // the server's own state: not the block's fault
			}
		}
		if err := x.LoadState(c.Extractor); err != nil {
			return err
		}
		if e.load != nil {
			if err := e.load(c.Stage); err != nil {
				return err
			}
		}
		if carry.Gap {
			// Blocks went missing: what was held cannot be completed, and
			// the responses of waiting queries, if any, were in them.
			x.Flush()
			if e.flush != nil {
				e.flush()
			}
		}
	}
	for n := 0; ; n++ {
		if n%8192 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		data, ci, err := r.Next()
		if err == io.EOF || errors.Is(err, pcap.ErrTruncated) {
			break // a truncated last record is dropped, as everywhere
		}
		if err != nil {
			return fmt.Errorf("%w: %v", engine.ErrMalformed, err)
		}
		x.Packet(ci.Timestamp, data)
		if err := e.failed(); err != nil {
			return err
		}
	}
	if carry == nil {
		x.Flush()
		if e.flush != nil {
			e.flush()
		}
		return e.failed()
	}
	xs, err := x.SaveState()
	if err != nil {
		return err
	}
	if e.save == nil {
		carry.Out = xs
		return e.failed()
	}
	c := carried{Extractor: xs}
	if c.Stage, err = e.save(); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(c); err != nil {
		return err
	}
	carry.Out = b.Bytes()
	return e.failed()
}

// Sequential marks the stage as run per site in sequence order.
func (d *DNS) Sequential() {}

var _ engine.Sequential = (*DNS)(nil)

// DNSPairs pairs queries and responses into transactions.
type DNSPairs struct {
	Ports      []uint16
	Window     time.Duration
	MaxPending int
}

// Run implements engine.Builtin.
func (d *DNSPairs) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	name, _ := engine.BlockOf(ctx)
	w, err := dnspair.NewWriter(out, name.Instance, name.Seq)
	if err != nil {
		return err
	}
	defer w.Close()
	var werr error
	p := dnspair.New(func(t *dnspair.Txn) {
		if werr == nil {
			werr = w.Add(t)
		}
	})
	p.Window, p.MaxPending = d.Window, d.MaxPending
	x := &extraction{ports: d.Ports, emit: p.Add, failed: func() error { return werr },
		load:  p.LoadState,
		save:  p.SaveState,
		flush: p.Flush,
	}
	if err := x.run(ctx, in); err != nil {
		return err
	}
	return w.Close()
}

// Sequential marks the stage as run per site in sequence order.
func (d *DNSPairs) Sequential() {}

var _ engine.Sequential = (*DNSPairs)(nil)

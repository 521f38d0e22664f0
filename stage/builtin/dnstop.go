package builtin

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/plumb-dev/plumb/dns/dnstop"
	"github.com/plumb-dev/plumb/stage"
)

func registerDNSTop(reg *stage.Registry) {
	reg.Add(stage.Factory{
		Name: "dnstop",
		Doc: "Ranks DNS records (builtin:dns) or transactions (builtin:dnspairs), enriched or not, by requester " +
			"(client), its /24 or /48 (client_prefix), asn and country (from builtin:enrich), qname, registered_domain " +
			"and rcode, in ?counters=C counters per dimension (Space-Saving: a count is over by at most the rows " +
			"counted over C), and writes the top ?n=N (default 10, at most 100) of each as rows " +
			"(instance, from, to, dimension, rank, value, count, error, total, bound). As a block stage it ranks one " +
			"block and feeds the server's plumb_dns_top_* metrics for the ?window= (default 1h) of event time " +
			"holding the block; as a window stage it ranks the window's blocks, across sites for instance \"all\". " +
			"?dimensions=client,qname ranks only those.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args, "n", "counters", "dimensions", "window"); err != nil {
				return nil, err
			}
			t := &DNSTop{N: 10, Window: time.Hour}
			if v := args.Get("n"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > dnstop.MaxN {
					return nil, fmt.Errorf("n=%q: want a whole number from 1 to %d", v, dnstop.MaxN)
				}
				t.N = n
			}
			t.Counters = 10 * t.N
			if v := args.Get("counters"); v != "" {
				c, err := strconv.Atoi(v)
				if err != nil || c < t.N || c > 10*dnstop.MaxN {
					return nil, fmt.Errorf("counters=%q: want a whole number from n (%d) to %d", v, t.N, 10*dnstop.MaxN)
				}
				t.Counters = c
			}
			dims, err := dnstop.ParseDimensions(args.Get("dimensions"))
			if err != nil {
				return nil, err
			}
			t.Dimensions = dims
			if v := args.Get("window"); v != "" {
				d, err := time.ParseDuration(v)
				if err != nil || d < time.Minute || d > 24*time.Hour || d%time.Second != 0 {
					return nil, fmt.Errorf("window=%q: want whole seconds from 1m to 24h, e.g. 5m or 1h", v)
				}
				t.Window = d
			}
			return t, nil
		},
	})
}

// DNSTop ranks DNS rows' requesters, names and rcodes (dnstop.Counter).
type DNSTop struct {
	N, Counters int
	Dimensions  []string
	Window      time.Duration // of the metrics
}

// Run implements stage.Builtin.
func (t *DNSTop) Run(ctx context.Context, sin stage.Input, in io.Reader, out io.Writer) error {
	win, isWindow, in, err := readWindow(in)
	if err != nil {
		return err
	}
	c := dnstop.NewCounter(t.Dimensions, t.Counters)
	if isWindow {
		return t.runWindow(ctx, c, win, out)
	}
	if err := t.count(ctx, c, in); err != nil {
		return err
	}
	name := sin.Block
	if err := dnstop.Write(out, c, name.Instance, t.N); err != nil {
		return err
	}
	if name.Instance != "" && sin.Tally != nil {
		at := name.Time
		if at.IsZero() {
			at, _ = c.Span()
		}
		dnstop.Tally(c, name.Instance, dnstop.WindowOf(at, t.Window), t.N, sin.Tally.Add)
	}
	return nil
}

// runWindow ranks a window's blocks as one stream.
func (t *DNSTop) runWindow(ctx context.Context, c *dnstop.Counter, win stage.WindowInput, out io.Writer) error {
	for _, b := range win.Blocks {
		f, err := os.Open(b.Path)
		if err != nil {
			return fmt.Errorf("window %s: block %s: %w", win.Window.ID, b.Name, err)
		}
		err = t.count(ctx, c, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("block %s: %w", b.Name, err)
		}
	}
	return dnstop.Write(out, c, win.Window.Instance, t.N)
}

func (t *DNSTop) count(ctx context.Context, c *dnstop.Counter, in io.Reader) error {
	return eachBatch(ctx, in, func(*arrow.Schema) error { return nil }, func(i int, rec arrow.RecordBatch) error {
		if err := c.Add(rec); err != nil {
			return fmt.Errorf("%w: batch %d: %v", stage.ErrMalformed, i, err)
		}
		return nil
	})
}

// Describe implements stage.Describer.
func (t *DNSTop) Describe() string {
	return fmt.Sprintf("top %d of %d counters per dimension, metrics per %s", t.N, t.Counters, t.Window)
}

package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/plumb-dev/plumb/dns/newdomains"
	"github.com/plumb-dev/plumb/stage"
)

func registerNewDomains(reg *stage.Registry) {
	reg.Add(stage.Factory{
		Name: "newdomains",
		Doc: "Reports each domain a site asks for that it has not asked for within ?horizon= (default 30d): a row " +
			"(instance, seq, time, domain, qname, client, since) at its first query in DNS records (builtin:dns) or " +
			"transactions (builtin:dnspairs). Runs over a site's blocks in sequence, its memory (a rotating Bloom " +
			"filter of ?generations=6 steps, each holding ?capacity=250000 domains, taking a domain never asked as known " +
			"with at most ?fp=0.001) carried from block to block and committed with each block's rows, so it survives " +
			"restarts and no block counts twice. ?names=qname tracks whole names instead of registered domains. As a window " +
			"stage it runs window after window, its memory carried the same way: with window.per_instance: all, a domain is " +
			"new once across every site, at the site that asked first.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args, "horizon", "generations", "capacity", "fp", "names"); err != nil {
				return nil, err
			}
			c := newdomains.Config{Horizon: 30 * 24 * time.Hour, Generations: 6, Capacity: 250_000, FalsePositive: 0.001}
			if v := args.Get("horizon"); v != "" {
				d, err := parseDays(v)
				if err != nil {
					return nil, fmt.Errorf("horizon=%q: %v", v, err)
				}
				c.Horizon = d
			}
			for _, a := range []struct {
				name string
				to   *int
			}{{"generations", &c.Generations}, {"capacity", &c.Capacity}} {
				if v := args.Get(a.name); v != "" {
					n, err := strconv.Atoi(v)
					if err != nil {
						return nil, fmt.Errorf("%s=%q: want a whole number", a.name, v)
					}
					*a.to = n
				}
			}
			if v := args.Get("fp"); v != "" {
				p, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, fmt.Errorf("fp=%q: want a rate such as 0.001", v)
				}
				c.FalsePositive = p
			}
			if err := c.Validate(stage.MaxCarry); err != nil {
				return nil, err
			}
			nd := &NewDomains{Config: c, Column: "registered_domain"}
			switch v := args.Get("names"); v {
			case "", "registered_domain":
			case "qname":
				nd.Column = "qname"
			default:
				return nil, fmt.Errorf("names=%q: want registered_domain or qname", v)
			}
			return nd, nil
		},
	})
}

// parseDays reads a duration that may also be given in days ("30d").
func parseDays(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return 0, errors.New("want a duration such as 30d or 12h")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

// NewDomains reports the domains new to a site (newdomains.Seen).
type NewDomains struct {
	Config newdomains.Config
	Column string // the names tracked: registered_domain or qname
}

// Sequential implements stage.Sequential: a site's blocks run in order,
// each from the memory the previous one left.
func (*NewDomains) Sequential() {}

// Describe implements stage.Describer.
func (n *NewDomains) Describe() string {
	return fmt.Sprintf("%s new within %s, %d generations of %d at fp %g (state %d bytes)", n.Column, n.Config.Horizon,
		n.Config.Generations, n.Config.Capacity, n.Config.FalsePositive, n.Config.StateBytes())
}

// Remembers implements stage.Remembering: without its memory it
// writes nothing, so a job may not run it where it gets none.
func (*NewDomains) Remembers() {}

// Run implements stage.Builtin. A run without a carry (a block that
// came after its place in the site's sequence) has no memory to check
// against: it writes no rows and counts its queries as late_unchecked.
// As a window stage's program it reads the window's blocks in the order
// of their first packet, so that across sites (instance "all") a domain
// is new once, at the site that asked first.
func (n *NewDomains) Run(ctx context.Context, sin stage.Input, in io.Reader, out io.Writer) error {
	var seen *newdomains.Seen
	if sin.Carry != nil {
		seen = newdomains.New(n.Config)
		if sin.Carry.In != nil {
			s, err := newdomains.Load(n.Config, sin.Carry.In)
			if err == nil {
				seen = s
			} else {
				// The state of other arguments (the job changed) or one
				// that does not read: start again, and say so.
				sin.Drops.Add(stage.DropStateReset, 1)
			}
		}
	}
	win, isWindow, in, err := readWindow(in)
	if err != nil {
		return err
	}
	rows := newNewRows()
	defer rows.b.Release()
	var unchecked int64
	if isWindow {
		bs := slices.Clone(win.Blocks)
		slices.SortStableFunc(bs, func(a, b stage.WindowBlock) int { return a.Time.Compare(b.Time) })
		for _, b := range bs {
			f, err := os.Open(b.Path)
			if err != nil {
				return fmt.Errorf("window %s: block %s: %w", win.Window.ID, b.Name, err)
			}
			u, err := n.observe(ctx, seen, rows, b.Instance, b.Seq, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("block %s: %w", b.Name, err)
			}
			unchecked += u
		}
	} else if unchecked, err = n.observe(ctx, seen, rows, sin.Block.Instance, sin.Block.Seq, in); err != nil {
		return err
	}
	sin.Drops.Add(stage.DropLateUnchecked, unchecked)
	rec := rows.b.NewRecordBatch()
	defer rec.Release()
	w, err := ipc.NewFileWriter(out, ipc.WithSchema(newdomains.Schema), ipc.WithZstd())
	if err != nil {
		return err
	}
	if err := w.Write(rec); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if sin.Carry != nil {
		state, err := seen.MarshalBinary()
		if err != nil {
			return err
		}
		sin.Carry.Out = state
	}
	return nil
}

// newRows builds newdomains.Schema's rows.
type newRows struct {
	b                    *array.RecordBuilder
	inst, dom, qname, cl *array.StringBuilder
	seq                  *array.Uint64Builder
	time, since          *array.TimestampBuilder
}

func newNewRows() *newRows {
	b := array.NewRecordBuilder(memory.DefaultAllocator, newdomains.Schema)
	return &newRows{b: b, inst: b.Field(0).(*array.StringBuilder), seq: b.Field(1).(*array.Uint64Builder),
		time: b.Field(2).(*array.TimestampBuilder), dom: b.Field(3).(*array.StringBuilder), qname: b.Field(4).(*array.StringBuilder),
		cl: b.Field(5).(*array.StringBuilder), since: b.Field(6).(*array.TimestampBuilder)}
}

// observe checks one block's queries against seen (nil: none to check
// against, each counted as unchecked) and adds a row per new name.
func (n *NewDomains) observe(ctx context.Context, seen *newdomains.Seen, rows *newRows, instance string, seq uint64, in io.Reader) (unchecked int64, err error) {
	err = eachBatch(ctx, in, func(*arrow.Schema) error { return nil }, func(i int, rec arrow.RecordBatch) error {
		q, err := readQueries(rec, n.Column)
		if err != nil {
			return fmt.Errorf("%w: batch %d: %v", stage.ErrMalformed, i, err)
		}
		for r := range int(rec.NumRows()) {
			if !q.query(r) || !q.names.IsValid(r) || q.names.Value(r) == "" || !q.time.IsValid(r) {
				continue
			}
			if seen == nil {
				unchecked++
				continue
			}
			name := strings.ToLower(q.names.Value(r))
			at := time.Unix(0, int64(q.time.Value(r))).UTC()
			if !seen.Observe(name, at) {
				continue
			}
			rows.inst.Append(instance)
			rows.seq.Append(seq)
			rows.time.Append(q.time.Value(r))
			rows.dom.Append(name)
			appendOrEmpty(rows.qname, q.qname, r)
			appendOrEmpty(rows.cl, q.client, r)
			rows.since.Append(arrow.Timestamp(seen.Since().UnixNano()))
		}
		return nil
	})
	return unchecked, err
}

func appendOrEmpty(b *array.StringBuilder, col *array.String, i int) {
	if col != nil && col.IsValid(i) {
		b.Append(col.Value(i))
		return
	}
	b.Append("")
}

// queries is what newdomains reads of a batch of DNS records or
// transactions.
type queries struct {
	query                func(i int) bool
	names, qname, client *array.String
	time                 *array.Timestamp
}

func readQueries(rec arrow.RecordBatch, column string) (queries, error) {
	sc := rec.Schema()
	col := func(name string) arrow.Array {
		if idx := sc.FieldIndices(name); len(idx) > 0 {
			return rec.Column(idx[0])
		}
		return nil
	}
	var q queries
	q.names, _ = col(column).(*array.String)
	q.qname, _ = col("qname").(*array.String)
	q.time, _ = col("time").(*array.Timestamp)
	if q.names == nil || q.time == nil {
		return q, errors.New("neither DNS records (builtin:dns) nor transactions (builtin:dnspairs): no " + column + " or time column")
	}
	if qr, ok := col("qr").(*array.Boolean); ok {
		q.query = func(i int) bool { return !qr.Value(i) }
		q.client, _ = col("src").(*array.String)
		return q, nil
	}
	orphan, _ := col("orphan_response").(*array.Boolean)
	if orphan == nil {
		return q, errors.New("neither DNS records (builtin:dns) nor transactions (builtin:dnspairs): no qr or orphan_response column")
	}
	q.query = func(i int) bool { return !orphan.Value(i) }
	q.client, _ = col("client").(*array.String)
	return q, nil
}

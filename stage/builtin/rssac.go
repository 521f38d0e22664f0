package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/rssac"
	"github.com/plumb-dev/plumb/stage"
)

func registerRSSAC(reg *stage.Registry) {
	reg.Add(stage.Factory{
		Name: "rssac",
		Doc: "Computes the RSSAC002 daily metrics (traffic-volume, traffic-sizes, rcode-volume, unique-sources) as YAML " +
			"from DNS records (dns.arrow) or a capture, for ?service=NAME and the UTC day of the block's event time. " +
			"As a block stage it counts one block; a window stage over a day's blocks gives the day.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args, "service"); err != nil {
				return nil, err
			}
			if args.Get("service") == "" {
				return nil, errors.New("service= is required, e.g. builtin:rssac?service=a.root-servers.net")
			}
			return &RSSAC{Service: args.Get("service")}, nil
		},
	})
}

// RSSAC computes RSSAC002 metrics.
type RSSAC struct{ Service string }

// Run implements stage.Builtin. As a window stage it reads the window's
// blocks and counts the window's span; as a block stage, its block's UTC
// day.
func (r *RSSAC) Run(ctx context.Context, sin stage.Input, in io.Reader, out io.Writer) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	d := rssac.NewDay()
	win, isWindow, err := stage.ParseWindowInput(data)
	if err != nil {
		return fmt.Errorf("%w: window input: %v", stage.ErrMalformed, err)
	}
	if isWindow {
		span := rssac.Window{From: win.Window.From, To: win.Window.To}
		if span.From.IsZero() {
			return errors.New("builtin:rssac counts time windows (window.size: 24h), not windows of a number of blocks")
		}
		for _, b := range win.Blocks {
			if err := ctx.Err(); err != nil {
				return err
			}
			blk, err := os.ReadFile(b.Path)
			if err != nil {
				return err
			}
			rate := uint32(1)
			if n, err := block.Parse(b.Name); err == nil {
				rate = n.SampleRate()
			}
			if err := d.AddSampledFile(blk, span, rate); err != nil {
				return fmt.Errorf("%w: block %s: %v", stage.ErrMalformed, b.Name, err)
			}
		}
		return d.Write(out, r.Service, span.From)
	}
	name := sin.Block
	if name.Time.IsZero() {
		return errors.New("builtin:rssac needs its block's event time to choose the day")
	}
	day := rssac.UTCDay(name.Time)
	if err := d.AddSampledFile(data, day, name.SampleRate()); err != nil {
		return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
	}
	return d.Write(out, r.Service, day.From)
}

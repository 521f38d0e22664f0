package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/rssac"
)

func registerRSSAC(reg *engine.Registry) {
	reg.Add(engine.Factory{
		Name: "rssac",
		Doc: "Computes the RSSAC002 daily metrics (traffic-volume, traffic-sizes, rcode-volume, unique-sources) as YAML " +
			"from DNS records (dns.arrow) or a capture, for ?service=NAME and the UTC day of the block's event time. " +
			"As a block stage it counts one block; a window stage over a day's blocks gives the day.",
		New: func(args url.Values) (engine.Builtin, error) {
			if err := engine.StrictArgs(args, "service"); err != nil {
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

// Run implements engine.Builtin.
func (r *RSSAC) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	name, ok := engine.BlockOf(ctx)
	if !ok {
		return errors.New("builtin:rssac needs its block's event time to choose the day")
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	day := rssac.UTCDay(name.Time)
	d := rssac.NewDay()
	if err := d.AddFile(data, day); err != nil {
		return fmt.Errorf("%w: %v", engine.ErrMalformed, err)
	}
	return d.Write(out, r.Service, day.From)
}

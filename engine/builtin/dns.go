package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/dnsrec"
)

func registerDNS(reg *engine.Registry) {
	reg.Add(engine.Factory{
		Name: "dns",
		Doc: "Finds every DNS message of a capture block (UDP, IP fragments, TCP reassembled) and writes one row each " +
			"as an Arrow IPC file (ZSTD). ?ports=53,853 chooses the ports (default 53).",
		New: func(args url.Values) (engine.Builtin, error) {
			if err := engine.StrictArgs(args, "ports"); err != nil {
				return nil, err
			}
			d := &DNS{}
			if v := args.Get("ports"); v != "" {
				for _, p := range strings.Split(v, ",") {
					n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
					if err != nil || n == 0 {
						return nil, fmt.Errorf("ports=%q: want port numbers separated by commas", v)
					}
					d.Ports = append(d.Ports, uint16(n))
				}
			}
			return d, nil
		},
	})
}

// DNS extracts DNS messages into Arrow rows.
type DNS struct {
	Ports []uint16 // dnsrec.DefaultPorts when empty
}

// Run implements engine.Builtin.
func (d *DNS) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	r, closer, err := pcap.NewReader(in)
	if err != nil {
		return fmt.Errorf("%w: %v", engine.ErrMalformed, err)
	}
	defer closer.Close()
	name, _ := engine.BlockOf(ctx)
	w, err := dnsrec.NewWriter(out, name.Instance, name.Seq)
	if err != nil {
		return err
	}
	defer w.Close() // ends its writer on early returns; the last Close below reports
	var werr error
	x := dnsrec.NewExtractor(r.LinkType, d.Ports, func(rec *dnsrec.Record) {
		if werr == nil {
			werr = w.Add(rec)
		}
	})
	// In a pipeline the blocks of a site run in sequence, each going on
	// from what the previous one held: a message or datagram the agent's
	// cut split is found once, in the block that completes it.
	carry := engine.CarryOf(ctx)
	if carry != nil {
		if err := x.LoadState(carry.In); err != nil {
			return err // the server's own state: not the block's fault
		}
		if carry.Gap {
			x.Flush() // blocks went missing: what was held cannot be completed
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
		if werr != nil {
			return werr
		}
	}
	if carry != nil {
		state, err := x.SaveState()
		if err != nil {
			return err
		}
		carry.Out = state
	} else {
		x.Flush()
	}
	if werr != nil {
		return werr
	}
	return w.Close()
}

// Sequential marks the stage as run per site in sequence order.
func (d *DNS) Sequential() {}

var _ engine.Sequential = (*DNS)(nil)

package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/stage"
)

// registerPcapInfo adds pcapinfo, a small summary stage.
func registerPcapInfo(reg *stage.Registry) {
	reg.Add(stage.Factory{
		Name: "pcapinfo",
		Doc:  "Summarises a capture block (any codec) as YAML: link type, packets, bytes, first and last packet time.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args); err != nil {
				return nil, err
			}
			return PcapInfo{}, nil
		},
	})
}

// PcapInfo summarises a capture.
type PcapInfo struct{}

// Run implements stage.Builtin.
func (PcapInfo) Run(ctx context.Context, _ stage.Input, in io.Reader, out io.Writer) error {
	r, closer, err := pcap.NewReader(in)
	if err != nil {
		return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
	}
	defer closer.Close()
	var (
		packets, bytes int64
		first, last    time.Time
		truncated      bool
	)
	for {
		if packets%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		data, ci, err := r.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, pcap.ErrTruncated) {
			truncated = true
			break
		}
		if err != nil {
			return malformed(err)
		}
		if packets == 0 {
			first = ci.Timestamp
		}
		last = ci.Timestamp
		packets++
		bytes += int64(len(data))
	}
	_, err = fmt.Fprintf(out, "link_type: %s\npackets: %d\ncaptured_bytes: %d\nfirst: %s\nlast: %s\ntruncated: %t\n",
		r.LinkType, packets, bytes, first.UTC().Format(time.RFC3339Nano), last.UTC().Format(time.RFC3339Nano), truncated)
	return err
}

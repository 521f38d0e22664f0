package pcap

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/gopacket/gopacket/layers"
)

// ErrOtherLinkType marks a capture that cannot join a Concat: its link
// type differs from the first capture's.
var ErrOtherLinkType = errors.New("link type differs from the stream's")

// Concat writes captures one after another as one capture: the first
// one's file header, then the packets of every one, as an ordered stream
// of blocks is read.
type Concat struct {
	out   io.Writer
	w     *Writer
	link  layers.LinkType
	nanos bool
}

// NewConcat writes the joined capture to out (buffer it: records are
// written one or a run at a time).
func NewConcat(out io.Writer) *Concat { return &Concat{out: out} }

// Append copies the packets of the capture r (any codec) and returns how
// many. A last record cut short ends the capture without an error, as a
// capture killed mid-write does; the packets before it are kept.
func (c *Concat) Append(r io.Reader) (int, error) {
	rd, closer, err := NewReader(r)
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if c.w == nil {
		if c.w, err = NewWriter(c.out, rd.LinkType, rd.Snaplen, rd.Nanos); err != nil {
			return 0, err
		}
		c.link, c.nanos = rd.LinkType, rd.Nanos
	} else if rd.LinkType != c.link {
		return 0, fmt.Errorf("%w: %s, the stream %s", ErrOtherLinkType, rd.LinkType, c.link)
	}
	// Records go across whole when the timestamps have the stream's
	// resolution.
	runs := rd.Raw() && rd.Nanos == c.nanos
	packets := 0
	for {
		if runs {
			if run, k := rd.NextRun(RunLimit{Bytes: math.MaxInt64}); k > 0 {
				if err := c.w.WriteRun(run); err != nil {
					return packets, err
				}
				packets += k
				continue
			}
		}
		data, ci, err := rd.Next()
		if err == io.EOF || errors.Is(err, ErrTruncated) {
			return packets, nil
		}
		if err != nil {
			return packets, err
		}
		if err := c.w.WritePacket(ci, data); err != nil {
			return packets, err
		}
		packets++
	}
}

// Flush writes out what is buffered. Before the first Append nothing has
// been written, not even a file header.
func (c *Concat) Flush() error {
	if c.w == nil {
		return nil
	}
	return c.w.Flush()
}

// Started reports whether a capture was appended (the header written).
func (c *Concat) Started() bool { return c.w != nil }

//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket/afpacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/pcap/filter"

	"github.com/plumb-dev/plumb/pcap"
)

// LiveSource captures from a network interface with AF_PACKET (no cgo;
// needs root or CAP_NET_RAW). It is live: nothing can be read again after
// a crash, and packets are dropped (and counted) while the spool is full.
//
// A filter (tcpdump syntax) is compiled for the interface's link type and
// attached to the socket: the kernel drops what it does not keep.
func LiveSource(iface, expr string, log *slog.Logger) (Source, error) {
	link, err := linkTypeOf(iface)
	if err != nil {
		return Source{}, err
	}
	var flt *filter.Filter
	if expr != "" {
		if flt, err = filter.Compile(expr, link); err != nil {
			return Source{}, fmt.Errorf("interface %s: %w", iface, err)
		}
	}
	return Source{Name: "live:" + iface, Live: true, Open: func() (io.ReadCloser, error) {
		rc, err := openLive(iface, link, flt)
		if err == nil {
			log.Info("live capture started", "interface", iface, "link_type", link.String())
		}
		return rc, err
	}}, nil
}

// linkTypeOf tells an interface's framing from its ARPHRD type.
func linkTypeOf(iface string) (layers.LinkType, error) {
	raw, err := os.ReadFile("/sys/class/net/" + iface + "/type")
	if err != nil {
		return 0, fmt.Errorf("interface %s: %w (list them with `ip link`)", iface, err)
	}
	switch t := strings.TrimSpace(string(raw)); t {
	case "1", "772": // Ethernet, loopback (Ethernet framing on AF_PACKET)
		return layers.LinkTypeEthernet, nil
	case "65534": // no link layer (tun): raw IP
		return layers.LinkTypeRaw, nil
	default:
		return 0, fmt.Errorf("interface %s has link type %s, which the agent cannot capture yet", iface, t)
	}
}

const liveSnaplen = 1 << 16

// live turns an AF_PACKET ring into a pcap stream for the cutter. Its
// goroutine owns the handle and closes it when it stops, since the handle
// must not be closed while it is being read.
type live struct {
	pr   *io.PipeReader
	stop atomic.Bool
	done chan struct{}
}

func openLive(iface string, link layers.LinkType, flt *filter.Filter) (io.ReadCloser, error) {
	h, err := afpacket.NewTPacket(afpacket.OptInterface(iface), afpacket.OptFrameSize(liveSnaplen),
		afpacket.OptBlockSize(1<<20), afpacket.OptNumBlocks(64), afpacket.OptPollTimeout(200*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("capture on %s: %w (the agent needs root or CAP_NET_RAW)", iface, err)
	}
	if flt != nil {
		if err := h.SetBPF(flt.Program()); err != nil {
			h.Close()
			return nil, fmt.Errorf("capture on %s: attach the filter %q: %w", iface, flt, err)
		}
	}
	pr, pw := io.Pipe()
	l := &live{pr: pr, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer h.Close()
		pw.CloseWithError(l.run(h, pw, link))
	}()
	return l, nil
}

func (l *live) run(h *afpacket.TPacket, pw *io.PipeWriter, link layers.LinkType) error {
	w, err := pcap.NewWriter(pw, link, liveSnaplen, true)
	if err != nil {
		return err
	}
	for {
		data, ci, err := h.ZeroCopyReadPacketData()
		if errors.Is(err, afpacket.ErrTimeout) {
			if err := w.Flush(); err != nil {
				return err
			}
			if l.stop.Load() {
				return io.EOF // stopped, and the ring is drained
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := w.WritePacket(ci, data); err != nil {
			return err
		}
	}
}

func (l *live) Read(p []byte) (int, error) { return l.pr.Read(p) }

// Stop ends the capture gracefully: what the kernel already captured is
// still read (until the ring is quiet for one poll), then the stream ends.
func (l *live) Stop() { l.stop.Store(true) }

func (l *live) Close() error {
	l.stop.Store(true)
	l.pr.CloseWithError(io.ErrClosedPipe)
	<-l.done
	return nil
}

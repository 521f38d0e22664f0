package builtin

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/gopacket/gopacket"

	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/netpkt"
	"github.com/plumb-dev/plumb/stage"
)

func registerFlowHash(reg *stage.Registry) {
	reg.Add(stage.Factory{
		Name: "flowhash",
		Doc: "Splits a capture block into ?n=N captures by a symmetric hash of the 5-tuple, so both directions of a " +
			"connection (and every fragment of a datagram) land in the same one; outputs are named QUEUE.h0 … QUEUE.h{N-1}.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args, "n"); err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(args.Get("n"))
			if err != nil || n < 2 || n > 256 {
				return nil, fmt.Errorf("n=%q: want a number of outputs from 2 to 256", args.Get("n"))
			}
			return &FlowHash{N: n}, nil
		},
	})
}

// FlowHash splits captures by flow.
type FlowHash struct{ N int }

// Run implements stage.Builtin; a flow hash needs its outputs by name,
// so only Split is used.
func (f *FlowHash) Run(ctx context.Context, _ stage.Input, in io.Reader, out io.Writer) error {
	return errors.New("builtin:flowhash writes several outputs; list them as outputs: [Q.h0, Q.h1, …]")
}

// outputIndex reads the i of a queue named ….h<i>.
func outputIndex(q string) (int, bool) {
	i := strings.LastIndex(q, ".h")
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(q[i+2:])
	return n, err == nil && n >= 0 && strconv.Itoa(n) == q[i+2:]
}

// CheckOutputs implements stage.Splitter.
func (f *FlowHash) CheckOutputs(queues []string) error {
	seen := make([]bool, f.N)
	for _, q := range queues {
		i, ok := outputIndex(q)
		if !ok || i >= f.N || seen[i] {
			return fmt.Errorf("flowhash?n=%d writes outputs named QUEUE.h0 … QUEUE.h%d, each once; %q does not fit", f.N, f.N-1, q)
		}
		seen[i] = true
	}
	if len(queues) != f.N {
		return fmt.Errorf("flowhash?n=%d writes %d outputs; %d are listed", f.N, f.N, len(queues))
	}
	return nil
}

// fragKey names an IP datagram, whose fragments follow its first.
type fragKey struct {
	src, dst netip.Addr
	id       uint32
	proto    uint8
}

// Split implements stage.Splitter.
func (f *FlowHash) Split(ctx context.Context, _ stage.Input, in io.Reader, outs map[string]io.Writer) error {
	r, closer, err := pcap.NewReader(in)
	if err != nil {
		return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
	}
	defer closer.Close()
	ws := make([]*pcap.Writer, f.N)
	for q, w := range outs {
		i, _ := outputIndex(q)
		if ws[i], err = pcap.NewWriter(w, r.LinkType, r.Snaplen, r.Nanos); err != nil {
			return err
		}
	}
	var (
		p    netpkt.Packet
		dgm  = map[fragKey]int{} // datagram → output, once its first fragment is seen
		held = map[fragKey][]heldPacket{}
	)
	for n := 0; ; n++ {
		if n%8192 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		data, ci, err := r.Next()
		if err == io.EOF || errors.Is(err, pcap.ErrTruncated) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
		}
		out := 0
		if netpkt.Decode(r.LinkType, data, &p) == nil {
			switch {
			case !p.Fragment:
				out = f.bucket(p.Src, p.Dst, p.SrcPort, p.DstPort, p.Proto)
			default:
				k := fragKey{p.Src, p.Dst, p.FragID, p.Proto}
				o, known := dgm[k]
				if !known && p.FragOffset == 0 && netpkt.Transport(&p, p.Payload) == nil {
					o, known = f.bucket(p.Src, p.Dst, p.SrcPort, p.DstPort, p.Proto), true
					dgm[k] = o
					for _, h := range held[k] { // fragments that came before the first
						if err := ws[o].WritePacket(h.ci, h.data); err != nil {
							return err
						}
					}
					delete(held, k)
				}
				if !known {
					held[k] = append(held[k], heldPacket{ci, append([]byte(nil), data...)})
					continue
				}
				out = o
			}
		}
		if err := ws[out].WritePacket(ci, data); err != nil {
			return err
		}
	}
	// Fragments whose first never came go by their addresses alone.
	for k, hs := range held {
		o := f.bucket(k.src, k.dst, 0, 0, k.proto)
		for _, h := range hs {
			if err := ws[o].WritePacket(h.ci, h.data); err != nil {
				return err
			}
		}
	}
	for _, w := range ws {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

type heldPacket struct {
	ci   gopacket.CaptureInfo
	data []byte
}

// bucket hashes a flow the same way in both directions: the two
// endpoints are put in a fixed order first. FNV-1a keeps it the same
// across runs and machines.
func (f *FlowHash) bucket(a, b netip.Addr, ap, bp uint16, proto uint8) int {
	ea, eb := endpoint(a, ap), endpoint(b, bp)
	if bytes.Compare(eb[:], ea[:]) < 0 {
		ea, eb = eb, ea
	}
	h := uint64(14695981039346656037)
	for _, part := range [][]byte{ea[:], eb[:], {proto}} {
		for _, c := range part {
			h = (h ^ uint64(c)) * 1099511628211
		}
	}
	return int(h % uint64(f.N))
}

func endpoint(a netip.Addr, port uint16) (e [18]byte) {
	ip := a.As16()
	copy(e[:], ip[:])
	binary.BigEndian.PutUint16(e[16:], port)
	return e
}

var _ stage.Splitter = (*FlowHash)(nil)

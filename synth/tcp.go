package synth

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// tcpConn writes one DNS-over-TCP connection: handshake, one to four
// queries each answered in turn (a message sometimes split across two
// segments, as real stacks do), and the close.
func (g *gen) tcpConn(t time.Time, cli, srv endpoint) error {
	c := &tcpState{g: g, cli: cli, srv: srv, cseq: g.r.Uint32(), sseq: g.r.Uint32(), t: t}
	c.reorder = g.cfg.Reorder > 0 && g.r.Float64() < g.cfg.Reorder
	step := func() { c.t = c.t.Add(time.Duration(20+g.r.IntN(300)) * time.Microsecond) }
	if err := c.seg(true, tcpFlags{syn: true}, nil); err != nil {
		return err
	}
	c.cseq++
	step()
	if err := c.seg(false, tcpFlags{syn: true, ack: true}, nil); err != nil {
		return err
	}
	c.sseq++
	step()
	if err := c.seg(true, tcpFlags{ack: true}, nil); err != nil {
		return err
	}
	for range 1 + g.r.IntN(4) {
		q, resp := g.messages()
		for _, m := range []*layers.DNS{q, resp} {
			fromClient := !m.QR
			wire, err := dnsWire(m)
			if err != nil {
				return err
			}
			step()
			if err := c.send(fromClient, wire); err != nil {
				return err
			}
			g.count(m, true)
		}
	}
	step()
	if err := c.seg(true, tcpFlags{fin: true, ack: true}, nil); err != nil {
		return err
	}
	c.cseq++
	step()
	if err := c.seg(false, tcpFlags{fin: true, ack: true}, nil); err != nil {
		return err
	}
	c.sseq++
	step()
	return c.seg(true, tcpFlags{ack: true}, nil)
}

// dnsWire is a message with its two-byte TCP length prefix.
func dnsWire(m *layers.DNS) ([]byte, error) {
	buf := gopacket.NewSerializeBuffer()
	if err := m.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return nil, fmt.Errorf("synth: serialize DNS: %w", err)
	}
	b := buf.Bytes()
	out := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(out, uint16(len(b)))
	copy(out[2:], b)
	return out, nil
}

type tcpFlags struct{ syn, ack, fin, psh bool }

type tcpState struct {
	g          *gen
	cli, srv   endpoint
	cseq, sseq uint32
	t          time.Time
	reorder    bool // send a message's segments out of order, some twice
}

// send writes data from one side, in one segment or split in two, and the
// other side's ACK.
func (c *tcpState) send(fromClient bool, data []byte) error {
	parts := [][]byte{data}
	if len(data) > 4 && (c.reorder || c.g.r.IntN(10) < 3) {
		cut := 1 + c.g.r.IntN(len(data)-1)
		parts = [][]byte{data[:cut], data[cut:]}
	}
	if c.reorder && len(parts) == 2 {
		return c.sendReordered(fromClient, parts)
	}
	for _, p := range parts {
		if err := c.seg(fromClient, tcpFlags{ack: true, psh: true}, p); err != nil {
			return err
		}
		if fromClient {
			c.cseq += uint32(len(p))
		} else {
			c.sseq += uint32(len(p))
		}
		c.t = c.t.Add(time.Duration(5+c.g.r.IntN(50)) * time.Microsecond)
	}
	return c.seg(!fromClient, tcpFlags{ack: true}, nil)
}

func (c *tcpState) seg(fromClient bool, f tcpFlags, payload []byte) error {
	src, dst, seq, ack := c.cli, c.srv, c.cseq, c.sseq
	if !fromClient {
		src, dst, seq, ack = c.srv, c.cli, c.sseq, c.cseq
	}
	ipl, netl, et := c.g.ipLayer(src, dst, layers.IPProtocolTCP)
	tcp := &layers.TCP{SrcPort: layers.TCPPort(src.port), DstPort: layers.TCPPort(dst.port), Seq: seq, Window: 65535,
		SYN: f.syn, FIN: f.fin, PSH: f.psh, ACK: f.ack}
	if f.ack {
		tcp.Ack = ack
	}
	tcp.SetNetworkLayerForChecksum(netl)
	return c.g.write(c.t, c.g.eth(src, et), ipl, tcp, gopacket.Payload(payload))
}

// sendReordered sends the second part before the first, then the first
// twice (a retransmission), then the other side's ACK.
func (c *tcpState) sendReordered(fromClient bool, parts [][]byte) error {
	seq := &c.cseq
	if !fromClient {
		seq = &c.sseq
	}
	start := *seq
	for _, i := range []int{1, 0, 0} {
		*seq = start
		if i == 1 {
			*seq += uint32(len(parts[0]))
		}
		if err := c.seg(fromClient, tcpFlags{ack: true, psh: true}, parts[i]); err != nil {
			return err
		}
		c.t = c.t.Add(time.Duration(5+c.g.r.IntN(50)) * time.Microsecond)
	}
	*seq = start + uint32(len(parts[0])+len(parts[1]))
	return c.seg(!fromClient, tcpFlags{ack: true}, nil)
}

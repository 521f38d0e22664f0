package synth

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// The harder parts of real traffic, each a fraction in Config:
//
//   - RandomSubdomain: queries for random names under one victim domain (a
//     water-torture attack), answered NXDOMAIN or not at all;
//   - TCPFlood: short TCP connections that open and send a partial query or
//     nothing, and never close (half-open state a decoder must bound);
//   - Fragments: large responses (DNSSEC-sized) sent as IP fragments;
//   - Reorder: TCP connections whose segments arrive out of order, some
//     retransmitted;
//   - Malformed: queries cut short inside the question.

// AttackMix is the attack mix of `plumb synth --mix attack`: mostly a
// random-subdomain flood, with TCP floods, large fragmented answers,
// reordered streams and some malformed queries.
func AttackMix(c *Config) {
	c.RandomSubdomain, c.TCPFlood, c.Fragments, c.Reorder, c.Malformed = 0.6, 0.15, 0.05, 0.2, 0.01
}

// victim is the domain a random-subdomain attack targets.
const victim = "victim.example"

func (g *gen) randomSubdomain(t time.Time, cli, srv endpoint) error {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	label := make([]byte, 8+g.r.IntN(16))
	for i := range label {
		label[i] = letters[g.r.IntN(len(letters))]
	}
	q := &layers.DNS{ID: uint16(g.r.Uint32()), RD: true, OpCode: layers.DNSOpCodeQuery,
		Questions: []layers.DNSQuestion{{Name: []byte(string(label) + "." + victim), Type: layers.DNSTypeA, Class: layers.DNSClassIN}}}
	if err := g.udp(t, cli, srv, q); err != nil {
		return err
	}
	if g.r.IntN(2) == 0 {
		return nil // the server is overwhelmed: half go unanswered
	}
	resp := *q
	resp.QR, resp.ResponseCode = true, layers.DNSResponseCodeNXDomain
	return g.udp(t.Add(g.rtt()), srv, cli, &resp)
}

// tcpFlood opens a connection and sends at most the start of a query,
// then abandons it.
func (g *gen) tcpFlood(t time.Time, cli, srv endpoint) error {
	c := &tcpState{g: g, cli: cli, srv: srv, cseq: g.r.Uint32(), sseq: g.r.Uint32(), t: t}
	if err := c.seg(true, tcpFlags{syn: true}, nil); err != nil {
		return err
	}
	c.cseq++
	c.t = c.t.Add(g.rtt())
	if err := c.seg(false, tcpFlags{syn: true, ack: true}, nil); err != nil {
		return err
	}
	c.sseq++
	if g.r.IntN(2) == 0 {
		return nil // never even ACKs
	}
	c.t = c.t.Add(g.rtt())
	q, _ := g.messages()
	wire, err := dnsWire(q)
	if err != nil {
		return err
	}
	return c.seg(true, tcpFlags{ack: true, psh: true}, wire[:1+g.r.IntN(len(wire)-1)])
}

// bigResponse pads a response with TXT records to a DNSSEC-like size that
// needs fragments.
func (g *gen) bigResponse(resp *layers.DNS) {
	for range 6 + g.r.IntN(6) {
		txt := make([]byte, 250)
		for i := range txt {
			txt[i] = 'A' + byte(g.r.IntN(26))
		}
		resp.Additionals = append([]layers.DNSResourceRecord{{Name: resp.Questions[0].Name, Type: layers.DNSTypeTXT,
			Class: layers.DNSClassIN, TTL: 300, TXTs: [][]byte{txt}}}, resp.Additionals...)
	}
}

// fragmented writes a UDP message as IP fragments of at most 1280 bytes of
// payload, in order or (sometimes) last first.
func (g *gen) fragmented(t time.Time, src, dst endpoint, msg *layers.DNS) error {
	_, netl, et := g.ipLayer(src, dst, layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: layers.UDPPort(src.port), DstPort: layers.UDPPort(dst.port)}
	udp.SetNetworkLayerForChecksum(netl)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, udp, msg); err != nil {
		return fmt.Errorf("synth: serialize: %w", err)
	}
	payload := append([]byte(nil), buf.Bytes()...)
	const size = 1280
	id := g.r.Uint32()
	var frags [][]gopacket.SerializableLayer
	for off := 0; off < len(payload); off += size {
		end := min(off+size, len(payload))
		more := end < len(payload)
		var ip gopacket.SerializableLayer
		if src.ip.To4() != nil {
			v4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.ip, DstIP: dst.ip,
				Id: uint16(id), FragOffset: uint16(off / 8)}
			if more {
				v4.Flags = layers.IPv4MoreFragments
			}
			ip = v4
			frags = append(frags, []gopacket.SerializableLayer{g.eth(src, et), ip, gopacket.Payload(payload[off:end])})
			continue
		}
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: src.ip, DstIP: dst.ip}
		fh := &layers.IPv6Fragment{NextHeader: layers.IPProtocolUDP, FragmentOffset: uint16(off / 8), MoreFragments: more, Identification: id}
		frags = append(frags, []gopacket.SerializableLayer{g.eth(src, et), v6, fh, gopacket.Payload(payload[off:end])})
	}
	if len(frags) > 1 && g.r.IntN(4) == 0 {
		frags[0], frags[len(frags)-1] = frags[len(frags)-1], frags[0]
	}
	for i, f := range frags {
		if err := g.write(t.Add(time.Duration(i)*time.Microsecond), f...); err != nil {
			return err
		}
	}
	g.count(msg, false)
	return nil
}

// malformedQuery writes a query cut short inside its question: the header
// says one question, the bytes end before its type.
func (g *gen) malformedQuery(t time.Time, cli, srv endpoint) error {
	q, _ := g.messages()
	q.Additionals = nil
	buf := gopacket.NewSerializeBuffer()
	if err := q.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return err
	}
	wire := buf.Bytes()
	cut := append([]byte(nil), wire[:len(wire)-2-g.r.IntN(3)]...) // loses the class, maybe more
	binary.BigEndian.PutUint16(cut[4:], 1)
	ipl, netl, et := g.ipLayer(cli, srv, layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: layers.UDPPort(cli.port), DstPort: layers.UDPPort(srv.port)}
	udp.SetNetworkLayerForChecksum(netl)
	if err := g.write(t, g.eth(cli, et), ipl, udp, gopacket.Payload(cut)); err != nil {
		return err
	}
	g.count(q, false)
	g.st.Malformed++
	return nil
}

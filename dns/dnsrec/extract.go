// Package dnsrec finds the DNS messages in a capture and makes one record
// of each: it decodes frames (netpkt), reassembles IP fragments and DNS
// over TCP (dnstcp), reads each message (dnsmsg), and writes the records
// as Arrow columns.
package dnsrec

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/dns/dnstap"
	"github.com/plumb-dev/plumb/dns/dnstcp"
	"github.com/plumb-dev/plumb/pcap/netpkt"
)

// Record is one DNS message.
type Record struct {
	Time             time.Time
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	TCP              bool
	IPVersion        uint8
	Size             int // message bytes, without the TCP length prefix
	Msg              dnsmsg.Message
	// Err is why the message could not be read whole; Msg holds what was
	// read before the fault.
	Err error
	// Tunnel names the tunnel the packet came out of ("vxlan",
	// "geneve"), or is "".
	Tunnel string
	// Partial marks the start of a message that never came whole: of a
	// datagram whose other fragments never came, or of a message over
	// TCP whose stream a bound let go of (for room, or at a hole given
	// up on). Msg holds what came (the header and usually the
	// question); Err says where it ends and why.
	Partial bool
	// Transport, when above 0, is the row's index in Transports (a
	// dnstap message's DoT, DoH, DoQ...); else TCP says.
	Transport int8
	// DnstapType and DnstapIdentity are a dnstap message's type
	// (CLIENT_QUERY...) and its server's identity; "" for packets.
	DnstapType, DnstapIdentity string
	// TCPRTT is the round-trip time of the TCP handshake, from the SYN to
	// the ACK of the SYN-ACK, for a message sent by the side that opened
	// the connection when both were seen; HasTCPRTT says it is known.
	TCPRTT    time.Duration
	HasTCPRTT bool
}

// TransportIndex is the row's index in Transports.
func (r *Record) TransportIndex() int8 {
	if r.Transport > 0 {
		return r.Transport
	}
	return TransportIndex(r.TCP)
}

// Stats counts what an Extractor saw.
type Stats struct {
	Packets       int64
	Messages      int64
	UDP, TCP      int64
	Malformed     int64 // messages that did not parse whole
	Undecodable   int64 // frames that ended inside a header or were not IP
	Fragments     int64
	Reassembled   int64 // datagrams made whole from fragments
	Partial       int64 // messages of datagrams never made whole, read from their first fragments
	Tunneled      int64 // packets taken out of VXLAN or Geneve
	EdgeDropped   int64 // frames a block's edge let go for its budget
	TCPSkipped    int   // holes given up on
	TCPEvicted    int   // streams dropped for room
	TCPLost       int64 // starts of messages over TCP a bound let go of, as partial rows
	DefragDropped int
}

// Extractor turns frames into records.
type Extractor struct {
	link   layers.LinkType
	ports  *[1 << 16]bool
	frag   netpkt.Defrag
	tcp    dnstcp.Reassembler
	pkt    netpkt.Packet
	stats  Stats
	emit   func(*Record)
	rec    Record
	parser dnsmsg.Parser
	// tunnel is the tunnel of the packet being read, for the TCP
	// messages it completes.
	tunnel string
	// edge, when set, splits what the block completes on its own from
	// what its neighbours may change (see Edge).
	edge *splitter
	// tap is what the dnstap frame being read adds to its row.
	tap struct {
		transport     int8
		typ, identity string
	}
}

// maxTunnels bounds tunnels inside tunnels.
const maxTunnels = 4

// DefaultPorts are where DNS is read: unicast DNS on 53. mDNS (5353) and
// LLMNR are other protocols.
var DefaultPorts = []uint16{53}

// NewExtractor returns an extractor for frames of a link type that calls
// emit with each record (valid during the call).
func NewExtractor(link layers.LinkType, ports []uint16, emit func(*Record)) *Extractor {
	if len(ports) == 0 {
		ports = DefaultPorts
	}
	x := &Extractor{link: link, ports: new([1 << 16]bool), emit: emit}
	for _, p := range ports {
		x.ports[p] = true
	}
	x.frag.Partial = x.partial
	x.tcp.Expired = x.tcpFlushed
	x.tcp.Lost = x.tcpLost
	return x
}

// partial reads the start of a datagram given up on, if it is DNS.
func (x *Extractor) partial(t time.Time, p *netpkt.Packet) {
	if p.Proto != netpkt.ProtoUDP || len(p.Payload) == 0 || (!x.ports[p.SrcPort] && !x.ports[p.DstPort]) {
		return
	}
	x.stats.Partial++
	x.record(t, p.Src, p.Dst, p.SrcPort, p.DstPort, false, p.IPVersion, p.Payload, "",
		fmt.Sprintf("the datagram's fragments after byte %d never came", len(p.Payload)))
}

// Packet takes one frame seen at time t.
func (x *Extractor) Packet(t time.Time, frame []byte) {
	x.stats.Packets++
	if x.edge != nil && t.After(x.edge.end) {
		x.edge.end = t
	}
	if x.link == dnstap.LinkType {
		x.dnstap(t, frame)
		return
	}
	p := &x.pkt
	if err := netpkt.Decode(x.link, frame, p); err != nil {
		x.stats.Undecodable++
		return
	}
	tunnel := ""
	for depth := 0; ; depth++ {
		if p.Fragment {
			x.stats.Fragments++
			if x.edge != nil {
				if x.edge.onEdge != nil {
					x.edge.onEdge(int(x.stats.Packets-1), p.Src, p.Dst)
				}
				x.edge.keep(t, int(x.stats.Packets-1), frame) // put together where blocks meet
				return
			}
			if !x.frag.Add(t, p) {
				return
			}
			x.stats.Reassembled++
		}
		// DNS on a tunnel's own port is DNS, not a tunnel; so is a
		// response from a DNS port to a client whose source port was a
		// tunnel's.
		kind := netpkt.TunnelOf(p)
		if kind == "" || depth == maxTunnels || x.ports[p.DstPort] || x.ports[p.SrcPort] {
			break
		}
		if err := netpkt.Decap(p); err != nil {
			x.stats.Undecodable++
			return
		}
		x.stats.Tunneled++
		tunnel = kind
	}
	if !x.ports[p.SrcPort] && !x.ports[p.DstPort] {
		return
	}
	switch p.Proto {
	case netpkt.ProtoUDP:
		if len(p.Payload) == 0 {
			return // nothing to read; not a message
		}
		x.record(t, p.Src, p.Dst, p.SrcPort, p.DstPort, false, p.IPVersion, p.Payload, tunnel, "")
	case netpkt.ProtoTCP:
		if x.edge != nil && !x.edge.owns(t, int(x.stats.Packets-1), p, frame) {
			return
		}
		ipv := p.IPVersion
		x.tcp.Add(t, p, func(k dnstcp.Key, mt time.Time, msg []byte) {
			// A message has the tunnel of the packet that completed it.
			x.record(mt, k.Src, k.Dst, k.SrcPort, k.DstPort, true, ipv, msg, tunnel, "")
		})
	}
}

// Flush emits the messages still held by TCP streams (beyond holes) and
// the starts of datagrams still missing fragments (as partial), at the
// end of the capture.
func (x *Extractor) Flush() {
	x.tcp.Flush(x.tcpFlushed)
	x.frag.Flush()
}

// tcpFlushed records a message salvaged from a stream that ended
// without a packet of its own: at a capture's end, or idle.
func (x *Extractor) tcpFlushed(k dnstcp.Key, mt time.Time, msg []byte) {
	v := uint8(4)
	if k.Src.Is6() {
		v = 6
	}
	x.record(mt, k.Src, k.Dst, k.SrcPort, k.DstPort, true, v, msg, "", "")
}

// tcpLost records the start of a message over TCP that a bound let go
// of, as a partial row saying which bound: what a budget costs shows in
// the rows, not only in the counts.
func (x *Extractor) tcpLost(k dnstcp.Key, t time.Time, head []byte, want int, why dnstcp.Why) {
	if len(head) == 0 {
		return // a length alone: nothing of the message to read
	}
	x.stats.TCPLost++
	v := uint8(4)
	if k.Src.Is6() {
		v = 6
	}
	reason := "its TCP stream was let go of for room (the reassembly budget, ?budget=)"
	if why == dnstcp.AtHole {
		reason = "its TCP stream gave up on a hole after it (256 KiB or 4,096 segments held past the hole)"
	}
	x.record(t, k.Src, k.Dst, k.SrcPort, k.DstPort, true, v, head, "", fmt.Sprintf("message of %d bytes cut after byte %d: %s", want, len(head), reason))
}

// ReadSections chooses the record sections read into each record's
// Msg (dnsmsg.AllSections unless told): skipping them saves most of
// what reading a signed zone's responses costs. Header, question and
// EDNS are always read.
func (x *Extractor) ReadSections(s dnsmsg.Sections) { x.parser.Skip = dnsmsg.AllSections &^ s }

// Packets is how many frames the extractor has taken.
func (x *Extractor) Packets() int64 { return x.stats.Packets }

// Stats returns the counts so far.
func (x *Extractor) Stats() Stats {
	s := x.stats
	s.TCPSkipped, s.TCPEvicted, s.DefragDropped = x.tcp.Skipped, x.tcp.Evicted, x.frag.Dropped
	return s
}

// record reads a message and emits its record. cut, when not "", marks
// it partial and says why its bytes end.
func (x *Extractor) record(t time.Time, src, dst netip.Addr, sport, dport uint16, tcp bool, ipv uint8, msg []byte, tunnel string, cut string) {
	r := &x.rec
	*r = Record{Time: t, Src: src, Dst: dst, SrcPort: sport, DstPort: dport, TCP: tcp, IPVersion: ipv, Size: len(msg),
		Tunnel: tunnel, Partial: cut != ""}
	r.Transport, r.DnstapType, r.DnstapIdentity = x.tap.transport, x.tap.typ, x.tap.identity
	if tcp {
		// Its stream is still followed: record is called from its Emit.
		r.TCPRTT, r.HasTCPRTT = x.tcp.RTT(dnstcp.Key{Src: src, Dst: dst, SrcPort: sport, DstPort: dport})
	}
	r.Msg, r.Err = x.parser.Parse(msg)
	switch {
	case cut == "":
	case r.Err == nil:
		// What came reads whole, yet the message went on past it.
		r.Err = fmt.Errorf("%w: %s", dnsmsg.ErrMalformed, cut)
	case tcp:
		r.Err = fmt.Errorf("%w; %s", r.Err, cut)
	}
	x.stats.Messages++
	if tcp {
		x.stats.TCP++
	} else {
		x.stats.UDP++
	}
	if r.Err != nil {
		x.stats.Malformed++
	}
	x.emit(r)
}

// dnstap reads a dnstap frame (a capture of dnstap.LinkType): its query
// or response, whichever its type logs, as a row, whatever the ports (DoH
// is on 443). A frame that does not read, or carries no DNS message, is a
// malformed row saying why.
func (x *Extractor) dnstap(t time.Time, frame []byte) {
	m, err := dnstap.Decode(frame)
	x.tap.identity = m.Identity
	if m.Type != 0 {
		x.tap.typ = m.TypeName()
	}
	x.tap.transport = 0
	if name, ok := dnstap.Protocols[m.Protocol]; ok {
		x.tap.transport = int8(max(slices.Index(Transports, name), 0))
	}
	defer func() { x.tap.transport, x.tap.typ, x.tap.identity = 0, "", "" }()
	src, dst, sport, dport, msg := m.QueryAddr, m.ResponseAddr, m.QueryPort, m.ResponsePort, m.QueryMessage
	if m.IsResponse() {
		src, dst, sport, dport, msg = dst, src, dport, sport, m.ResponseMessage
	}
	if !m.Time().IsZero() {
		t = m.Time()
	}
	ipv := uint8(4)
	if src.Is6() && !src.Is4In6() {
		ipv = 6
	}
	tcp := m.Protocol != 1 && m.Protocol != 5 && m.Protocol != 0
	if err == nil && msg == nil {
		err = fmt.Errorf("the dnstap %s frame carries no DNS message", m.TypeName())
	}
	if err != nil {
		r := &x.rec
		*r = Record{Time: t, Src: src, Dst: dst, SrcPort: sport, DstPort: dport, TCP: tcp, IPVersion: ipv, Size: len(msg),
			Transport: x.tap.transport, DnstapType: x.tap.typ, DnstapIdentity: x.tap.identity, Err: err}
		x.stats.Messages++
		x.stats.Malformed++
		x.emit(r)
		return
	}
	x.record(t, src, dst, sport, dport, tcp, ipv, msg, "", "")
}

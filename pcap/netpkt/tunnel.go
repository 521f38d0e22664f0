package netpkt

import (
	"encoding/binary"
	"errors"

	"github.com/gopacket/gopacket/layers"
)

// Tunnel ports: where VXLAN (RFC 7348) and Geneve (RFC 8926) carry
// frames over UDP.
const (
	PortVXLAN  = 4789
	PortGeneve = 6081
)

// ErrTunnel: a tunnel header that cannot be read.
var ErrTunnel = errors.New("malformed tunnel header")

// TunnelOf names the tunnel a whole UDP datagram's destination port
// says it carries: "vxlan", "geneve", or "".
func TunnelOf(p *Packet) string {
	if p.Proto != ProtoUDP || p.Fragment {
		return ""
	}
	switch p.DstPort {
	case PortVXLAN:
		return "vxlan"
	case PortGeneve:
		return "geneve"
	}
	return ""
}

// Decap replaces p, a whole UDP datagram of a tunnel (TunnelOf), with the
// packet it carries: VXLAN's Ethernet frame, or Geneve's Ethernet frame or
// IP packet. The inner packet may itself be a fragment.
func Decap(p *Packet) error {
	b := p.Payload
	switch TunnelOf(p) {
	case "vxlan":
		if len(b) < 8 {
			return ErrTruncated
		}
		if b[0]&0x08 == 0 { // the I flag: a valid VNI, what every sender sets
			return ErrTunnel
		}
		return Decode(layers.LinkTypeEthernet, b[8:], p)
	case "geneve":
		if len(b) < 8 {
			return ErrTruncated
		}
		if b[0]>>6 != 0 { // version 0 is the only one
			return ErrTunnel
		}
		hl := 8 + int(b[0]&0x3f)*4
		if len(b) < hl {
			return ErrTruncated
		}
		inner := b[hl:]
		switch binary.BigEndian.Uint16(b[2:]) {
		case 0x6558: // transparent Ethernet bridging
			return Decode(layers.LinkTypeEthernet, inner, p)
		case 0x0800, 0x86dd:
			*p = Packet{}
			return ip(inner, p)
		}
		return ErrNotIP
	}
	return ErrTunnel
}

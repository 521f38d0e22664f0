// Package netpkt decodes captured frames down to their UDP or TCP payload:
// the link layers DNS captures come in (Ethernet with VLAN tags, Linux
// cooked v1 and v2, raw IP, BSD loopback, PKTAP), IPv4 and IPv6 with
// extension headers, and IP fragments, which Defrag puts back together.
// It reads headers in place and allocates nothing per packet; every length
// is checked against the bytes captured.
package netpkt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/gopacket/gopacket/layers"
)

// IP protocol numbers the decoder follows.
const (
	ProtoTCP = 6
	ProtoUDP = 17
)

// TCP flags.
const (
	FlagFIN = 0x01
	FlagSYN = 0x02
	FlagRST = 0x04
	FlagACK = 0x10
)

// Packet is one decoded frame. Slices point into the frame's bytes.
type Packet struct {
	IPVersion uint8
	Src, Dst  netip.Addr
	Proto     uint8 // ProtoUDP, ProtoTCP, or another IP protocol
	// Fragment is set when the IP datagram is a fragment; then Payload is
	// the fragment's data (at FragOffset bytes into the datagram) and the
	// transport fields are unset until Defrag completes it.
	Fragment   bool
	FragID     uint32
	FragOffset int
	MoreFrags  bool

	SrcPort, DstPort uint16
	Seq              uint32 // TCP
	Flags            uint8  // TCP
	Payload          []byte // UDP or TCP payload

	// IP is the IP datagram from its header on, and L4 the transport
	// header on (nil for a fragment), both in the frame's bytes: for
	// rewriting a packet in place.
	IP, L4 []byte
}

// Errors Decode returns; test with errors.Is.
var (
	// ErrTruncated: the frame ends inside a header (snap length, or a
	// broken packet).
	ErrTruncated = errors.New("frame ends inside a header")
	// ErrNotIP: the frame carries something other than IPv4 or IPv6.
	ErrNotIP = errors.New("not an IP packet")
	// ErrLinkType: the capture's link type is not one Decode reads.
	ErrLinkType = errors.New("link type not supported")
)

// Decode reads a frame of the given link type into p.
func Decode(link layers.LinkType, frame []byte, p *Packet) error {
	*p = Packet{}
	for range 4 { // PKTAP wraps another link type; no deeper nesting
		switch link {
		case layers.LinkTypeEthernet:
			return ethernet(frame, p)
		case layers.LinkTypeRaw, 12, 14, layers.LinkTypeIPv4, layers.LinkTypeIPv6: // 12 and 14 are raw IP on some systems
			return ip(frame, p)
		case layers.LinkTypeNull, layers.LinkTypeLoop:
			if len(frame) < 4 {
				return ErrTruncated
			}
			family := binary.LittleEndian.Uint32(frame)
			if link == layers.LinkTypeLoop || family > 0xffff {
				family = binary.BigEndian.Uint32(frame)
			}
			switch family {
			case 2, 24, 28, 30: // AF_INET; AF_INET6 on the BSDs and macOS
				return ip(frame[4:], p)
			}
			return ErrNotIP
		case layers.LinkTypeLinuxSLL:
			if len(frame) < 16 {
				return ErrTruncated
			}
			return etherType(binary.BigEndian.Uint16(frame[14:]), frame[16:], p)
		case layers.LinkTypeLinuxSLL2:
			if len(frame) < 20 {
				return ErrTruncated
			}
			return etherType(binary.BigEndian.Uint16(frame), frame[20:], p)
		case 258: // PKTAP: a little-endian header length, then the inner link type
			if len(frame) < 8 {
				return ErrTruncated
			}
			hl := int(binary.LittleEndian.Uint32(frame))
			if hl < 8 || hl > len(frame) {
				return ErrTruncated
			}
			link = layers.LinkType(binary.LittleEndian.Uint32(frame[4:]))
			frame = frame[hl:]
		default:
			return fmt.Errorf("%w: %s (%d)", ErrLinkType, link, int(link))
		}
	}
	return fmt.Errorf("%w: nested PKTAP headers", ErrLinkType)
}

func ethernet(frame []byte, p *Packet) error {
	if len(frame) < 14 {
		return ErrTruncated
	}
	et := binary.BigEndian.Uint16(frame[12:])
	frame = frame[14:]
	for et == 0x8100 || et == 0x88a8 || et == 0x9100 { // VLAN tags, stacked
		if len(frame) < 4 {
			return ErrTruncated
		}
		et = binary.BigEndian.Uint16(frame[2:])
		frame = frame[4:]
	}
	return etherType(et, frame, p)
}

func etherType(et uint16, b []byte, p *Packet) error {
	switch et {
	case 0x0800, 0x86dd:
		return ip(b, p)
	}
	return ErrNotIP
}

func ip(b []byte, p *Packet) error {
	if len(b) < 1 {
		return ErrTruncated
	}
	switch b[0] >> 4 {
	case 4:
		return ipv4(b, p)
	case 6:
		return ipv6(b, p)
	}
	return ErrNotIP
}

func ipv4(b []byte, p *Packet) error {
	if len(b) < 20 {
		return ErrTruncated
	}
	hl := int(b[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	if hl < 20 || len(b) < hl {
		return ErrTruncated
	}
	// The total length cuts off link-layer padding; a frame shorter than
	// it was cut by the snap length and keeps what it has.
	if total >= hl && total < len(b) {
		b = b[:total]
	}
	p.IPVersion = 4
	p.IP = b
	p.Src = netip.AddrFrom4([4]byte(b[12:16]))
	p.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	p.Proto = b[9]
	frag := binary.BigEndian.Uint16(b[6:])
	p.MoreFrags = frag&0x2000 != 0
	p.FragOffset = int(frag&0x1fff) * 8
	if p.MoreFrags || p.FragOffset > 0 {
		p.Fragment = true
		p.FragID = uint32(binary.BigEndian.Uint16(b[4:]))
		p.Payload = b[hl:]
		return nil
	}
	return Transport(p, b[hl:])
}

func ipv6(b []byte, p *Packet) error {
	if len(b) < 40 {
		return ErrTruncated
	}
	plen := int(binary.BigEndian.Uint16(b[4:]))
	if 40+plen < len(b) {
		b = b[:40+plen] // link-layer padding
	}
	p.IPVersion = 6
	p.IP = b
	p.Src = netip.AddrFrom16([16]byte(b[8:24]))
	p.Dst = netip.AddrFrom16([16]byte(b[24:40]))
	next, rest := b[6], b[40:]
	for range 16 {
		var err error
		if next, rest, err = extensions(next, rest); err != nil {
			return err
		}
		if next != 44 { // not a fragment header
			p.Proto = next
			return Transport(p, rest)
		}
		if len(rest) < 8 {
			return ErrTruncated
		}
		off := binary.BigEndian.Uint16(rest[2:])
		p.Proto = rest[0]
		p.FragOffset = int(off>>3) * 8
		p.MoreFrags = off&1 != 0
		p.FragID = binary.BigEndian.Uint32(rest[4:])
		if p.FragOffset == 0 && !p.MoreFrags { // an atomic fragment is whole
			next, rest = rest[0], rest[8:]
			continue
		}
		p.Fragment = true
		p.Payload = rest[8:]
		return nil
	}
	return ErrTruncated
}

// extensions skips the IPv6 extension headers that need no state (hop-by-
// hop, routing, destination options, authentication) from next on, and
// returns the protocol after them and its bytes. A Fragment header ends
// the walk: its protocol is returned at it.
func extensions(next byte, rest []byte) (byte, []byte, error) {
	for range 16 {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(rest) < 8 {
				return next, nil, ErrTruncated
			}
			l := 8 + int(rest[1])*8
			if len(rest) < l {
				return next, nil, ErrTruncated
			}
			next, rest = rest[0], rest[l:]
		case 51: // authentication header
			if len(rest) < 8 {
				return next, nil, ErrTruncated
			}
			l := (int(rest[1]) + 2) * 4
			if len(rest) < l {
				return next, nil, ErrTruncated
			}
			next, rest = rest[0], rest[l:]
		default:
			return next, rest, nil
		}
	}
	return next, nil, ErrTruncated
}

// Transport reads the UDP or TCP header of a whole IP payload into p.
// Other protocols leave the payload as it is.
func Transport(p *Packet, b []byte) error {
	p.L4 = b
	switch p.Proto {
	case ProtoUDP:
		if len(b) < 8 {
			return ErrTruncated
		}
		p.SrcPort = binary.BigEndian.Uint16(b)
		p.DstPort = binary.BigEndian.Uint16(b[2:])
		// The UDP length bounds the payload; a frame cut short keeps what
		// was captured.
		ul := int(binary.BigEndian.Uint16(b[4:]))
		switch {
		case ul < 8:
			p.Payload = b[8:8]
		case ul < len(b):
			p.Payload = b[8:ul]
		default:
			p.Payload = b[8:]
		}
	case ProtoTCP:
		if len(b) < 20 {
			return ErrTruncated
		}
		p.SrcPort = binary.BigEndian.Uint16(b)
		p.DstPort = binary.BigEndian.Uint16(b[2:])
		p.Seq = binary.BigEndian.Uint32(b[4:])
		p.Flags = b[13]
		off := int(b[12]>>4) * 4
		if off < 20 || off > len(b) {
			return ErrTruncated
		}
		p.Payload = b[off:]
	default:
		p.Payload = b
	}
	return nil
}

package anon

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/pcap/netpkt"
)

// Config says how to anonymize.
type Config struct {
	// Method is "cryptopan" (the default) or "truncate".
	Method string
	// Key is the 32-byte Crypto-PAn key.
	Key []byte
	// V4 and V6 are the prefix lengths truncate keeps (24 and 48 when 0).
	V4, V6 int
	// Clients rewrites only the client side of DNS traffic (the end not on
	// port 53 or 853), leaving the server's own address; packets with
	// neither port, or without ports (fragments, ICMP), get both rewritten.
	Clients bool
	// RData rewrites the addresses in A and AAAA records of DNS messages
	// too. The address of an EDNS client subnet option is rewritten
	// always: it is a client's. Both in DNS over UDP, and over TCP where a
	// segment holds one whole message; not in a later IP fragment.
	RData bool
}

// Anonymizer rewrites packets. It keeps a bounded cache of the addresses
// it mapped; it is not safe for concurrent use.
type Anonymizer struct {
	cfg  Config
	cpan *CryptoPAn
	// The cache by address bytes: cheaper to hash than netip.Addr, and
	// a packet's bytes are looked up without building one.
	v4 map[[4]byte][4]byte
	v6 map[[16]byte][16]byte
	// last is the most recent IPv4 mapping: a server's own address is in
	// every packet.
	last4, last4To [4]byte
	haveLast4      bool
}

// cacheSize bounds the cache: a capture's addresses repeat (a server's
// own in every packet), and Crypto-PAn costs 32 or 128 AES blocks each.
const cacheSize = 1 << 16

// New checks cfg and makes an Anonymizer.
func New(cfg Config) (*Anonymizer, error) {
	a := &Anonymizer{cfg: cfg, v4: make(map[[4]byte][4]byte), v6: make(map[[16]byte][16]byte)}
	switch cfg.Method {
	case "", "cryptopan":
		c, err := NewCryptoPAn(cfg.Key)
		if err != nil {
			return nil, err
		}
		a.cpan = c
	case "truncate":
		if a.cfg.V4 == 0 {
			a.cfg.V4 = 24
		}
		if a.cfg.V6 == 0 {
			a.cfg.V6 = 48
		}
		if a.cfg.V4 < 0 || a.cfg.V4 > 32 || a.cfg.V6 < 0 || a.cfg.V6 > 128 {
			return nil, fmt.Errorf("truncate keeps v4=0..32 and v6=0..128 bits, not %d and %d", a.cfg.V4, a.cfg.V6)
		}
	default:
		return nil, fmt.Errorf("method %q: want cryptopan or truncate", cfg.Method)
	}
	return a, nil
}

// Map anonymizes one address.
func (a *Anonymizer) Map(x netip.Addr) netip.Addr {
	if x.Is4() {
		b := x.As4()
		a.map4(b[:])
		return netip.AddrFrom4(b)
	}
	b := x.As16()
	a.map16(b[:])
	return netip.AddrFrom16(b).WithZone(x.Zone())
}

// mapBytes rewrites the address in b (4 or 16 bytes) in place.
func (a *Anonymizer) mapBytes(b []byte) {
	if len(b) == 4 {
		a.map4(b)
	} else {
		a.map16(b)
	}
}

func (a *Anonymizer) map4(b []byte) {
	k := [4]byte(b)
	if a.haveLast4 && k == a.last4 {
		copy(b, a.last4To[:])
		return
	}
	v, ok := a.v4[k]
	if !ok {
		v = k
		if a.cpan != nil {
			a.cpan.mapBits(v[:])
		} else {
			truncate(v[:], a.cfg.V4)
		}
		if len(a.v4) >= cacheSize {
			clear(a.v4)
		}
		a.v4[k] = v
	}
	a.last4, a.last4To, a.haveLast4 = k, v, true
	copy(b, v[:])
}

func (a *Anonymizer) map16(b []byte) {
	k := [16]byte(b)
	v, ok := a.v6[k]
	if !ok {
		v = k
		if a.cpan != nil {
			a.cpan.mapBits(v[:])
		} else {
			truncate(v[:], a.cfg.V6)
		}
		if len(a.v6) >= cacheSize {
			clear(a.v6)
		}
		a.v6[k] = v
	}
	copy(b, v[:])
}

// truncate zeroes the bits of b after the first keep.
func truncate(b []byte, keep int) {
	for i := range b {
		switch {
		case keep >= 8:
			keep -= 8
		case keep > 0:
			b[i] &= byte(0xff << (8 - keep))
			keep = 0
		default:
			b[i] = 0
		}
	}
}

// Packet rewrites one frame in place; false when it holds no IP packet
// (left as it is).
func (a *Anonymizer) Packet(link layers.LinkType, frame []byte) bool {
	var p netpkt.Packet
	netpkt.Decode(link, frame, &p) // a truncated transport still has its IP header
	if p.IP == nil {
		return false
	}
	ip := p.IP
	srcOff, alen := 12, 4
	if p.IPVersion == 6 {
		srcOff, alen = 8, 16
	}
	src, dst := ip[srcOff:srcOff+alen], ip[srcOff+alen:srcOff+2*alen]
	doSrc, doDst := true, true
	if a.cfg.Clients && p.L4 != nil && (p.Proto == netpkt.ProtoUDP || p.Proto == netpkt.ProtoTCP) {
		switch {
		case server(p.SrcPort):
			doSrc = false
		case server(p.DstPort):
			doDst = false
		}
	}
	// The transport header, also of a datagram's first fragment.
	l4 := p.L4
	if p.Fragment && p.FragOffset == 0 {
		l4 = p.Payload
	} else if p.Fragment {
		l4 = nil
	}
	var old [32]byte
	copy(old[:], src)
	copy(old[16:], dst)
	oldPseudo := sum(src, false) + sum(dst, false)
	if doSrc {
		a.mapBytes(src)
	}
	if doDst {
		a.mapBytes(dst)
	}
	newPseudo := sum(src, false) + sum(dst, false)
	if p.IPVersion == 4 {
		hc := binary.BigEndian.Uint16(ip[10:])
		binary.BigEndian.PutUint16(ip[10:], update(hc, oldPseudo, newPseudo))
	}
	mapped := func(b []byte) bool {
		return !a.cfg.Clients || (doSrc && string(b) == string(old[:alen])) || (doDst && string(b) == string(old[16:16+alen]))
	}
	switch {
	case l4 == nil:
	case p.Proto == netpkt.ProtoTCP && len(l4) >= 18:
		o, n := oldPseudo, newPseudo
		// A segment that holds one whole DNS message (its length prefix
		// says exactly the rest) is rewritten as over UDP; a message split
		// over segments cannot be walked here, and is left alone.
		if pl := p.Payload; !p.Fragment && (server(p.SrcPort) || server(p.DstPort)) && len(pl) > 2+12 &&
			int(binary.BigEndian.Uint16(pl)) == len(pl)-2 && len(pl) <= len(l4) {
			ro, rn := a.dnsAddresses(pl[2:], len(l4)-len(pl)+2)
			o, n = o+ro, n+rn
		}
		fix(l4[16:], o, n, false)
	case p.Proto == netpkt.ProtoUDP && len(l4) >= 8:
		o, n := oldPseudo, newPseudo
		if !p.Fragment && (server(p.SrcPort) || server(p.DstPort)) && len(l4) > 8 {
			ro, rn := a.dnsAddresses(l4[8:], 8)
			o, n = o+ro, n+rn
		}
		if ck := binary.BigEndian.Uint16(l4[6:]); ck != 0 || p.IPVersion == 6 {
			fix(l4[6:], o, n, true) // 0 in IPv4: no checksum
		}
	case p.Proto == 1 && p.IPVersion == 4 && len(l4) >= 8:
		// An ICMP error quotes the IP header of the packet it is about.
		if t := l4[0]; t == 3 || t == 4 || t == 5 || t == 11 || t == 12 {
			ro, rn := a.quoted(l4[8:], 8, 4, mapped)
			fix(l4[2:], ro, rn, false)
		}
	case p.Proto == 58 && p.IPVersion == 6 && len(l4) >= 8:
		ro, rn := oldPseudo, newPseudo // ICMPv6 sums a pseudo-header
		if t := l4[0]; t >= 1 && t <= 4 {
			qo, qn := a.quoted(l4[8:], 8, 6, mapped)
			ro, rn = ro+qo, rn+qn
		}
		fix(l4[2:], ro, rn, false)
	}
	return true
}

// server reports whether port is a DNS server's.
func server(port uint16) bool { return port == 53 || port == 853 }

// quoted rewrites the addresses of the IP header an ICMP error quotes (at
// offset off into the ICMP message), as the outer ones were, and returns
// the sums of the ICMP bytes it changed, before and after.
func (a *Anonymizer) quoted(q []byte, off, version int, mapped func([]byte) bool) (before, after uint32) {
	srcOff, alen, hl := 12, 4, 20
	if version == 6 {
		srcOff, alen, hl = 8, 16, 40
	}
	if len(q) < hl || int(q[0]>>4) != version {
		return 0, 0
	}
	if version == 4 {
		hl = int(q[0]&0xf) * 4
		if hl < 20 || len(q) < hl {
			return 0, 0
		}
	}
	region := q[:srcOff+2*alen]
	if version == 4 {
		region = q[:hl] // its header checksum changes too
	}
	before = sum(region, off%2 == 1)
	var oldHdr [20]byte
	copy(oldHdr[:], q)
	for _, b := range [][]byte{q[srcOff : srcOff+alen], q[srcOff+alen : srcOff+2*alen]} {
		if mapped(b) {
			a.mapBytes(b)
		}
	}
	if version == 4 {
		o := sum(oldHdr[12:20], false)
		n := sum(q[12:20], false)
		hc := binary.BigEndian.Uint16(q[10:])
		binary.BigEndian.PutUint16(q[10:], update(hc, o, n))
	}
	return before, sum(region, off%2 == 1)
}

// dnsAddresses rewrites the addresses a DNS message carries (at offset off
// into the checksummed UDP datagram): the client subnet of an EDNS option
// always, the A and AAAA records with RData. It returns the sums of the
// bytes it changed, before and after. A message it cannot walk is left as
// it is.
func (a *Anonymizer) dnsAddresses(m []byte, off int) (before, after uint32) {
	if len(m) < 12 {
		return 0, 0
	}
	qd := int(binary.BigEndian.Uint16(m[4:]))
	rr := int(binary.BigEndian.Uint16(m[6:])) + int(binary.BigEndian.Uint16(m[8:])) + int(binary.BigEndian.Uint16(m[10:]))
	i := 12
	for range qd {
		if i = skipName(m, i); i < 0 || i+4 > len(m) {
			return before, after
		}
		i += 4
	}
	for range rr {
		if i = skipName(m, i); i < 0 || i+10 > len(m) {
			return before, after
		}
		typ := binary.BigEndian.Uint16(m[i:])
		class := binary.BigEndian.Uint16(m[i+2:])
		rdlen := int(binary.BigEndian.Uint16(m[i+8:]))
		i += 10
		if i+rdlen > len(m) {
			return before, after
		}
		if a.cfg.RData && class == 1 && (typ == 1 && rdlen == 4 || typ == 28 && rdlen == 16) {
			r := m[i : i+rdlen]
			odd := (off+i)%2 == 1
			before += sum(r, odd)
			a.mapBytes(r)
			after += sum(r, odd)
		}
		if typ == 41 { // OPT: a client subnet option is a client's address too
			b, af := a.ecs(m[i:i+rdlen], off+i)
			before, after = before+b, after+af
		}
		i += rdlen
	}
	return before, after
}

// ecs rewrites the address of an EDNS Client Subnet option (RFC 7871)
// in an OPT record's data (at offset off into the checksummed datagram):
// the address as sent is its first source-prefix bits, so it is mapped
// whole and cut back to them, the bits past the prefix zero as the RFC
// wants. It returns the sums of the bytes changed, before and after.
func (a *Anonymizer) ecs(d []byte, off int) (before, after uint32) {
	for i := 0; i+4 <= len(d); {
		code, l := binary.BigEndian.Uint16(d[i:]), int(binary.BigEndian.Uint16(d[i+2:]))
		if i+4+l > len(d) {
			return before, after
		}
		if o := d[i+4 : i+4+l]; code == 8 && l > 4 {
			odd := (off+i+8)%2 == 1
			b := sum(o[4:], odd)
			if a.ECSOption(o) {
				before, after = before+b, after+sum(o[4:], odd)
			}
		}
		i += 4 + l
	}
	return before, after
}

// ECSOption rewrites, in place, the address of an EDNS Client Subnet
// option's data (family, source prefix, scope prefix, address): mapped
// whole, then cut back to its source-prefix bits. It reports whether the
// option could be read.
func (a *Anonymizer) ECSOption(o []byte) bool {
	if len(o) <= 4 {
		return false
	}
	family, prefix, addr := binary.BigEndian.Uint16(o), int(o[2]), o[4:]
	size := map[uint16]int{1: 4, 2: 16}[family]
	if size == 0 || len(addr) > size || prefix > 8*size {
		return false
	}
	full := make([]byte, size)
	copy(full, addr)
	a.mapBytes(full)
	truncate(full, prefix)
	copy(addr, full)
	return true
}

// skipName returns the offset after the name at i, or -1.
func skipName(m []byte, i int) int {
	for range 128 {
		if i >= len(m) {
			return -1
		}
		l := int(m[i])
		switch {
		case l == 0:
			return i + 1
		case l&0xc0 == 0xc0:
			if i+2 > len(m) {
				return -1
			}
			return i + 2
		case l&0xc0 != 0:
			return -1
		}
		i += 1 + l
	}
	return -1
}

// sum is the one's-complement sum of b's 16-bit words, unfolded; odd says
// b starts at an odd offset of the checksummed data, so its first byte is
// the low half of a word.
func sum(b []byte, odd bool) uint32 {
	var s uint32
	i := 0
	if odd && len(b) > 0 {
		s, i = uint32(b[0]), 1
	}
	for ; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if i < len(b) {
		s += uint32(b[i]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// update is RFC 1624's HC' = ~(~HC + ~m + m'), with m and m' the sums of
// the changed words before and after.
func update(hc uint16, before, after uint32) uint16 {
	return ^fold(uint32(^hc) + uint32(^fold(before)) + uint32(fold(after)))
}

// fix updates the checksum at b[0:2]; for UDP a result of 0 is sent as
// 0xffff (0 means no checksum).
func fix(b []byte, before, after uint32, udp bool) {
	if len(b) < 2 {
		return
	}
	ck := update(binary.BigEndian.Uint16(b), before, after)
	if udp && ck == 0 {
		ck = 0xffff
	}
	binary.BigEndian.PutUint16(b, ck)
}

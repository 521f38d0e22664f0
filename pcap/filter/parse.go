package filter

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/bpf"
)

// EtherTypes and IP protocols.
const (
	etIPv4 = 0x0800
	etIPv6 = 0x86dd
	etARP  = 0x0806
	etRARP = 0x8035

	protoICMP   = 1
	protoIGMP   = 2
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
	protoSCTP   = 132
	protoFrag6  = 44
)

type parser struct {
	expr string
	link link
	toks []string
	pos  int
	last quals // the qualifiers a bare value takes
}

// quals are a primitive's qualifiers: a protocol, a direction, a type.
type quals struct {
	proto string // "", ip, ip6, arp, rarp, tcp, udp, sctp
	dir   string // "", src, dst, "src or dst", "src and dst"
	typ   string // host, net, port, portrange, proto
	set   bool
}

func (p *parser) lex() error {
	s := p.expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case twoCharOp(s[i:]) != "":
			op := twoCharOp(s[i:])
			p.toks = append(p.toks, op)
			i += len(op)
		case strings.IndexByte(singleOps, c) >= 0:
			p.toks = append(p.toks, string(c))
			i++
		default:
			j := i
			for j < len(s) && strings.IndexByte(" \t\n"+singleOps, s[j]) < 0 {
				j++
			}
			if j == i {
				return fmt.Errorf("%q at %d: %w", s[i:i+1], i, errOutside)
			}
			p.toks = append(p.toks, s[i:j])
			i = j
		}
	}
	return nil
}

// singleOps are the characters that are tokens alone. "-", "/" and ":"
// stay inside words, for ranges, prefixes and IPv6 addresses;
// arithmetic splits them out (arithPeek).
const singleOps = "()[]!&|=<>+*%^"

// twoCharOp is the operator of two characters s starts with, if any.
func twoCharOp(s string) string {
	if len(s) >= 2 {
		switch op := s[:2]; op {
		case "&&", "||", "==", "!=", "<=", ">=", "<<", ">>":
			return op
		}
	}
	return ""
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *parser) next() string {
	t := p.peek()
	p.pos++
	return t
}

// expr: term { (and|or) term }, and and or binding equally, left to
// right, as in libpcap.
func (p *parser) parseExpr() (node, error) {
	n, err := p.parseTerm()
	if err != nil {
		return nil, err
	}
	for {
		switch p.peek() {
		case "and", "&&":
			p.next()
			m, err := p.parseTerm()
			if err != nil {
				return nil, err
			}
			n = andNode{n, m}
		case "or", "||":
			p.next()
			m, err := p.parseTerm()
			if err != nil {
				return nil, err
			}
			n = orNode{n, m}
		default:
			return n, nil
		}
	}
}

func (p *parser) parseTerm() (node, error) {
	switch t := p.peek(); t {
	case "":
		return nil, fmt.Errorf("the expression ends where a test should be")
	case "not", "!":
		p.next()
		n, err := p.parseTerm()
		if err != nil {
			return nil, err
		}
		return notNode{n}, nil
	case "(":
		if n, ok := p.parenRelation(); ok {
			return n, nil
		}
		p.next()
		n, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		if p.next() != ")" {
			return nil, fmt.Errorf("a ( is not closed")
		}
		return n, nil
	case ")":
		return nil, fmt.Errorf("unexpected )")
	}
	return p.parsePrimitive()
}

var (
	protoWords = map[string]bool{"ip": true, "ip6": true, "arp": true, "rarp": true, "tcp": true, "udp": true, "sctp": true}
	typeWords  = map[string]bool{"host": true, "net": true, "port": true, "portrange": true, "proto": true}
	keywords   = map[string]bool{"and": true, "or": true, "not": true, "src": true, "dst": true, "icmp": true, "icmp6": true, "vlan": true}
)

// parenRelation parses a relation whose arithmetic starts with a
// parenthesis, "(udp[10] & 0x78) >> 3 = 0", where the parenthesis could
// as well group tests, "(udp[10] & 0x80 = 0)": it tries the relation and
// gives the tokens back if it is not one.
func (p *parser) parenRelation() (node, bool) {
	pos, toks := p.pos, slices.Clone(p.toks)
	p.next()
	if !p.atRelation() && p.peek() != "(" {
		p.pos = pos
		return nil, false
	}
	p.pos = pos
	n, err := p.relationOf()
	if err != nil {
		p.pos, p.toks = pos, toks
		return nil, false
	}
	return n, true
}

func (p *parser) parsePrimitive() (node, error) {
	if p.atRelation() {
		return p.relationOf()
	}
	start := p.pos
	var q quals
	if protoWords[p.peek()] {
		q.proto = p.next()
	}
	if d := p.peek(); d == "src" || d == "dst" {
		q.dir = p.next()
		// "src or dst host X", "src and dst host X"
		if c := p.peek(); (c == "or" || c == "and") && p.pos+1 < len(p.toks) && p.toks[p.pos+1] == other(q.dir) {
			q.dir = "src " + c + " dst"
			p.pos += 2
		}
	}
	if typeWords[p.peek()] {
		q.typ = p.next()
	}
	switch {
	case q.proto == "" && q.dir == "" && q.typ == "":
		switch w := p.peek(); {
		case w == "icmp" || w == "icmp6":
			p.next()
			return p.protoAbbrev(w), nil
		case w == "vlan":
			p.next()
			return p.vlan()
		case keywords[w]:
			return nil, fmt.Errorf("unexpected %q", w)
		case p.last.set && isValue(w):
			// A bare value takes the qualifiers before it: "port 53 or 853".
			return p.value(p.last, p.next())
		}
		return nil, fmt.Errorf("%q: %w", p.peek(), errOutside)
	case q.typ == "" && q.dir == "":
		// A protocol alone: "ip", "tcp", "arp".
		if isValue(p.peek()) && !keywords[p.peek()] && !protoWords[p.peek()] {
			return nil, fmt.Errorf("%q after %q: %w", p.peek(), q.proto, errOutside)
		}
		return p.protoAbbrev(q.proto), nil
	case q.typ == "":
		q.typ = "host" // "src 192.0.2.1"
	}
	v := p.next()
	if v == "" || !isValue(v) {
		return nil, fmt.Errorf("%s: a value is missing after %q", strings.Join(p.toks[start:p.pos-1], " "), strings.Join(p.toks[start:p.pos-1], " "))
	}
	q.set = true
	p.last = q
	return p.value(q, v)
}

func other(dir string) string {
	if dir == "src" {
		return "dst"
	}
	return "src"
}

func isValue(w string) bool {
	return w != "" && strings.IndexByte(singleOps, w[0]) < 0 && !keywords[w] && !typeWords[w]
}

// value makes the test of a qualified value.
func (p *parser) value(q quals, v string) (node, error) {
	switch q.typ {
	case "host":
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("host %q: an IPv4 or IPv6 address (names are not resolved)", v)
		}
		return p.hostNet(q, netip.PrefixFrom(a, a.BitLen()))
	case "net":
		pre, err := parseNet(v)
		if err != nil {
			return nil, err
		}
		return p.hostNet(q, pre)
	case "port", "portrange":
		lo, hi, err := parsePorts(q.typ, v)
		if err != nil {
			return nil, err
		}
		return p.port(q, lo, hi)
	case "proto":
		n, err := strconv.ParseUint(v, 10, 8)
		if err != nil {
			return nil, fmt.Errorf("proto %q: a protocol number, 0 to 255", v)
		}
		switch q.proto {
		case "", "ip", "ip6":
		default:
			return nil, fmt.Errorf("%s proto: %w", q.proto, errOutside)
		}
		if q.dir != "" {
			return nil, fmt.Errorf("%s proto: %w", q.dir, errOutside)
		}
		return p.ipProto(q.proto, uint32(n)), nil
	}
	return nil, fmt.Errorf("%q: %w", v, errOutside)
}

func parseNet(v string) (netip.Prefix, error) {
	if strings.Contains(v, "/") {
		pre, err := netip.ParsePrefix(v)
		if err != nil {
			return pre, fmt.Errorf("net %q: want ADDRESS/BITS", v)
		}
		if pre.Masked() != pre {
			return pre, fmt.Errorf("net %q: host bits set beyond the /%d (libpcap refuses it too); write %s", v, pre.Bits(), pre.Masked())
		}
		return pre, nil
	}
	if a, err := netip.ParseAddr(v); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	// A partial IPv4 network: "10" is 10/8, "10.1" is 10.1/16.
	parts := strings.Split(v, ".")
	if len(parts) < 4 {
		var b [4]byte
		for i, s := range parts {
			n, err := strconv.ParseUint(s, 10, 8)
			if err != nil {
				return netip.Prefix{}, fmt.Errorf("net %q: an address, a prefix or the first octets of an IPv4 network", v)
			}
			b[i] = byte(n)
		}
		return netip.PrefixFrom(netip.AddrFrom4(b), 8*len(parts)), nil
	}
	return netip.Prefix{}, fmt.Errorf("net %q: an address, a prefix or the first octets of an IPv4 network", v)
}

func parsePorts(typ, v string) (uint32, uint32, error) {
	num := func(s string) (uint32, error) {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("%s %q: a port number, 0 to 65535 (service names are not looked up)", typ, v)
		}
		return uint32(n), nil
	}
	if typ == "port" {
		n, err := num(v)
		return n, n, err
	}
	a, b, ok := strings.Cut(v, "-")
	if !ok {
		return 0, 0, fmt.Errorf("portrange %q: want LOW-HIGH", v)
	}
	lo, err := num(a)
	if err != nil {
		return 0, 0, err
	}
	hi, err := num(b)
	if err != nil {
		return 0, 0, err
	}
	if lo > hi {
		lo, hi = hi, lo // as libpcap does
	}
	return lo, hi, nil
}

// etherType tests the link's protocol.
func (p *parser) etherType(t uint32) node {
	l := p.link
	switch {
	case l.only == 4:
		return constNode(t == etIPv4)
	case l.only == 6:
		return constNode(t == etIPv6)
	}
	if l.etOff < 0 { // raw IP: the version nibble
		switch t {
		case etIPv4:
			return atom{size: 1, off: 0, mask: 0xf0, cond: bpf.JumpEqual, val: 0x40}
		case etIPv6:
			return atom{size: 1, off: 0, mask: 0xf0, cond: bpf.JumpEqual, val: 0x60}
		}
		return constNode(false)
	}
	return eq(2, l.etOff+l.vlanOff, t)
}

func (p *parser) l3() int { return p.link.l3 + p.link.vlanOff }

func (p *parser) ipProto(version string, n uint32) node {
	l3 := p.l3()
	v4 := all(p.etherType(etIPv4), eq(1, l3+9, n))
	// libpcap also looks past one IPv6 fragment header.
	v6 := all(p.etherType(etIPv6), oneOf(eq(1, l3+6, n), all(eq(1, l3+6, protoFrag6), eq(1, l3+40, n))))
	switch version {
	case "ip":
		return v4
	case "ip6":
		return v6
	}
	return oneOf(v4, v6)
}

func (p *parser) protoAbbrev(w string) node {
	switch w {
	case "ip":
		return p.etherType(etIPv4)
	case "ip6":
		return p.etherType(etIPv6)
	case "arp":
		return p.etherType(etARP)
	case "rarp":
		return p.etherType(etRARP)
	case "tcp":
		return p.ipProto("", protoTCP)
	case "udp":
		return p.ipProto("", protoUDP)
	case "sctp":
		return p.ipProto("", protoSCTP)
	case "icmp":
		return p.ipProto("ip", protoICMP)
	case "icmp6":
		return p.ipProto("ip6", protoICMPv6)
	}
	panic("filter: unknown protocol " + w)
}

// dir combines the tests of the source and destination fields.
func dir(d string, src, dst node) node {
	switch d {
	case "src":
		return src
	case "dst":
		return dst
	case "src and dst":
		return all(src, dst)
	}
	return oneOf(src, dst)
}

// hostNet tests addresses: IPv4 in IP, ARP and RARP (as libpcap does
// without a protocol), IPv6 in IPv6.
func (p *parser) hostNet(q quals, pre netip.Prefix) (node, error) {
	l3 := p.l3()
	a := pre.Addr()
	if a.Is4() {
		mask := ^uint32(0) << (32 - pre.Bits())
		if pre.Bits() == 0 {
			mask = 0
		}
		v := be32(a.AsSlice()) & mask
		word := func(off int) node {
			at := eq(4, off, v)
			if mask != ^uint32(0) {
				at.mask = mask
				if mask == 0 {
					return constNode(true)
				}
			}
			return at
		}
		ip := all(p.etherType(etIPv4), dir(q.dir, word(l3+12), word(l3+16)))
		arpOf := func(et uint32) node { return all(p.etherType(et), dir(q.dir, word(l3+14), word(l3+24))) }
		switch q.proto {
		case "ip":
			return ip, nil
		case "arp":
			return arpOf(etARP), nil
		case "rarp":
			return arpOf(etRARP), nil
		case "":
			if !p.link.hasARP {
				return ip, nil
			}
			return oneOf(ip, all(oneOf(p.etherType(etARP), p.etherType(etRARP)), dir(q.dir, word(l3+14), word(l3+24)))), nil
		}
		return nil, fmt.Errorf("%s %s: %w", q.proto, q.typ, errOutside)
	}
	if q.proto != "" && q.proto != "ip6" {
		return nil, fmt.Errorf("%s %s with an IPv6 address: %w", q.proto, q.typ, errOutside)
	}
	b := a.As16()
	addr := func(off int) node {
		var words []node
		for i := range 4 {
			bits := pre.Bits() - 32*i
			if bits <= 0 {
				break
			}
			mask := ^uint32(0)
			if bits < 32 {
				mask <<= 32 - bits
			}
			at := eq(4, off+4*i, be32(b[4*i:])&mask)
			if mask != ^uint32(0) {
				at.mask = mask
			}
			words = append(words, at)
		}
		if len(words) == 0 {
			return constNode(true)
		}
		return all(words...)
	}
	return all(p.etherType(etIPv6), dir(q.dir, addr(l3+8), addr(l3+24))), nil
}

// port tests TCP, UDP and SCTP ports (or one of them): in IPv6 right
// after the fixed header, in IPv4 after its header in the first fragment.
func (p *parser) port(q quals, lo, hi uint32) (node, error) {
	protos := []uint32{protoSCTP, protoTCP, protoUDP}
	switch q.proto {
	case "":
	case "tcp":
		protos = []uint32{protoTCP}
	case "udp":
		protos = []uint32{protoUDP}
	case "sctp":
		protos = []uint32{protoSCTP}
	default:
		return nil, fmt.Errorf("%s %s: %w", q.proto, q.typ, errOutside)
	}
	l3 := p.l3()
	in := func(a atom) node {
		if lo == hi {
			a.cond, a.val = bpf.JumpEqual, lo
			return a
		}
		ge, gt := a, a
		ge.cond, ge.val = bpf.JumpGreaterOrEqual, lo
		gt.cond, gt.val = bpf.JumpGreaterThan, hi
		return all(ge, notNode{gt})
	}
	var v4p, v6p []node
	for _, n := range protos {
		v4p = append(v4p, eq(1, l3+9, n))
		v6p = append(v6p, eq(1, l3+6, n))
	}
	v6 := all(p.etherType(etIPv6), oneOf(v6p...),
		dir(q.dir, in(atom{size: 2, off: l3 + 40}), in(atom{size: 2, off: l3 + 42})))
	v4 := all(p.etherType(etIPv4), oneOf(v4p...),
		notNode{atom{size: 2, off: l3 + 6, cond: bpf.JumpBitsSet, val: 0x1fff}},
		dir(q.dir, in(atom{size: 2, off: l3, afterIPv4: true, ipOff: l3}), in(atom{size: 2, off: l3 + 2, afterIPv4: true, ipOff: l3})))
	return oneOf(v6, v4), nil
}

// vlan tests for an 802.1Q tag (and its ID); what follows it in the
// expression looks past the tag, as in libpcap.
func (p *parser) vlan() (node, error) {
	if !p.link.vlanOK {
		return nil, fmt.Errorf("vlan on %s frames: %w", p.link.name, errOutside)
	}
	et := p.link.etOff + p.link.vlanOff
	n := oneOf(eq(2, et, 0x8100), eq(2, et, 0x88a8), eq(2, et, 0x9100))
	if v := p.peek(); isValue(v) && !protoWords[v] {
		id, err := strconv.ParseUint(v, 10, 12)
		if err != nil {
			return nil, fmt.Errorf("vlan %q: a VLAN ID, 0 to 4095", v)
		}
		p.next()
		n = all(n, atom{size: 2, off: et + 2, mask: 0xfff, cond: bpf.JumpEqual, val: uint32(id)})
	}
	p.link.vlanOff += 4
	return n, nil
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

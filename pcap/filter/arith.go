package filter

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/bpf"
)

// Relations compare arithmetic over packet bytes, as libpcap's do:
// "udp[10] & 0x80 = 0", "ip[6:2] & 0x1fff != 0", "len > 512". A load
// names a protocol whose header its offset counts from, and tests that
// the packet is of it (tcp[13] holds only for TCP in IPv4, and not in a
// fragment after the first: libpcap's meaning); the relation holds when
// every such test and the comparison do.

// expr is an arithmetic expression, emitted into the accumulator.
type expr interface {
	// emit loads the value into A, using the scratch slots from depth on.
	emit(g *gen, depth int)
	// depth is how many scratch slots emit uses.
	depth() int
}

type num uint32

func (n num) emit(g *gen, _ int) {
	g.ins = append(g.ins, item{op: bpf.LoadConstant{Dst: bpf.RegA, Val: uint32(n)}})
}
func (num) depth() int { return 0 }

type pktLen struct{}

func (pktLen) emit(g *gen, _ int) {
	g.ins = append(g.ins, item{op: bpf.LoadExtension{Num: bpf.ExtLen}})
}
func (pktLen) depth() int { return 0 }

// load is proto[off:size]: size bytes at off past base, or past the
// IPv4 header (whose length it reads) at base when afterIPv4.
type load struct {
	off       expr
	size      int
	base      int
	afterIPv4 bool
}

func (l load) emit(g *gen, depth int) {
	if k, ok := l.off.(num); ok {
		if l.afterIPv4 {
			g.ins = append(g.ins, item{op: bpf.LoadMemShift{Off: uint32(l.base)}},
				item{op: bpf.LoadIndirect{Off: uint32(l.base) + uint32(k), Size: l.size}})
			return
		}
		g.ins = append(g.ins, item{op: bpf.LoadAbsolute{Off: uint32(l.base) + uint32(k), Size: l.size}})
		return
	}
	l.off.emit(g, depth)
	if l.afterIPv4 {
		g.ins = append(g.ins, item{op: bpf.LoadMemShift{Off: uint32(l.base)}}, item{op: bpf.ALUOpX{Op: bpf.ALUOpAdd}})
	}
	g.ins = append(g.ins, item{op: bpf.TAX{}}, item{op: bpf.LoadIndirect{Off: uint32(l.base), Size: l.size}})
}
func (l load) depth() int { return l.off.depth() }

type binary struct {
	op   bpf.ALUOp
	a, b expr
}

func (e binary) emit(g *gen, depth int) {
	if k, ok := e.b.(num); ok {
		e.a.emit(g, depth)
		g.ins = append(g.ins, item{op: bpf.ALUOpConstant{Op: e.op, Val: uint32(k)}})
		return
	}
	e.b.emit(g, depth)
	g.ins = append(g.ins, item{op: bpf.StoreScratch{Src: bpf.RegA, N: depth}})
	e.a.emit(g, depth+1)
	g.ins = append(g.ins, item{op: bpf.LoadScratch{Dst: bpf.RegX, N: depth}}, item{op: bpf.ALUOpX{Op: e.op}})
}

func (e binary) depth() int {
	if _, ok := e.b.(num); ok {
		return e.a.depth()
	}
	return max(e.b.depth(), 1+e.a.depth())
}

type negate struct{ a expr }

func (e negate) emit(g *gen, depth int) {
	// 0 - A rather than BPF's negation, which golang.org/x/net/bpf's VM
	// (the matcher of files) does not run.
	e.a.emit(g, depth)
	g.ins = append(g.ins, item{op: bpf.TAX{}}, item{op: bpf.LoadConstant{Dst: bpf.RegA, Val: 0}}, item{op: bpf.ALUOpX{Op: bpf.ALUOpSub}})
}
func (e negate) depth() int { return e.a.depth() }

// relation is a comparison of two expressions.
type relation struct {
	a, b expr
	cond bpf.JumpTest
}

func (r relation) emit(g *gen, t, f label) {
	if k, ok := r.b.(num); ok {
		r.a.emit(g, 0)
		g.ins = append(g.ins, item{isJump: true, cond: r.cond, val: uint32(k), t: t, f: f})
		return
	}
	r.b.emit(g, 0)
	g.ins = append(g.ins, item{op: bpf.StoreScratch{Src: bpf.RegA, N: 0}})
	r.a.emit(g, 1)
	g.ins = append(g.ins, item{op: bpf.LoadScratch{Dst: bpf.RegX, N: 0}}, item{isJump: true, useX: true, cond: r.cond, t: t, f: f})
}

// scratchSlots is how many memory slots classic BPF has.
const scratchSlots = 16

var relops = map[string]bpf.JumpTest{
	"=": bpf.JumpEqual, "==": bpf.JumpEqual, "!=": bpf.JumpNotEqual,
	">": bpf.JumpGreaterThan, ">=": bpf.JumpGreaterOrEqual, "<": bpf.JumpLessThan, "<=": bpf.JumpLessOrEqual,
}

// The binary operators by precedence, loosest first, as libpcap's
// grammar binds them.
var precedence = []map[string]bpf.ALUOp{
	{"|": bpf.ALUOpOr, "^": bpf.ALUOpXor},
	{"&": bpf.ALUOpAnd},
	{"<<": bpf.ALUOpShiftLeft, ">>": bpf.ALUOpShiftRight},
	{"+": bpf.ALUOpAdd, "-": bpf.ALUOpSub},
	{"*": bpf.ALUOpMul, "/": bpf.ALUOpDiv, "%": bpf.ALUOpMod},
}

// namedConstants are libpcap's names for header fields' offsets and
// values.
var namedConstants = map[string]uint32{
	"icmptype": 0, "icmpcode": 1,
	"icmp-echoreply": 0, "icmp-unreach": 3, "icmp-sourcequench": 4, "icmp-redirect": 5, "icmp-echo": 8,
	"icmp-routeradvert": 9, "icmp-routersolicit": 10, "icmp-timxceed": 11, "icmp-paramprob": 12,
	"icmp-tstamp": 13, "icmp-tstampreply": 14, "icmp-ireq": 15, "icmp-ireqreply": 16, "icmp-maskreq": 17, "icmp-maskreply": 18,
	"icmp6type": 0, "icmp6code": 1,
	"icmp6-destinationunreach": 1, "icmp6-packettoobig": 2, "icmp6-timeexceeded": 3, "icmp6-parameterproblem": 4,
	"icmp6-echo": 128, "icmp6-echoreply": 129, "icmp6-routersolicit": 133, "icmp6-routeradvert": 134,
	"icmp6-neighborsolicit": 135, "icmp6-neighboradvert": 136, "icmp6-redirect": 137,
	"tcpflags": 13, "tcp-fin": 0x01, "tcp-syn": 0x02, "tcp-rst": 0x04, "tcp-push": 0x08,
	"tcp-ack": 0x10, "tcp-urg": 0x20, "tcp-ece": 0x40, "tcp-cwr": 0x80,
}

// loadProtos are the protocols a load may name.
var loadProtos = map[string]bool{
	"ether": true, "link": true, "ip": true, "ip6": true, "arp": true, "rarp": true,
	"tcp": true, "udp": true, "sctp": true, "icmp": true, "icmp6": true, "igmp": true,
}

// atRelation reports whether the primitive at hand is a relation.
func (p *parser) atRelation() bool {
	w := p.peek()
	next := ""
	if p.pos+1 < len(p.toks) {
		next = p.toks[p.pos+1]
	}
	switch {
	case loadProtos[w] && next == "[":
		return true
	case w == "len" || strings.HasPrefix(w, "-"):
		return true
	}
	if _, named := namedConstants[w]; named || isNumber(w) {
		_, rel := relops[next]
		return rel || isArithOp(next)
	}
	return false
}

func isNumber(w string) bool {
	_, err := strconv.ParseUint(w, 0, 32)
	return err == nil
}

func isArithOp(w string) bool {
	for _, level := range precedence {
		if _, ok := level[w]; ok {
			return true
		}
	}
	return false
}

// relationOf parses "arith relop arith". The tests of the protocols its
// loads name come first.
func (p *parser) relationOf() (node, error) {
	var guards []node
	a, err := p.arith(0, &guards)
	if err != nil {
		return nil, err
	}
	op := p.next()
	cond, ok := relops[op]
	if !ok {
		if op == "" {
			return nil, fmt.Errorf("a comparison (=, !=, <, <=, >, >=) is missing after the arithmetic")
		}
		return nil, fmt.Errorf("%q where a comparison (=, !=, <, <=, >, >=) should be", op)
	}
	b, err := p.arith(0, &guards)
	if err != nil {
		return nil, err
	}
	if max(b.depth(), 1+a.depth()) > scratchSlots {
		return nil, fmt.Errorf("the arithmetic is nested too deeply for BPF's %d scratch slots; simplify it", scratchSlots)
	}
	return all(append(guards, relation{a: a, b: b, cond: cond})...), nil
}

// arith parses the binary operators of precedence level and tighter.
func (p *parser) arith(level int, guards *[]node) (expr, error) {
	if level == len(precedence) {
		return p.unary(guards)
	}
	a, err := p.arith(level+1, guards)
	if err != nil {
		return nil, err
	}
	for {
		op, ok := precedence[level][p.arithPeek()]
		if !ok {
			return a, nil
		}
		w := p.next()
		b, err := p.arith(level+1, guards)
		if err != nil {
			return nil, err
		}
		if a, err = fold(w, op, a, b); err != nil {
			return nil, err
		}
	}
}

// fold combines two operands, computing constants as libpcap does and
// refusing what the kernel would.
func fold(w string, op bpf.ALUOp, a, b expr) (expr, error) {
	k, constant := b.(num)
	switch {
	case constant && k == 0 && (op == bpf.ALUOpDiv || op == bpf.ALUOpMod):
		return nil, fmt.Errorf("%s 0: division by zero", w)
	case constant && k > 31 && (op == bpf.ALUOpShiftLeft || op == bpf.ALUOpShiftRight):
		return nil, fmt.Errorf("%s %d: a shift by more than 31 bits", w, k)
	}
	if x, ok := a.(num); ok && constant {
		return num(aluConst(op, uint32(x), uint32(k))), nil
	}
	return binary{op: op, a: a, b: b}, nil
}

func aluConst(op bpf.ALUOp, a, b uint32) uint32 {
	switch op {
	case bpf.ALUOpAdd:
		return a + b
	case bpf.ALUOpSub:
		return a - b
	case bpf.ALUOpMul:
		return a * b
	case bpf.ALUOpDiv:
		return a / b
	case bpf.ALUOpMod:
		return a % b
	case bpf.ALUOpOr:
		return a | b
	case bpf.ALUOpAnd:
		return a & b
	case bpf.ALUOpXor:
		return a ^ b
	case bpf.ALUOpShiftLeft:
		return a << b
	case bpf.ALUOpShiftRight:
		return a >> b
	}
	panic("filter: unknown ALU operation")
}

// unary parses a number, a name, len, a load, a negation or
// parentheses.
func (p *parser) unary(guards *[]node) (expr, error) {
	w := p.arithPeek()
	switch {
	case w == "":
		return nil, fmt.Errorf("the expression ends where a value should be")
	case w == "-":
		p.next()
		a, err := p.unary(guards)
		if err != nil {
			return nil, err
		}
		if k, ok := a.(num); ok {
			return -k, nil
		}
		return negate{a}, nil
	case w == "(":
		p.next()
		a, err := p.arith(0, guards)
		if err != nil {
			return nil, err
		}
		if p.next() != ")" {
			return nil, fmt.Errorf("a ( in the arithmetic is not closed")
		}
		return a, nil
	case w == "len":
		p.next()
		return pktLen{}, nil
	case loadProtos[w] && p.pos+1 < len(p.toks) && p.toks[p.pos+1] == "[":
		return p.load(guards)
	}
	p.next()
	if k, ok := namedConstants[w]; ok {
		return num(k), nil
	}
	n, err := strconv.ParseUint(w, 0, 32)
	if err != nil {
		return nil, fmt.Errorf("%q: a number (decimal, 0x hex or 0 octal), len, or PROTO[OFFSET:SIZE] where a value should be", w)
	}
	return num(n), nil
}

// load parses proto[offset] or proto[offset:size].
func (p *parser) load(guards *[]node) (expr, error) {
	proto := p.next()
	p.next() // [
	off, err := p.arith(0, guards)
	if err != nil {
		return nil, err
	}
	size := 1
	if p.arithPeek() == ":" {
		p.next()
		w := p.next()
		n, err := strconv.Atoi(w)
		if err != nil || n != 1 && n != 2 && n != 4 {
			return nil, fmt.Errorf("%s[…:%s]: the size of a load is 1, 2 or 4 bytes", proto, w)
		}
		size = n
	}
	if w := p.next(); w != "]" {
		return nil, fmt.Errorf("%s[: a ] is missing (found %q)", proto, w)
	}
	l := load{off: off, size: size}
	l3 := p.l3()
	var guard node
	switch proto {
	case "ether", "link":
		// From the start of the frame, whatever the link.
	case "ip":
		l.base, guard = l3, p.etherType(etIPv4)
	case "ip6":
		l.base, guard = l3, p.etherType(etIPv6)
	case "arp":
		l.base, guard = l3, p.etherType(etARP)
	case "rarp":
		l.base, guard = l3, p.etherType(etRARP)
	case "icmp6":
		// After the fixed IPv6 header, as libpcap counts it.
		l.base, guard = l3+40, p.ipProto("ip6", protoICMPv6)
	default:
		// The transport protocols of IPv4 only, in the first fragment,
		// after the header's own length.
		n := map[string]uint32{"tcp": protoTCP, "udp": protoUDP, "sctp": protoSCTP, "icmp": protoICMP, "igmp": protoIGMP}[proto]
		l.base, l.afterIPv4 = l3, true
		guard = all(p.etherType(etIPv4), eq(1, l3+9, n), notNode{atom{size: 2, off: l3 + 6, cond: bpf.JumpBitsSet, val: 0x1fff}})
	}
	if guard != nil {
		*guards = append(*guards, guard)
	}
	return l, nil
}

// arithPeek is peek for arithmetic, where a word the lexer kept whole
// for addresses and ranges ("6:2", "len-14", "2/4") holds operators: it
// is split in place, unless it is one of libpcap's names.
func (p *parser) arithPeek() string {
	w := p.peek()
	if len(w) < 2 || !strings.ContainsAny(w, "-/:") {
		return w
	}
	if _, named := namedConstants[w]; named {
		return w
	}
	var parts []string
	start := 0
	for i := 0; i < len(w); i++ {
		if strings.IndexByte("-/:", w[i]) >= 0 {
			if i > start {
				parts = append(parts, w[start:i])
			}
			parts = append(parts, w[i:i+1])
			start = i + 1
		}
	}
	if start < len(w) {
		parts = append(parts, w[start:])
	}
	p.toks = slices.Replace(p.toks, p.pos, p.pos+1, parts...)
	return p.peek()
}

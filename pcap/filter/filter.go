// Package filter compiles capture filters in tcpdump's syntax to classic
// BPF, in pure Go: the program a socket takes (so the kernel drops what is
// not wanted) and a matcher for frames read from files.
//
// It compiles the subset sites use to pick DNS out of a link: host, net,
// port, portrange and proto with src/dst, the protocols ip, ip6, arp,
// rarp, tcp, udp, sctp, icmp and icmp6, vlan, relations over packet
// bytes (proto[offset:size] with arithmetic, len, and libpcap's names
// such as tcpflags and tcp-syn: "udp[10] & 0x80 = 0"), and and/or/not
// with parentheses, with libpcap's meaning of each (host matches ARP too, port
// means TCP, UDP or SCTP and skips IPv4 fragments after the first, and and
// or bind equally, left to right; a bare value takes the qualifiers before
// it, as in "port 53 or 853"). Anything else is refused with an error
// naming it, never widened: a filter that would let more through than the
// operator wrote is worse than none.
package filter

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"
)

// Filter is a compiled filter for one link type. Its methods are safe
// to call at once.
type Filter struct {
	expr string
	prog []bpf.RawInstruction
	vm   *bpf.VM
	// ins is the program as instructions, and usesLen whether it reads
	// the packet's length, which a cut frame has two of (MatchLen).
	ins     []bpf.Instruction
	usesLen bool
	mu      sync.Mutex
	byLen   map[int]*bpf.VM // the program with len fixed, by wire length
}

// snapAccept is what the program returns for a packet it keeps: the whole
// packet (tcpdump's default snap length).
const snapAccept = 262144

// Compile compiles expr for frames of the link type. An empty expression
// keeps everything.
func Compile(expr string, link layers.LinkType) (*Filter, error) {
	li, err := linkInfo(link)
	if err != nil {
		return nil, fmt.Errorf("filter %q: %w", expr, err)
	}
	p := &parser{expr: expr, link: li}
	if err := p.lex(); err != nil {
		return nil, fmt.Errorf("filter %q: %w", expr, err)
	}
	var root node = constNode(true)
	if len(p.toks) > 0 {
		root, err = p.parseExpr()
		if err == nil && p.pos < len(p.toks) {
			err = fmt.Errorf("unexpected %q", p.toks[p.pos])
		}
		if err != nil {
			return nil, fmt.Errorf("filter %q: %w", expr, err)
		}
	}
	var g gen
	accept, reject := g.label(), g.label()
	root.emit(&g, accept, reject)
	g.bind(accept)
	g.ins = append(g.ins, item{op: bpf.RetConstant{Val: snapAccept}})
	g.bind(reject)
	g.ins = append(g.ins, item{op: bpf.RetConstant{Val: 0}})
	prog, err := g.assemble()
	if err != nil {
		return nil, fmt.Errorf("filter %q: %w", expr, err)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("filter %q: %w", expr, err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		return nil, fmt.Errorf("filter %q: %w", expr, err)
	}
	f := &Filter{expr: expr, prog: raw, vm: vm, ins: prog}
	f.usesLen = slices.ContainsFunc(prog, func(in bpf.Instruction) bool {
		ext, ok := in.(bpf.LoadExtension)
		return ok && ext.Num == bpf.ExtLen
	})
	return f, nil
}

// String is the expression.
func (f *Filter) String() string { return f.expr }

// Program is the classic BPF program, for a socket (SO_ATTACH_FILTER).
func (f *Filter) Program() []bpf.RawInstruction { return f.prog }

// Match reports whether the filter keeps a frame, as the kernel would:
// a load beyond the frame's captured bytes rejects it.
func (f *Filter) Match(frame []byte) bool {
	n, err := f.vm.Run(frame)
	return err == nil && n > 0
}

// maxLenVMs bounds the programs MatchLen keeps, one per wire length.
const maxLenVMs = 512

// MatchLen is Match for a frame of a capture file, cut to its captured
// bytes from length on the wire: len in the filter is length, as
// tcpdump reads a file, while loads past the captured bytes still
// reject the frame.
func (f *Filter) MatchLen(frame []byte, length int) bool {
	if !f.usesLen || length <= len(frame) {
		return f.Match(frame)
	}
	f.mu.Lock()
	vm := f.byLen[length]
	f.mu.Unlock()
	if vm == nil {
		ins := slices.Clone(f.ins)
		for i, in := range ins {
			if ext, ok := in.(bpf.LoadExtension); ok && ext.Num == bpf.ExtLen {
				ins[i] = bpf.LoadConstant{Dst: bpf.RegA, Val: uint32(length)}
			}
		}
		var err error
		if vm, err = bpf.NewVM(ins); err != nil {
			return false // it compiled once; only the constant differs
		}
		f.mu.Lock()
		if f.byLen == nil {
			f.byLen = map[int]*bpf.VM{}
		}
		if len(f.byLen) < maxLenVMs {
			f.byLen[length] = vm
		}
		f.mu.Unlock()
	}
	n, err := vm.Run(frame)
	return err == nil && n > 0
}

// link is where a link type puts the network layer: the offset of the
// EtherType (-1 when there is none: raw IP) and of the IP header.
type link struct {
	name    string
	etOff   int
	l3      int
	vlanOK  bool
	hasARP  bool
	vlanOff int // bytes of VLAN tags a vlan primitive has added
	only    int // 4 or 6 for links that carry one IP version only
}

func linkInfo(t layers.LinkType) (link, error) {
	switch t {
	case layers.LinkTypeEthernet:
		return link{name: "Ethernet", etOff: 12, l3: 14, vlanOK: true, hasARP: true}, nil
	case layers.LinkTypeLinuxSLL:
		return link{name: "Linux cooked", etOff: 14, l3: 16, hasARP: true}, nil
	case layers.LinkTypeLinuxSLL2:
		return link{name: "Linux cooked v2", etOff: 0, l3: 20, hasARP: true}, nil
	case layers.LinkTypeRaw, 12, 14:
		return link{name: "raw IP", etOff: -1, l3: 0}, nil
	case layers.LinkTypeIPv4:
		return link{name: "raw IPv4", etOff: -1, l3: 0, only: 4}, nil
	case layers.LinkTypeIPv6:
		return link{name: "raw IPv6", etOff: -1, l3: 0, only: 6}, nil
	}
	return link{}, fmt.Errorf("link type %s (%d) has no filter compiler here; use Ethernet, Linux cooked or raw IP captures", t, int(t))
}

// errOutside is the refusal of syntax outside the compiled subset.
var errOutside = errors.New("outside the filter syntax Plumb compiles (host, net, port, portrange, proto; src, dst; ip, ip6, arp, rarp, tcp, udp, sctp, icmp, icmp6; vlan; relations such as udp[10] & 0x80 = 0 or len > 512; and, or, not, parentheses)")

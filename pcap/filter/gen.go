package filter

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// The program is built from a tree of tests, each emitted with the labels
// to go to when it holds and when it does not; jumps are resolved to BPF's
// forward offsets at the end.

type label int

type item struct {
	op     bpf.Instruction // a plain instruction, when cond is unset
	cond   bpf.JumpTest
	isJump bool
	useX   bool // compare A with X, not with val
	always bool // an unconditional jump to t
	val    uint32
	t, f   label
}

type gen struct {
	ins    []item
	labels []int // instruction index of each label, -1 until bound
}

func (g *gen) label() label {
	g.labels = append(g.labels, -1)
	return label(len(g.labels) - 1)
}

func (g *gen) bind(l label) { g.labels[l] = len(g.ins) }

func (g *gen) assemble() ([]bpf.Instruction, error) {
	out := make([]bpf.Instruction, len(g.ins))
	for i, it := range g.ins {
		switch {
		case it.always:
			skip := g.labels[it.t] - i - 1
			if skip < 0 {
				return nil, fmt.Errorf("internal error: backward jump")
			}
			out[i] = bpf.Jump{Skip: uint32(skip)}
		case it.isJump:
			t, f := g.labels[it.t]-i-1, g.labels[it.f]-i-1
			if t < 0 || f < 0 {
				return nil, fmt.Errorf("internal error: backward jump")
			}
			if t > 255 || f > 255 {
				return nil, fmt.Errorf("the filter compiles to too long a program; make it shorter")
			}
			if it.useX {
				out[i] = bpf.JumpIfX{Cond: it.cond, SkipTrue: uint8(t), SkipFalse: uint8(f)}
			} else {
				out[i] = bpf.JumpIf{Cond: it.cond, Val: it.val, SkipTrue: uint8(t), SkipFalse: uint8(f)}
			}
		default:
			out[i] = it.op
		}
	}
	if len(out) > 4096 { // the kernel's BPF_MAXINSNS
		return nil, fmt.Errorf("the filter compiles to %d instructions; make it shorter", len(out))
	}
	return out, nil
}

// node is a test.
type node interface {
	emit(g *gen, t, f label)
}

type andNode struct{ a, b node }
type orNode struct{ a, b node }
type notNode struct{ a node }
type constNode bool

func (n andNode) emit(g *gen, t, f label) {
	m := g.label()
	n.a.emit(g, m, f)
	g.bind(m)
	n.b.emit(g, t, f)
}

func (n orNode) emit(g *gen, t, f label) {
	m := g.label()
	n.a.emit(g, t, m)
	g.bind(m)
	n.b.emit(g, t, f)
}

func (n notNode) emit(g *gen, t, f label) { n.a.emit(g, f, t) }

func (n constNode) emit(g *gen, t, f label) {
	to := f
	if n {
		to = t
	}
	g.ins = append(g.ins, item{always: true, t: to})
}

// atom loads size bytes at off (after the IPv4 header's length when
// afterIPv4 is set, with the header at ipOff), masks them, and compares.
type atom struct {
	size      int
	off       int
	afterIPv4 bool
	ipOff     int
	mask      uint32
	cond      bpf.JumpTest
	val       uint32
}

func (a atom) emit(g *gen, t, f label) {
	if a.afterIPv4 {
		g.ins = append(g.ins, item{op: bpf.LoadMemShift{Off: uint32(a.ipOff)}},
			item{op: bpf.LoadIndirect{Off: uint32(a.off), Size: a.size}})
	} else {
		g.ins = append(g.ins, item{op: bpf.LoadAbsolute{Off: uint32(a.off), Size: a.size}})
	}
	if a.mask != 0 {
		g.ins = append(g.ins, item{op: bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: a.mask}})
	}
	g.ins = append(g.ins, item{isJump: true, cond: a.cond, val: a.val, t: t, f: f})
}

func all(ns ...node) node {
	n := ns[0]
	for _, m := range ns[1:] {
		n = andNode{n, m}
	}
	return n
}

func oneOf(ns ...node) node {
	n := ns[0]
	for _, m := range ns[1:] {
		n = orNode{n, m}
	}
	return n
}

func eq(size, off int, val uint32) atom {
	return atom{size: size, off: off, cond: bpf.JumpEqual, val: val}
}

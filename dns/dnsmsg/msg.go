// Package dnsmsg reads the fields of a DNS message that measurement needs
// (header, first question, EDNS) straight from wire bytes, without
// allocating for the sections it skips. It never trusts the message: every
// length and pointer is checked, and a malformed message still yields
// whatever was read before the fault.
package dnsmsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/plumb-dev/plumb/internal/addrtext"
)

// HeaderLen is the size of the fixed DNS header.
const HeaderLen = 12

// Message is what Parse reads from a message.
type Message struct {
	ID                     uint16
	QR                     bool
	Opcode                 uint8
	AA, TC, RD, RA, AD, CD bool
	// Rcode includes the EDNS extended bits when an OPT record is present.
	Rcode                              uint16
	QDCount, ANCount, NSCount, ARCount uint16

	// The first question, when there is one.
	HasQuestion bool
	QName       string // lower-cased presentation form without the final dot ("example.com"); "." for the root
	QNameRaw    string // as sent: the case kept (0x20 randomisation shows), without the final dot
	QType       uint16
	QClass      uint16

	// The records of each section; Additional leaves out the OPT record,
	// whose fields are below.
	Answer, Authority, Additional []RR

	// EDNS, from the OPT record of the additional section.
	EDNS        bool
	EDNSVersion uint8
	UDPSize     uint16
	DO          bool
	EDNSOptions bool // the OPT record carries at least one option
	Options     []Option
	ECS         ECS   // the client subnet option; Family 0 when absent
	EDE         []EDE // extended errors
	Cookie      bool  // a DNS cookie option is present
}

// ErrMalformed marks a message that cannot be read whole; the error says
// where and why.
var ErrMalformed = errors.New("malformed DNS message")

func malformed(off int, format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", ErrMalformed, off, fmt.Sprintf(format, args...))
}

// Types Parse looks at.
const (
	TypeOPT = 41
)

// Parse reads a message. On error the returned Message holds the fields
// read before the fault (the header whenever there are 12 bytes).
//
// The strings of a message (names, rdata) share one allocation: a
// referral carries a dozen of them, and one allocation each was most of
// the cost of reading it. So a string kept from a Message keeps the
// text of the whole message alive, a few hundred bytes.
func Parse(b []byte) (Message, error) {
	var p Parser
	return p.Parse(b)
}

// Check reports whether b reads as a whole message, as Parse would,
// without keeping what it reads: the header, the question and the
// records' names and lengths are walked, not made into strings.
func Check(b []byte) error {
	var p Parser
	return p.Check(b)
}

// Check reports what the function Check does, with the Parser's scratch
// space: a TCP reassembler checks the first message of every stream,
// and on a busy server each stream carries one message.
func (p *Parser) Check(b []byte) error {
	p.names.reset(p.uncached)
	r := reader{text: p.text[:0], spans: p.spans[:0], slab: p.slab, skip: AllSections, names: &p.names}
	err := r.parse(b)
	p.text, p.spans, p.slab = r.text, r.spans, r.slab
	return err
}

// A Parser reads messages as Parse does, keeping its scratch space from
// one message to the next. The zero value is ready; it is not for
// concurrent use.
type Parser struct {
	// Skip names the record sections not to read: their records are
	// stepped over (an OPT record is still found), which is most of
	// the cost of reading a signed zone's responses.
	Skip  Sections
	text  []byte
	spans []span
	slab  []RR // where the next messages' records go
	names names
	// uncached reads every name label by label, for tests to compare
	// with what the names remembered give.
	uncached bool
}

// Sections is a set of a message's record sections.
type Sections uint8

// The record sections.
const (
	Answer Sections = 1 << iota
	Authority
	Additional
	AllSections = Answer | Authority | Additional
)

// Parse reads a message; see the function Parse.
func (p *Parser) Parse(b []byte) (Message, error) {
	p.names.reset(p.uncached)
	r := reader{text: p.text[:0], spans: p.spans[:0], slab: p.slab, skip: p.Skip, names: &p.names}
	err := r.parse(b)
	r.finish()
	p.text, p.spans, p.slab = r.text, r.spans, r.slab
	return r.m, err
}

// span is a string of a message being read: text[from:to].
type span struct{ from, to int32 }

// reader reads one message, writing its strings into text.
type reader struct {
	m       Message
	text    []byte
	spans   []span // of each record read: its name, then its data
	rrs     []RR   // the records read, their strings set by finish
	slab    []RR   // the Parser's, left to the next messages
	slabbed bool   // rrs is at the start of slab
	sec     [2]int // where the authority and additional records start in rrs
	qname   span   // lower-cased
	qraw    span   // as sent
	skip    Sections
	names   *names
}

// mark returns the span of text written since from.
func (p *reader) mark(from int) span { return span{int32(from), int32(len(p.text))} }

func (p *reader) parse(b []byte) error {
	m := &p.m
	// A message cut short keeps the header fields its bytes hold (the id
	// of a 2-byte message, the flags of a 4-byte one...), the rest 0.
	var h [HeaderLen]byte
	copy(h[:], b)
	m.ID = binary.BigEndian.Uint16(h[0:])
	flags := binary.BigEndian.Uint16(h[2:])
	m.QR = flags&0x8000 != 0
	m.Opcode = uint8(flags>>11) & 0xf
	m.AA = flags&0x0400 != 0
	m.TC = flags&0x0200 != 0
	m.RD = flags&0x0100 != 0
	m.RA = flags&0x0080 != 0
	m.AD = flags&0x0020 != 0
	m.CD = flags&0x0010 != 0
	m.Rcode = flags & 0xf
	m.QDCount = binary.BigEndian.Uint16(h[4:])
	m.ANCount = binary.BigEndian.Uint16(h[6:])
	m.NSCount = binary.BigEndian.Uint16(h[8:])
	m.ARCount = binary.BigEndian.Uint16(h[10:])
	if len(b) < HeaderLen {
		return malformed(len(b), "message of %d bytes is shorter than the 12-byte header; the fields its bytes hold are kept", len(b))
	}

	off := HeaderLen
	for i := 0; i < int(m.QDCount); i++ {
		mode, from := nameSkip, len(p.text)
		if i == 0 {
			mode = nameRaw
		}
		var next int
		var err error
		known := len(p.names.at)
		if p.text, next, err = p.names.read(b, off, p.text, mode); err != nil {
			p.text = p.text[:from]
			return err
		}
		if next+4 > len(b) {
			p.text = p.text[:from]
			return malformed(next, "question %d ends before its type and class", i+1)
		}
		if i == 0 {
			m.HasQuestion = true
			p.qraw = p.mark(from)
			p.qname = p.lower(p.qraw)
			p.names.lowered(known)
			m.QType = binary.BigEndian.Uint16(b[next:])
			m.QClass = binary.BigEndian.Uint16(b[next+2:])
		}
		off = next + 4
	}
	an, rrs := int(m.ANCount), int(m.ANCount)+int(m.NSCount)
	p.sec = [2]int{-1, -1}
	for i := 0; i < rrs+int(m.ARCount); i++ {
		sec := Additional
		switch {
		case i < an:
			sec = Answer
		case i < rrs:
			sec = Authority
		}
		mode := nameLower
		if p.skip&sec != 0 {
			mode = nameSkip
		}
		from := len(p.text)
		text, next, err := p.names.read(b, off, p.text, mode)
		if err != nil {
			p.text = p.text[:from]
			return err
		}
		p.text = text
		if next+10 > len(b) {
			p.text = p.text[:from]
			return malformed(next, "record %d ends inside its fixed fields", i+1)
		}
		typ := binary.BigEndian.Uint16(b[next:])
		class := binary.BigEndian.Uint16(b[next+2:])
		ttl := binary.BigEndian.Uint32(b[next+4:])
		rdlen := int(binary.BigEndian.Uint16(b[next+8:]))
		rdata := next + 10
		if rdata+rdlen > len(b) {
			p.text = p.text[:from]
			return malformed(rdata, "record %d claims %d bytes of data; %d remain", i+1, rdlen, len(b)-rdata)
		}
		switch {
		case i >= rrs && typ == TypeOPT && !m.EDNS:
			p.text = p.text[:from]
			m.EDNS = true
			m.UDPSize = class
			m.Rcode |= uint16(ttl>>24) << 4
			m.EDNSVersion = uint8(ttl >> 16)
			m.DO = ttl&0x8000 != 0
			m.EDNSOptions = rdlen > 0
			m.options(b[rdata : rdata+rdlen])
		case typ == TypeOPT && i >= rrs:
			p.text = p.text[:from] // a second OPT record is malformed; the first stands
		case p.skip&sec != 0:
		default:
			owner := p.same(p.mark(from))
			from = len(p.text)
			p.text = appendRData(p.text, b, rdata, rdlen, typ, p.names)
			p.spans = append(p.spans, owner, p.mark(from))
			switch {
			case i >= rrs && p.sec[1] < 0:
				p.sec[1] = len(p.rrs)
			case i >= an && i < rrs && p.sec[0] < 0:
				p.sec[0] = len(p.rrs)
			}
			if p.rrs == nil {
				p.rrs = p.records(min(rrs+int(m.ARCount)-i, (len(b)-off)/minRR))
			}
			p.rrs = append(p.rrs, RR{Type: typ, Class: class, TTL: ttl})
		}
		off = rdata + rdlen
	}
	return nil
}

// records returns room for the records of every section, at most n,
// from the Parser's slab: one allocation serves many messages. Each
// message's sections are capped (finish), so an append to one never
// reaches the next message's records.
func (p *reader) records(n int) []RR {
	if n > slabRecords {
		return make([]RR, 0, n)
	}
	if len(p.slab) < n {
		p.slab = make([]RR, slabRecords)
	}
	p.slabbed = true
	return p.slab[:0:n]
}

// slabRecords is how many records a Parser allocates at once.
const slabRecords = 1024

// minRR is the fewest bytes a record takes: a one-byte name (the root)
// and the fixed fields.
const minRR = 11

// lower returns the lower-cased form of a name in text: the name itself
// when it has no upper case, else a lower-cased copy appended.
func (p *reader) lower(s span) span {
	name := p.text[s.from:s.to]
	if !hasUpper(name) {
		return s
	}
	from := len(p.text)
	for _, c := range name {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		p.text = append(p.text, c)
	}
	return p.mark(from)
}

func hasUpper(b []byte) bool {
	for _, c := range b {
		if c >= 'A' && c <= 'Z' {
			return true
		}
	}
	return false
}

// same returns the span of an earlier name equal to the one just
// written at s, dropping the copy: records mostly name the question or
// the record before.
func (p *reader) same(s span) span {
	name := p.text[s.from:s.to]
	for _, o := range [...]span{p.qname, p.last()} {
		if o.to > o.from && string(p.text[o.from:o.to]) == string(name) {
			p.text = p.text[:s.from]
			return o
		}
	}
	return s
}

// last is the owner name of the record read last.
func (p *reader) last() span {
	if len(p.spans) < 2 {
		return span{}
	}
	return p.spans[len(p.spans)-2]
}

// finish makes the text a string and hands out the strings.
func (p *reader) finish() {
	m := &p.m
	text := string(p.text)
	str := func(s span) string { return text[s.from:s.to] }
	if m.HasQuestion {
		m.QName, m.QNameRaw = str(p.qname), str(p.qraw)
	}
	for i := range p.rrs {
		p.rrs[i].Name, p.rrs[i].RData = str(p.spans[2*i]), str(p.spans[2*i+1])
	}
	if p.slabbed {
		p.slab = p.slab[len(p.rrs):]
	}
	// The sections, as slices of the one array, each capped so an
	// append to one does not overwrite the next.
	n := len(p.rrs)
	auth, add := p.sec[0], p.sec[1]
	if add < 0 {
		add = n
	}
	if auth < 0 {
		auth = add
	}
	if auth > 0 {
		m.Answer = p.rrs[:auth:auth]
	}
	if add > auth {
		m.Authority = p.rrs[auth:add:add]
	}
	if n > add {
		m.Additional = p.rrs[add:n:n]
	}
}

// maxPointers bounds compression pointers followed in one name, so loops
// end.
const maxPointers = 64

// How names.read returns a name.
const (
	nameSkip  = iota // not at all: only where it ends
	nameLower        // lower-cased presentation form
	nameRaw          // presentation form, the case kept
)

// names reads the names of a message and remembers, for each label it
// read, what the name from that label on reads as. A name that points
// at one (most owner names point at the question, a referral's glue at
// its NS records' names) is then copied whole, where reading it again
// took a fifth of the time spent on a signed zone's responses.
type names struct {
	text   []byte     // the names remembered, one after another
	at     []nameAt   // at most maxNamesAt
	slot   [256]uint8 // by wire offset: 1 + the index in at of a name there
	labels []labelAt  // of the name being read
	off    bool       // remember nothing (Parser.uncached)
	// addrs prints A and AAAA data: a referral's glue and a zone's name
	// servers are the same few addresses in message after message. It
	// is made at the first such record, as a Parser made for one message
	// (the function Parse) reads few.
	addrs *addrtext.Cache
}

// addr returns how the address ip prints.
func (n *names) addr(ip netip.Addr) []byte {
	if n.addrs == nil {
		n.addrs = new(addrtext.Cache)
	}
	return n.addrs.Text(ip)
}

// nameAt is a name remembered: the one starting at wire in the message.
type nameAt struct {
	wire     int32 // where the name starts in the message
	from, to int32 // what it reads as: text[from:to]
	wlen     int32 // its length on the wire, labels and length bytes
	ptrs     int32 // compression pointers followed in it
	lower    bool  // read lower-cased (else as sent)
	upper    bool  // as sent, it has upper case
}

// labelAt is a label of the name being read, and the name read so far
// before it.
type labelAt struct {
	wire       int32 // where the label is in the message
	dst        int32 // where its text starts, from the name's start
	wlen, ptrs int32 // of the name before it
	upper      bool  // the label has upper case
}

// maxNamesAt bounds the names remembered for a message (slot holds an
// index in a byte).
const maxNamesAt = 64

func (n *names) reset(off bool) {
	if len(n.at) > 0 {
		clear(n.slot[:])
	}
	n.text, n.at, n.off = n.text[:0], n.at[:0], off
}

// add remembers a name. The table is direct-mapped: a name whose slot
// another took is read label by label again, which costs time only.
func (n *names) add(e nameAt) {
	n.slot[uint8(e.wire)] = uint8(len(n.at) + 1)
	n.at = append(n.at, e)
}

// find returns the name remembered at wire offset at in the form mode
// asks for.
func (n *names) find(at int, mode int) *nameAt {
	i := n.slot[uint8(at)]
	if i == 0 {
		return nil
	}
	// A pointer, not a copy: the entry was just written field by field,
	// and copying it whole stalled on those stores.
	e := &n.at[i-1]
	if int(e.wire) != at || !(mode == nameSkip || !e.upper || e.lower == (mode == nameLower)) {
		return nil
	}
	return e
}

// read reads the name at off, appends it to dst in the form mode says,
// and returns dst and the offset after the name where it starts (past
// the first pointer, if any).
func (n *names) read(b []byte, off int, dst []byte, mode int) ([]byte, int, error) {
	present := mode != nameSkip
	start := len(dst) // the name is dst[start:]; dst may hold others before it
	next := -1
	wire := 0
	pointers := 0
	pos := off
	n.labels = n.labels[:0]
	var tail nameAt // the name remembered the name ends with, if any
	for {
		if pos >= len(b) {
			return dst, 0, malformed(pos, "name runs past the end of the message")
		}
		l := int(b[pos])
		switch l & 0xc0 {
		case 0x00:
			if l == 0 {
				if next < 0 {
					next = pos + 1
				}
				if present && len(dst) == start {
					dst = append(dst, '.')
				}
				n.remember(dst[start:], wire, pointers, mode, tail)
				return dst, next, nil
			}
			if pos+1+l > len(b) {
				return dst, 0, malformed(pos, "label of %d bytes runs past the end of the message", l)
			}
			if wire+l+1 > 255 {
				return dst, 0, malformed(pos, "name longer than 255 bytes")
			}
			if present {
				if len(dst) > start {
					dst = append(dst, '.')
				}
				var upper bool
				n.labels = append(n.labels, labelAt{wire: int32(pos), dst: int32(len(dst) - start), wlen: int32(wire), ptrs: int32(pointers)})
				dst, upper = appendLabel(dst, b[pos+1:pos+1+l], mode == nameLower)
				n.labels[len(n.labels)-1].upper = upper
			}
			wire += l + 1
			pos += 1 + l
		case 0xc0:
			if pos+2 > len(b) {
				return dst, 0, malformed(pos, "compression pointer cut short")
			}
			if next < 0 {
				next = pos + 2
			}
			if pointers++; pointers > maxPointers {
				return dst, 0, malformed(pos, "compression pointers loop")
			}
			pos = int(binary.BigEndian.Uint16(b[pos:]) & 0x3fff)
			// A name remembered there ends this one, unless reading it
			// label by label would find the whole too long: then the
			// error says where, as it always did. A name skipped needs
			// only to be known good: most owner names point at the
			// question, and a skipped section's were walked label by
			// label again for each record.
			if !n.off {
				if e := n.find(pos, mode); e != nil && wire+int(e.wlen) <= 255 && pointers+int(e.ptrs) <= maxPointers {
					if !present {
						return dst, next, nil
					}
					if len(dst) > start {
						dst = append(dst, '.')
					}
					dst = append(dst, n.text[e.from:e.to]...)
					wire += int(e.wlen)
					pointers += int(e.ptrs)
					tail = *e
					n.remember(dst[start:], wire, pointers, mode, tail)
					return dst, next, nil
				}
			}
		default:
			return dst, 0, malformed(pos, "label type 0x%02x is not supported", l&0xc0)
		}
	}
}

// remember keeps the labels of a name just read, text being what it
// reads as, wire its wire length and pointers those followed in it; it
// ended with the name remembered tail, if tail.to > 0.
func (n *names) remember(text []byte, wire, pointers, mode int, tail nameAt) {
	if n.off || len(n.labels) == 0 || len(n.at) >= maxNamesAt {
		return
	}
	base := int32(len(n.text))
	n.text = append(n.text, text...)
	upper := tail.to > 0 && tail.upper
	for i := len(n.labels) - 1; i >= 0; i-- {
		l := n.labels[i]
		upper = upper || l.upper
		if len(n.at) < maxNamesAt {
			n.add(nameAt{wire: l.wire, from: base + l.dst, to: base + int32(len(text)),
				wlen: int32(wire) - l.wlen, ptrs: int32(pointers) - l.ptrs, lower: mode == nameLower, upper: upper})
		}
	}
}

// lowered remembers lower-cased copies of the names remembered from
// at[k] on (the question's, read as sent) that had upper case, for the
// owner names pointing at them.
func (n *names) lowered(k int) {
	for i := k; i < len(n.at) && len(n.at) < maxNamesAt; i++ {
		e := n.at[i]
		if !e.upper || e.lower {
			continue
		}
		from := int32(len(n.text))
		for _, c := range n.text[e.from:e.to] {
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			n.text = append(n.text, c)
		}
		e.from, e.to, e.lower = from, from+(e.to-e.from), true
		n.add(e)
	}
}

// appendLabel writes a label in presentation form, lower-cased if
// lower: '.' and '\' escaped with a backslash, other bytes outside
// printable ASCII as \DDD. It reports whether the label has upper case.
func appendLabel(dst, label []byte, lower bool) ([]byte, bool) {
	for i, c := range label {
		if c < 0x21 || c > 0x7e || c == '.' || c == '\\' || c-'A' < 26 {
			return appendLabelSlow(append(dst, label[:i]...), label[i:], lower)
		}
	}
	return append(dst, label...), false
}

func appendLabelSlow(dst, label []byte, lower bool) ([]byte, bool) {
	upper := false
	for _, c := range label {
		switch {
		case c >= 'A' && c <= 'Z':
			upper = true
			if lower {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
		case c == '.' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x21 || c > 0x7e:
			dst = append(dst, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
		default:
			dst = append(dst, c)
		}
	}
	return dst, upper
}

// ParseSections reads a choice of record sections: "all", "question"
// (none of them: header, question and EDNS only), or a list of
// "answer", "authority" and "additional" separated by commas.
func ParseSections(v string) (Sections, error) {
	switch v {
	case "", "all":
		return AllSections, nil
	case "question":
		return 0, nil
	}
	var s Sections
	for _, name := range strings.Split(v, ",") {
		switch strings.TrimSpace(name) {
		case "answer", "answers":
			s |= Answer
		case "authority":
			s |= Authority
		case "additional":
			s |= Additional
		default:
			return 0, fmt.Errorf("sections=%q: want all, question, or answer, authority and additional separated by commas", v)
		}
	}
	return s, nil
}

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
func Parse(b []byte) (Message, error) {
	var m Message
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
		return m, malformed(len(b), "message of %d bytes is shorter than the 12-byte header; the fields its bytes hold are kept", len(b))
	}

	off := HeaderLen
	var name [maxPresentation]byte
	for i := 0; i < int(m.QDCount); i++ {
		n, next, err := readName(b, off, name[:0], i == 0)
		if err != nil {
			return m, err
		}
		if next+4 > len(b) {
			return m, malformed(next, "question %d ends before its type and class", i+1)
		}
		if i == 0 {
			m.HasQuestion = true
			m.QName = string(n)
			raw, _, _ := readNameMode(b, off, name[:0], nameRaw)
			m.QNameRaw = string(raw)
			m.QType = binary.BigEndian.Uint16(b[next:])
			m.QClass = binary.BigEndian.Uint16(b[next+2:])
		}
		off = next + 4
	}
	rrs := int(m.ANCount) + int(m.NSCount)
	for i := 0; i < rrs+int(m.ARCount); i++ {
		owner, next, err := readName(b, off, name[:0], true)
		if err != nil {
			return m, err
		}
		if next+10 > len(b) {
			return m, malformed(next, "record %d ends inside its fixed fields", i+1)
		}
		typ := binary.BigEndian.Uint16(b[next:])
		class := binary.BigEndian.Uint16(b[next+2:])
		ttl := binary.BigEndian.Uint32(b[next+4:])
		rdlen := int(binary.BigEndian.Uint16(b[next+8:]))
		rdata := next + 10
		if rdata+rdlen > len(b) {
			return m, malformed(rdata, "record %d claims %d bytes of data; %d remain", i+1, rdlen, len(b)-rdata)
		}
		switch {
		case i >= rrs && typ == TypeOPT && !m.EDNS:
			m.EDNS = true
			m.UDPSize = class
			m.Rcode |= uint16(ttl>>24) << 4
			m.EDNSVersion = uint8(ttl >> 16)
			m.DO = ttl&0x8000 != 0
			m.EDNSOptions = rdlen > 0
			m.options(b[rdata : rdata+rdlen])
		case typ == TypeOPT && i >= rrs:
			// a second OPT record is malformed; the first stands
		default:
			rr := RR{Name: string(owner), Type: typ, Class: class, TTL: ttl, RData: rdataText(b, rdata, rdlen, typ)}
			switch {
			case i < int(m.ANCount):
				m.Answer = append(m.Answer, rr)
			case i < rrs:
				m.Authority = append(m.Authority, rr)
			default:
				m.Additional = append(m.Additional, rr)
			}
		}
		off = rdata + rdlen
	}
	return m, nil
}

// maxPresentation bounds a name in presentation form: 255 wire bytes, each
// label byte at most 4 characters (\DDD).
const maxPresentation = 4 * 255

// maxPointers bounds compression pointers followed in one name, so loops
// end.
const maxPointers = 64

// readName reads the name at off and returns it appended to dst in
// lower-cased presentation form (when present is true), and the offset
// after the name where it starts (past the first pointer, if any).
func readName(b []byte, off int, dst []byte, present bool) ([]byte, int, error) {
	mode := nameSkip
	if present {
		mode = nameLower
	}
	return readNameMode(b, off, dst, mode)
}

// How readNameMode returns a name.
const (
	nameSkip  = iota // not at all: only where it ends
	nameLower        // lower-cased presentation form
	nameRaw          // presentation form, the case kept
)

func readNameMode(b []byte, off int, dst []byte, mode int) ([]byte, int, error) {
	present := mode != nameSkip
	next := -1
	wire := 0
	pointers := 0
	pos := off
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
				if present && len(dst) == 0 {
					dst = append(dst, '.')
				}
				return dst, next, nil
			}
			if pos+1+l > len(b) {
				return dst, 0, malformed(pos, "label of %d bytes runs past the end of the message", l)
			}
			if wire += l + 1; wire > 255 {
				return dst, 0, malformed(pos, "name longer than 255 bytes")
			}
			if present {
				if len(dst) > 0 {
					dst = append(dst, '.')
				}
				dst = appendLabel(dst, b[pos+1:pos+1+l], mode == nameLower)
			}
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
		default:
			return dst, 0, malformed(pos, "label type 0x%02x is not supported", l&0xc0)
		}
	}
}

// appendLabel writes a label lower-cased in presentation form: '.' and
// '\' escaped with a backslash, other bytes outside printable ASCII as
// \DDD.
func appendLabel(dst, label []byte, lower bool) []byte {
	for _, c := range label {
		switch {
		case lower && c >= 'A' && c <= 'Z':
			dst = append(dst, c+'a'-'A')
		case c == '.' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x21 || c > 0x7e:
			dst = append(dst, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

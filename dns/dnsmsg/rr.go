package dnsmsg

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strconv"
)

// RR is a resource record of the answer, authority or additional section.
type RR struct {
	Name  string // lower-cased presentation form without the final dot, as QName
	Type  uint16
	Class uint16
	TTL   uint32
	// RData is the data as dig prints it for A, AAAA, NS, CNAME, DNAME,
	// PTR, MX, TXT, SOA, SRV, DS, DNSKEY and RRSIG (names with their final
	// dot, as sent); other types, and data that does not parse, in hex.
	RData string
}

// Option is an EDNS option.
type Option struct {
	Code uint16
	Data []byte
}

// ECS is the EDNS Client Subnet option (RFC 7871).
type ECS struct {
	Family       uint16 // 1 IPv4, 2 IPv6
	SourcePrefix uint8
	ScopePrefix  uint8
	Address      string // the address, its missing bytes zero
}

// EDE is an Extended DNS Error (RFC 8914).
type EDE struct {
	Code uint16
	Text string
}

// EDNS option codes Parse reads.
const (
	OptionECS    = 8
	OptionCookie = 10
	OptionEDE    = 15
)

// Record types rdata is printed for.
const (
	TypeA          = 1
	TypeNS         = 2
	TypeCNAME      = 5
	TypeSOA        = 6
	TypePTR        = 12
	TypeMX         = 15
	TypeTXT        = 16
	TypeAAAA       = 28
	TypeSRV        = 33
	TypeDNAME      = 39
	TypeDS         = 43
	TypeRRSIG      = 46
	TypeDNSKEY     = 48
	TypeNSEC       = 47
	TypeNSEC3      = 50
	TypeNSEC3PARAM = 51
	TypeTLSA       = 52
	TypeCDS        = 59
	TypeCDNSKEY    = 60
	TypeCAA        = 257
)

var typeNames = map[uint16]string{1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA",
	33: "SRV", 39: "DNAME", 41: "OPT", 43: "DS", 46: "RRSIG", 47: "NSEC", 48: "DNSKEY", 50: "NSEC3", 51: "NSEC3PARAM",
	52: "TLSA", 59: "CDS", 60: "CDNSKEY", 64: "SVCB", 65: "HTTPS", 99: "SPF", 255: "ANY", 257: "CAA"}

// TypeString is a type's mnemonic, or TYPEnnn (RFC 3597).
func TypeString(t uint16) string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// appendRData appends the data of a record whose data is b[off:off+n],
// printed.
func appendRData(dst, b []byte, off, n int, typ uint16, nm *names) []byte {
	d := b[off : off+n]
	start := len(dst)
	// name appends the name at b[at:] with its final dot.
	name := func(dst []byte, at int) ([]byte, int, bool) {
		from := len(dst)
		dst, next, err := nm.read(b, at, dst, nameRaw)
		if err != nil || next > off+n {
			return dst, 0, false
		}
		if len(dst)-from != 1 || dst[from] != '.' {
			dst = append(dst, '.')
		}
		return dst, next, true
	}
	u16 := func(i int) uint64 { return uint64(binary.BigEndian.Uint16(d[i:])) }
	u32 := func(i int) uint64 { return uint64(binary.BigEndian.Uint32(d[i:])) }
	num := func(dst []byte, v uint64) []byte { return append(strconv.AppendUint(dst, v, 10), ' ') }
	switch typ {
	case TypeA:
		if n == 4 {
			return append(dst, nm.addr(netip.AddrFrom4([4]byte(d)))...)
		}
	case TypeAAAA:
		if n == 16 {
			return append(dst, nm.addr(netip.AddrFrom16([16]byte(d)))...)
		}
	case TypeNS, TypeCNAME, TypePTR, TypeDNAME:
		if out, next, ok := name(dst, off); ok && next == off+n {
			return out
		}
	case TypeMX:
		if n >= 3 {
			if out, next, ok := name(num(dst, u16(0)), off+2); ok && next == off+n {
				return out
			}
		}
	case TypeSRV:
		if n >= 7 {
			if out, next, ok := name(num(num(num(dst, u16(0)), u16(2)), u16(4)), off+6); ok && next == off+n {
				return out
			}
		}
	case TypeSOA:
		if out, next, ok := name(dst, off); ok {
			if out, next, ok := name(append(out, ' '), next); ok && next+20 == off+n {
				k := next - off
				out = num(num(num(num(append(out, ' '), u32(k)), u32(k+4)), u32(k+8)), u32(k+12))
				return strconv.AppendUint(out, u32(k+16), 10)
			}
		}
	case TypeTXT:
		out := dst
		for i := 0; i < n; {
			l := int(d[i])
			if i+1+l > n {
				out = nil
				break
			}
			if i > 0 {
				out = append(out, ' ')
			}
			out = appendQuote(out, d[i+1:i+1+l])
			i += 1 + l
		}
		if out != nil && n > 0 {
			return out
		}
	case TypeDS, TypeCDS:
		if n >= 4 {
			out := num(num(num(dst, u16(0)), uint64(d[2])), uint64(d[3]))
			from := len(out)
			out = hex.AppendEncode(out, d[4:])
			upper(out[from:])
			return out
		}
	case TypeDNSKEY, TypeCDNSKEY:
		if n >= 4 {
			return base64.StdEncoding.AppendEncode(num(num(num(dst, u16(0)), uint64(d[2])), uint64(d[3])), d[4:])
		}
	case TypeRRSIG:
		if n >= 18 {
			out := append(append(dst, TypeString(uint16(u16(0)))...), ' ')
			out = num(num(num(out, uint64(d[2])), uint64(d[3])), u32(4))
			out = append(appendStamp(out, u32(8)), ' ')
			out = append(appendStamp(out, u32(12)), ' ')
			if out, next, ok := name(num(out, u16(16)), off+18); ok {
				return base64.StdEncoding.AppendEncode(append(out, ' '), b[next:off+n])
			}
		}
	case TypeNSEC:
		if out, next, ok := name(dst, off); ok {
			if out, ok := appendTypes(out, b[next:off+n]); ok {
				return out
			}
		}
	case TypeNSEC3, TypeNSEC3PARAM:
		if n >= 5 && 5+int(d[4]) <= n {
			out := num(num(num(dst, uint64(d[0])), uint64(d[1])), u16(2))
			salt := d[5 : 5+int(d[4])]
			if len(salt) == 0 {
				out = append(out, '-')
			} else {
				from := len(out)
				out = hex.AppendEncode(out, salt)
				upper(out[from:])
			}
			rest := d[5+len(salt):]
			if typ == TypeNSEC3PARAM {
				if len(rest) == 0 {
					return out
				}
				break
			}
			if len(rest) >= 1 && 1+int(rest[0]) <= len(rest) {
				out = base32Hex.AppendEncode(append(out, ' '), rest[1:1+int(rest[0])])
				if out, ok := appendTypes(out, rest[1+int(rest[0]):]); ok {
					return out
				}
			}
		}
	case TypeTLSA:
		if n >= 3 {
			out := num(num(num(dst, uint64(d[0])), uint64(d[1])), uint64(d[2]))
			from := len(out)
			out = hex.AppendEncode(out, d[3:])
			upper(out[from:])
			return out
		}
	case TypeCAA:
		if n >= 2 && 2+int(d[1]) <= n {
			out := append(num(dst, uint64(d[0])), d[2:2+int(d[1])]...)
			return appendQuote(append(out, ' '), d[2+int(d[1]):])
		}
	}
	return hex.AppendEncode(dst[:start], d)
}

// base32Hex is how NSEC3 writes hashed owner names (RFC 5155): the
// "extended hex" alphabet, upper case as dig prints it, no padding.
var base32Hex = base32.HexEncoding.WithPadding(base32.NoPadding)

// appendTypes appends the types of an NSEC or NSEC3 type bitmap (RFC
// 4034 §4.1.2), each after a space; false when the bitmap is malformed.
func appendTypes(dst, b []byte) ([]byte, bool) {
	last := -1
	for len(b) > 0 {
		if len(b) < 2 || b[1] == 0 || b[1] > 32 || 2+int(b[1]) > len(b) || int(b[0]) <= last {
			return dst, false
		}
		window, bits := int(b[0]), b[2:2+int(b[1])]
		for i, octet := range bits {
			for bit := range 8 {
				if octet&(0x80>>bit) != 0 {
					dst = append(append(dst, ' '), TypeString(uint16(window<<8|i*8+bit))...)
				}
			}
		}
		last, b = window, b[2+int(b[1]):]
	}
	return dst, true
}

// upper upper-cases the hex digits a-f in place.
func upper(b []byte) {
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
}

// appendQuote appends a character-string as dig prints it: in double
// quotes, with " and \ escaped and bytes outside printable ASCII as \DDD.
func appendQuote(dst, s []byte) []byte {
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// options reads the options of an OPT record's data.
func (m *Message) options(d []byte) {
	for i := 0; i+4 <= len(d); {
		code, l := binary.BigEndian.Uint16(d[i:]), int(binary.BigEndian.Uint16(d[i+2:]))
		if i+4+l > len(d) {
			return
		}
		data := d[i+4 : i+4+l]
		m.Options = append(m.Options, Option{Code: code, Data: append([]byte(nil), data...)})
		switch code {
		case OptionECS:
			if l >= 4 {
				e := ECS{Family: binary.BigEndian.Uint16(data), SourcePrefix: data[2], ScopePrefix: data[3]}
				switch e.Family {
				case 1:
					var a [4]byte
					copy(a[:], data[4:])
					e.Address = netip.AddrFrom4(a).String()
				case 2:
					var a [16]byte
					copy(a[:], data[4:])
					e.Address = netip.AddrFrom16(a).String()
				}
				m.ECS = e
			}
		case OptionCookie:
			m.Cookie = true
		case OptionEDE:
			if l >= 2 {
				m.EDE = append(m.EDE, EDE{Code: binary.BigEndian.Uint16(data), Text: string(data[2:])})
			}
		}
		i += 4 + l
	}
}

// appendStamp appends a time as seconds since 1970 in UTC as
// YYYYMMDDHHMMSS, as dig prints an RRSIG's: a signed zone's responses
// carry two per signature, and time.Time's formatting was a fifth of
// what printing their records cost.
func appendStamp(dst []byte, secs uint64) []byte {
	days, rem := secs/86400, secs%86400
	// Civil date from days since 1970-01-01 (Howard Hinnant's
	// days_from_civil, inverted), for days >= 0.
	z := days + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	two := func(dst []byte, v uint64) []byte { return append(dst, byte('0'+v/10), byte('0'+v%10)) }
	dst = two(two(dst, y/100), y%100)
	dst = two(two(dst, m), d)
	return two(two(two(dst, rem/3600), rem/60%60), rem%60)
}

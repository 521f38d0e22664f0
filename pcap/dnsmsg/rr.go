package dnsmsg

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"
	"time"
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
	TypeA      = 1
	TypeNS     = 2
	TypeCNAME  = 5
	TypeSOA    = 6
	TypePTR    = 12
	TypeMX     = 15
	TypeTXT    = 16
	TypeAAAA   = 28
	TypeSRV    = 33
	TypeDNAME  = 39
	TypeDS     = 43
	TypeRRSIG  = 46
	TypeDNSKEY = 48
)

var typeNames = map[uint16]string{1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA",
	33: "SRV", 39: "DNAME", 41: "OPT", 43: "DS", 46: "RRSIG", 47: "NSEC", 48: "DNSKEY", 50: "NSEC3", 51: "NSEC3PARAM",
	52: "TLSA", 64: "SVCB", 65: "HTTPS", 99: "SPF", 255: "ANY", 257: "CAA"}

// TypeString is a type's mnemonic, or TYPEnnn (RFC 3597).
func TypeString(t uint16) string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// rdataText prints the data of a record whose data is b[off:off+n].
func rdataText(b []byte, off, n int, typ uint16) string {
	d := b[off : off+n]
	name := func(at int) (string, int, bool) {
		nm, next, err := readNameMode(b, at, nil, nameRaw)
		if err != nil || next > off+n {
			return "", 0, false
		}
		if len(nm) != 1 || nm[0] != '.' {
			nm = append(nm, '.')
		}
		return string(nm), next, true
	}
	u16 := func(i int) uint16 { return binary.BigEndian.Uint16(d[i:]) }
	u32 := func(i int) uint32 { return binary.BigEndian.Uint32(d[i:]) }
	switch typ {
	case TypeA:
		if n == 4 {
			return netip.AddrFrom4([4]byte(d)).String()
		}
	case TypeAAAA:
		if n == 16 {
			return netip.AddrFrom16([16]byte(d)).String()
		}
	case TypeNS, TypeCNAME, TypePTR, TypeDNAME:
		if s, next, ok := name(off); ok && next == off+n {
			return s
		}
	case TypeMX:
		if n >= 3 {
			if s, next, ok := name(off + 2); ok && next == off+n {
				return strconv.Itoa(int(u16(0))) + " " + s
			}
		}
	case TypeSRV:
		if n >= 7 {
			if s, next, ok := name(off + 6); ok && next == off+n {
				return strconv.Itoa(int(u16(0))) + " " + strconv.Itoa(int(u16(2))) + " " + strconv.Itoa(int(u16(4))) + " " + s
			}
		}
	case TypeSOA:
		if m, next, ok := name(off); ok {
			if r, next2, ok := name(next); ok && next2+20 == off+n {
				k := next2 - off
				return m + " " + r + " " + strconv.FormatUint(uint64(u32(k)), 10) + " " + strconv.FormatUint(uint64(u32(k+4)), 10) + " " +
					strconv.FormatUint(uint64(u32(k+8)), 10) + " " + strconv.FormatUint(uint64(u32(k+12)), 10) + " " + strconv.FormatUint(uint64(u32(k+16)), 10)
			}
		}
	case TypeTXT:
		var parts []string
		for i := 0; i < n; {
			l := int(d[i])
			if i+1+l > n {
				parts = nil
				break
			}
			parts = append(parts, quote(d[i+1:i+1+l]))
			i += 1 + l
		}
		if parts != nil {
			return strings.Join(parts, " ")
		}
	case TypeDS:
		if n >= 4 {
			return strconv.Itoa(int(u16(0))) + " " + strconv.Itoa(int(d[2])) + " " + strconv.Itoa(int(d[3])) + " " + strings.ToUpper(hex.EncodeToString(d[4:]))
		}
	case TypeDNSKEY:
		if n >= 4 {
			return strconv.Itoa(int(u16(0))) + " " + strconv.Itoa(int(d[2])) + " " + strconv.Itoa(int(d[3])) + " " + base64.StdEncoding.EncodeToString(d[4:])
		}
	case TypeRRSIG:
		if n >= 18 {
			if s, next, ok := name(off + 18); ok {
				stamp := func(v uint32) string { return time.Unix(int64(v), 0).UTC().Format("20060102150405") }
				return TypeString(u16(0)) + " " + strconv.Itoa(int(d[2])) + " " + strconv.Itoa(int(d[3])) + " " + strconv.FormatUint(uint64(u32(4)), 10) + " " +
					stamp(u32(8)) + " " + stamp(u32(12)) + " " + strconv.Itoa(int(u16(16))) + " " + s + " " + base64.StdEncoding.EncodeToString(b[next:off+n])
			}
		}
	}
	return hex.EncodeToString(d)
}

// quote prints a character-string as dig does: in double quotes, with "
// and \ escaped and bytes outside printable ASCII as \DDD.
func quote(s []byte) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			sb.WriteByte('\\')
			sb.WriteString(strconv.Itoa(int(c) + 1000)[1:])
		default:
			sb.WriteByte(c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
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

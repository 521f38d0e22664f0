package dnsmsg

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

// answer is a response whose one answer, owned by the root, has type
// typ and data rdata.
func answer(typ uint16, rdata []byte) []byte {
	m := []byte{0, 1, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0} // id 1, QR AA, one answer
	m = append(m, 0)                                   // the root
	m = binary.BigEndian.AppendUint16(m, typ)
	m = binary.BigEndian.AppendUint16(m, 1)
	m = binary.BigEndian.AppendUint32(m, 3600)
	m = binary.BigEndian.AppendUint16(m, uint16(len(rdata)))
	return append(m, rdata...)
}

// wire is a name in wire form from its dotted text.
func wire(name string) []byte {
	var b []byte
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		b = append(append(b, byte(len(l))), l...)
	}
	return append(b, 0)
}

func unhex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRData: the DNSSEC and other types' data print as dig prints them,
// from the RFCs' own examples where they give one; data that does not
// hold together prints as hex.
func TestRData(t *testing.T) {
	for _, c := range []struct {
		what  string
		typ   uint16
		rdata []byte
		want  string
	}{
		// RFC 4034 §4.3.
		{"NSEC", TypeNSEC, append(wire("host.example.com."), unhex(t, "0006 40010000 0003 041b 000000000000 0000000000000000 0000000000000000 0000000020")...),
			"host.example.com. A MX RRSIG NSEC TYPE1234"},
		{"NSEC, no types", TypeNSEC, wire("a.example."), "a.example."},
		// RFC 5155 Appendix A: hash 1, opt-out, 12 iterations, salt
		// aabbccdd; the next owner 2t7b4g4vsa5smi47k61mv5bv1a22bojr.
		{"NSEC3", TypeNSEC3, append(unhex(t, "01 01 000c 04 aabbccdd 14 17 4eb2409fe28bcb4887a1836f957f0a8425e27b"), unhex(t, "000722010000000290")...),
			"1 1 12 AABBCCDD 2T7B4G4VSA5SMI47K61MV5BV1A22BOJR NS SOA MX RRSIG DNSKEY NSEC3PARAM"},
		{"NSEC3, no salt", TypeNSEC3, unhex(t, "01 00 0000 00 01 ff 0006 400000000002"), "1 0 0 - VS A RRSIG"},
		{"NSEC3PARAM", TypeNSEC3PARAM, unhex(t, "01 00 000c 04 aabbccdd"), "1 0 12 AABBCCDD"},
		{"TLSA", TypeTLSA, unhex(t, "03 01 01 0c72ac70b745ac19"), "3 1 1 0C72AC70B745AC19"},
		{"CAA", TypeCAA, append([]byte{0, 5}, "issueletsencrypt.org"...), `0 issue "letsencrypt.org"`},
		{"CDS", TypeCDS, unhex(t, "ec45 05 01 2bb183af5f22588179a53b0a98631fad1a292118"), "60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118"},
		{"CDNSKEY", TypeCDNSKEY, unhex(t, "0101 03 08 03010001"), "257 3 8 AwEAAQ=="},
		// Bitmaps that do not hold together: a window of 0 bytes, and
		// windows out of order.
		{"NSEC, empty window", TypeNSEC, append(wire("a."), 0, 0), "0161000000"},
		{"NSEC, windows out of order", TypeNSEC, append(wire("a."), 1, 1, 0x80, 0, 1, 0x40), "016100010180000140"},
		{"NSEC3, hash past the end", TypeNSEC3, unhex(t, "01 00 0000 00 09 ff"), "010000000009ff"},
		{"CAA, tag past the end", TypeCAA, []byte{0, 9, 'i'}, "000969"},
	} {
		m, err := Parse(answer(c.typ, c.rdata))
		if err != nil || len(m.Answer) != 1 {
			t.Fatalf("%s: %v, %d answers", c.what, err, len(m.Answer))
		}
		if got := m.Answer[0].RData; got != c.want {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}
}

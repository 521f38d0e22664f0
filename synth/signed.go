package synth

import (
	"fmt"
	"net"

	"github.com/gopacket/gopacket/layers"
)

// SignedMix sets c to an authoritative server of signed zones, as real
// authoritative traffic is and the plain mix is not: most responses
// answer (one to four records each) and carry an RRSIG per RRset, most
// queries ask for DNSSEC (EDNS with DO), some ask for the zone's keys
// (DNSKEY, with their signature), some get large TXT answers, and
// names that do not exist get the SOA with its signature. Referrals with
// glue stay as in the plain mix. NSEC and NSEC3 records are left out
// (the packet library does not write them).
func SignedMix(c *Config) {
	c.Signed, c.EDNS = 0.9, 0.95
}

// signatures are what an RRSIG may carry: ECDSA P-256 (algorithm 13,
// 64 bytes), as most signed zones now use, and RSA/SHA-256 (8, 256
// bytes).
var signatures = []struct {
	alg  layers.DNSSECAlgorithm
	size int
	w    int
}{{13, 64, 7}, {8, 256, 3}}

// signedAnswer fills resp, a NOERROR or NXDOMAIN response to q, as a
// signed zone's server answers it.
func (g *gen) signedAnswer(q, resp *layers.DNS) {
	question := q.Questions[0]
	zone := tldOf(question.Name)
	if len(q.Additionals) > 0 { // it asked with EDNS: DNSSEC wanted
		q.Additionals[0] = opt(1232, true)
	}
	resp.AA = true
	sign := func(rrs []layers.DNSResourceRecord) []layers.DNSResourceRecord {
		if len(rrs) == 0 {
			return rrs
		}
		s := pick(g.r, signatures, func(x struct {
			alg  layers.DNSSECAlgorithm
			size int
			w    int
		}) int {
			return x.w
		})
		sig := make([]byte, s.size)
		for i := range sig {
			sig[i] = byte(g.r.Uint32())
		}
		labels := 1
		for _, c := range rrs[0].Name {
			if c == '.' {
				labels++
			}
		}
		return append(rrs, layers.DNSResourceRecord{Name: rrs[0].Name, Type: layers.DNSTypeRRSIG, Class: layers.DNSClassIN, TTL: rrs[0].TTL,
			RRSIG: layers.DNSRRSIG{TypeCovered: rrs[0].Type, Algorithm: s.alg, Labels: uint8(labels), OriginalTTL: rrs[0].TTL,
				Expiration: 1748736000 + g.r.Uint32N(2592000), Inception: 1746057600 + g.r.Uint32N(86400), KeyTag: uint16(g.r.Uint32()),
				SignerName: []byte(zone), Signature: sig}})
	}
	if resp.ResponseCode == layers.DNSResponseCodeNXDomain {
		resp.Answers = nil
		resp.Authorities = sign([]layers.DNSResourceRecord{{Name: []byte(zone), Type: layers.DNSTypeSOA, Class: layers.DNSClassIN, TTL: 3600,
			SOA: layers.DNSSOA{MName: []byte("a.nic." + zone), RName: []byte("hostmaster.nic." + zone), Serial: 2025050500, Refresh: 1800, Retry: 900, Expire: 604800, Minimum: 3600}}})
		resp.Additionals = nil
		return
	}
	rr := func(typ layers.DNSType) layers.DNSResourceRecord {
		return layers.DNSResourceRecord{Name: question.Name, Type: typ, Class: layers.DNSClassIN, TTL: uint32(300 * (1 + g.r.IntN(12)))}
	}
	var set []layers.DNSResourceRecord
	n := 1 + g.r.IntN(4)
	switch question.Type {
	case layers.DNSTypeAAAA:
		for i := range n {
			r := rr(layers.DNSTypeAAAA)
			r.IP = net.ParseIP(fmt.Sprintf("2001:db8:%x::%x", g.r.IntN(65536), i+1))
			set = append(set, r)
		}
	case layers.DNSTypeNS:
		for i := range n {
			r := rr(layers.DNSTypeNS)
			r.NS = []byte(fmt.Sprintf("ns%d.%s", i+1, question.Name))
			set = append(set, r)
		}
	case layers.DNSTypeMX:
		for i := range n {
			r := rr(layers.DNSTypeMX)
			r.MX = layers.DNSMX{Preference: uint16(10 * (i + 1)), Name: []byte(fmt.Sprintf("mx%d.%s", i+1, question.Name))}
			set = append(set, r)
		}
	case layers.DNSTypeTXT:
		r := rr(layers.DNSTypeTXT)
		for range 1 + g.r.IntN(3) {
			// SPF and site verification strings run long: up to 255
			// bytes each.
			txt := make([]byte, 40+g.r.IntN(216))
			for i := range txt {
				txt[i] = 'a' + byte(g.r.IntN(26))
			}
			r.TXTs = append(r.TXTs, txt)
		}
		set = append(set, r)
	case layers.DNSTypeDNSKEY:
		for i := range 2 {
			key := make([]byte, 64)
			for j := range key {
				key[j] = byte(g.r.Uint32())
			}
			r := rr(layers.DNSTypeDNSKEY)
			r.DNSKEY = layers.DNSKEY{Flags: layers.DNSKEYFlag(256 + i), Protocol: 3, Algorithm: 13, PublicKey: key}
			set = append(set, r)
		}
	case layers.DNSTypeSOA:
		r := rr(layers.DNSTypeSOA)
		r.SOA = layers.DNSSOA{MName: []byte("a.nic." + zone), RName: []byte("hostmaster.nic." + zone), Serial: 2025050500, Refresh: 1800, Retry: 900, Expire: 604800, Minimum: 3600}
		set = append(set, r)
	default: // A, and what else is asked: its addresses
		for i := range n {
			r := rr(layers.DNSTypeA)
			r.IP = net.IPv4(198, 51, byte(g.r.IntN(256)), byte(i+1)).To4()
			set = append(set, r)
		}
	}
	resp.Answers = sign(set)
	// The zone's name servers, signed, in the authority section half the
	// time, as many servers send them.
	resp.Authorities, resp.Additionals = nil, nil
	if g.r.IntN(2) == 0 {
		var ns []layers.DNSResourceRecord
		for i := range 2 {
			ns = append(ns, layers.DNSResourceRecord{Name: []byte(zone), Type: layers.DNSTypeNS, Class: layers.DNSClassIN, TTL: 86400,
				NS: []byte(fmt.Sprintf("ns%d.nic.%s", i+1, zone))})
		}
		resp.Authorities = sign(ns)
	}
}

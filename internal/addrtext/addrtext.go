// Package addrtext remembers how IP addresses print. DNS records print
// the same few addresses again and again (a server's, its busiest
// resolvers', the name servers in its referrals), and printing an IPv6
// address costs more than the rest of its row's fixed fields.
package addrtext

import "net/netip"

// A Cache prints addresses, remembering the text of up to Slots of
// them in a table indexed by their last bytes; a clash costs a printing
// only. The zero value is ready; it is not for concurrent use.
type Cache struct {
	slot [Slots]struct {
		addr netip.Addr
		text []byte
	}
}

// Slots is how many addresses a Cache remembers at most.
const Slots = 1024

// Text returns how ip prints (netip.Addr.AppendTo), valid until the
// next call.
func (c *Cache) Text(ip netip.Addr) []byte {
	b := ip.As16()
	e := &c.slot[(uint(b[14])<<8|uint(b[15])^uint(b[13])<<3)%Slots]
	if e.addr != ip || e.text == nil {
		e.addr, e.text = ip, ip.AppendTo(e.text[:0])
	}
	return e.text
}

package addrtext

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestClash prints addresses that share a slot, and an IPv4 address
// beside the same address mapped into IPv6 (the same 16 bytes): each
// prints as itself.
func TestClash(t *testing.T) {
	var c Cache
	addrs := []netip.Addr{
		netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("10.0.2.1"),
		netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("2001:db8::2:1"),
	}
	for range 3 {
		for _, ip := range addrs {
			if got := string(c.Text(ip)); got != ip.String() {
				t.Fatalf("%v printed as %q", ip, got)
			}
		}
	}
}

func ExampleCache() {
	var c Cache
	fmt.Println(string(c.Text(netip.MustParseAddr("2001:db8:0:0:0:0:0:35"))))
	// Output: 2001:db8::35
}

// Package anon rewrites the addresses in captured packets so a capture can
// be shared: Crypto-PAn (keyed and prefix-preserving) or truncation to a
// prefix, of IPv4 and IPv6 sources and destinations, of the headers ICMP
// errors quote, and, when asked, of the A and AAAA records in DNS answers.
// Checksums are updated for the bytes changed (RFC 1624), so a checksum
// that was right stays right and one that was wrong stays wrong by as
// much; every other byte, the packet count and the timing are unchanged.
package anon

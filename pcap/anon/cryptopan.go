package anon

import (
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"net/netip"
)

// CryptoPAn is prefix-preserving address anonymization (Xu, Fan, Ammar
// and Moon, "Prefix-Preserving IP Address Anonymization", ICNP 2002) with
// AES-128 as the pseudorandom function, as the reference implementation
// does: two addresses that share their first k bits map to two that
// share exactly their first k bits. IPv6 addresses are done the same way
// over 128 bits, as other implementations extend it.
type CryptoPAn struct {
	aes cipher.Block
	pad [16]byte
}

// NewCryptoPAn makes the mapping of a 32-byte key: the first 16 bytes
// are the AES key, the last 16 make the pad.
func NewCryptoPAn(key []byte) (*CryptoPAn, error) {
	if len(key) != 32 {
		return nil, errors.New("a Crypto-PAn key is 32 bytes")
	}
	b, err := aes.NewCipher(key[:16])
	if err != nil {
		return nil, err
	}
	c := &CryptoPAn{aes: b}
	b.Encrypt(c.pad[:], key[16:])
	return c, nil
}

// Map anonymizes one address. Bit i of the result is bit i of the
// address XOR the first bit of AES(the address's first i bits, then the
// pad's remaining bits), so the result's first k bits depend only on the
// address's first k bits.
func (c *CryptoPAn) Map(a netip.Addr) netip.Addr {
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		c.mapBits(b[:])
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	c.mapBits(b[:])
	return netip.AddrFrom16(b).WithZone(a.Zone())
}

// mapBits anonymizes addr (4 or 16 bytes) in place.
func (c *CryptoPAn) mapBits(addr []byte) {
	n := len(addr) * 8
	var in, out, otp [16]byte
	for pos := range n {
		// in = the first pos bits of addr, then the pad's bits from pos on.
		in = c.pad
		full := pos / 8
		copy(in[:full], addr[:full])
		if rem := pos % 8; rem > 0 {
			mask := byte(0xff << (8 - rem))
			in[full] = addr[full]&mask | c.pad[full]&^mask
		}
		c.aes.Encrypt(out[:], in[:])
		otp[pos/8] |= (out[0] >> 7) << (7 - pos%8)
	}
	for i := range addr {
		addr[i] ^= otp[i]
	}
}

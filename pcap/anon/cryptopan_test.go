package anon

import (
	"bufio"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// The key of the Crypto-PAn reference distribution's sample.
var referenceKey = []byte{21, 34, 23, 141, 51, 164, 207, 128, 19, 10, 91, 22, 73, 144, 125, 16,
	216, 152, 143, 131, 121, 121, 101, 39, 98, 87, 76, 45, 42, 132, 34, 2}

// TestCryptoPAnVectors reproduces the published vectors: the addresses of
// the reference distribution's sample trace and their sanitized form, and
// the IPv6 vectors other implementations agree on (testdata/README.md).
func TestCryptoPAnVectors(t *testing.T) {
	c, err := NewCryptoPAn(referenceKey)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("testdata/cryptopan-vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		in, want, _ := strings.Cut(line, " ")
		if got := c.Map(netip.MustParseAddr(in)); got != netip.MustParseAddr(strings.TrimSpace(want)) {
			t.Errorf("%s -> %s, want %s", in, got, want)
		}
		n++
	}
	if n < 70 {
		t.Fatalf("only %d vectors read", n)
	}
}

// TestCryptoPAnPreservesPrefixes: addresses sharing exactly k leading
// bits map to addresses sharing exactly k; one key maps alike every time;
// another key maps otherwise.
func TestCryptoPAnPreservesPrefixes(t *testing.T) {
	c, _ := NewCryptoPAn(referenceKey)
	other := append([]byte(nil), referenceKey...)
	other[0] ^= 1
	d, _ := NewCryptoPAn(other)
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{4, 16} {
		same := 0
		for range 500 {
			a := make([]byte, size)
			for i := range a {
				a[i] = byte(r.Uint32())
			}
			k := r.IntN(size*8 + 1) // the bits b shares with a
			b := append([]byte(nil), a...)
			if k < size*8 {
				b[k/8] ^= 0x80 >> (k % 8) // differ at bit k
				for i := k + 1; i < size*8; i++ {
					if r.IntN(2) == 1 {
						b[i/8] ^= 0x80 >> (i % 8)
					}
				}
			}
			x, y := addr(a), addr(b)
			mx, my := c.Map(x), c.Map(y)
			if got := common(mx, my); got != k {
				t.Fatalf("%s and %s share %d bits; their images %s and %s share %d", x, y, k, mx, my, got)
			}
			if c.Map(x) != mx {
				t.Fatalf("%s maps to %s, then to %s", x, mx, c.Map(x))
			}
			if d.Map(x) == mx {
				same++
			}
		}
		if same > 5 {
			t.Errorf("another key gave the same image for %d of 500 addresses", same)
		}
	}
}

func addr(b []byte) netip.Addr {
	if len(b) == 4 {
		return netip.AddrFrom4([4]byte(b))
	}
	return netip.AddrFrom16([16]byte(b))
}

// common counts the leading bits a and b share.
func common(a, b netip.Addr) int {
	x, y := a.AsSlice(), b.AsSlice()
	for i := range x {
		if d := x[i] ^ y[i]; d != 0 {
			n := 0
			for d&0x80 == 0 {
				d <<= 1
				n++
			}
			return i*8 + n
		}
	}
	return len(x) * 8
}

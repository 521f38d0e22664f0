package enrich

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// FuzzDatabase: a database file of any bytes is refused or read, and
// every lookup in one read ends without a panic; a resolver list of any
// text is refused or read.
func FuzzDatabase(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.mmdb")
	testenv.WriteGeoDB(f, path, "GeoLite2-City", time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), []testenv.GeoNet{
		{CIDR: "192.0.2.0/24", Country: "SE", ASN: 64500, Org: "Example"}, {CIDR: "2001:db8::/32", Registered: "NL"}})
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte("8.8.8.8/32 google\n2001:db8::/32 x # y\n"))
	addrs := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("0.0.0.0")}
	f.Fuzz(func(t *testing.T, data []byte) {
		if db, err := openBytes(bytes.Clone(data)); err == nil {
			e := NewEnricher([]*DB{db}, nil)
			for _, a := range addrs {
				e.lookup(a)
			}
		}
		if r, err := ReadResolvers(bytes.NewReader(data), "fuzz"); err == nil {
			for _, a := range addrs {
				r.Lookup(a)
			}
		}
	})
}

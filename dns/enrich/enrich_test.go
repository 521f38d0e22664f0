package enrich_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/dns/enrich"
	"github.com/plumb-dev/plumb/internal/testenv"
)

var (
	v1 = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	v2 = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
)

var cityNets = []testenv.GeoNet{
	{CIDR: "192.0.2.0/24", Country: "SE", Registered: "SE"},
	{CIDR: "198.51.100.0/24", Registered: "DE"}, // a country only as registered
	{CIDR: "2001:db8::/32", Country: "NL"},
}

var asnNets = []testenv.GeoNet{
	{CIDR: "192.0.2.0/25", ASN: 64500, Org: "Example Resolver Co"},
	{CIDR: "2001:db8:1::/48", ASN: 64501, Org: "Example v6 Net"},
}

func ExampleEnricher() {
	dir, _ := os.MkdirTemp("", "geoip")
	defer os.RemoveAll(dir)
	// An operator's databases; here MaxMind's writer makes small ones.
	testenv.WriteGeoDB(&testing.T{}, filepath.Join(dir, "City.mmdb"), "GeoLite2-City", v1, cityNets)
	testenv.WriteGeoDB(&testing.T{}, filepath.Join(dir, "ASN.mmdb"), "GeoLite2-ASN", v1, asnNets)

	dbs := enrich.NewDatabases(dir, nil)
	city, _ := dbs.Get("City.mmdb")
	asn, _ := dbs.Get("ASN.mmdb")
	e := enrich.NewEnricher([]*enrich.DB{city, asn}, enrich.ShippedResolvers())
	for _, a := range []string{"192.0.2.7", "2001:db8:1::53", "8.8.8.8"} {
		fmt.Printf("%s: %+v\n", a, e.Lookup(a))
	}
	fmt.Println(e.By())
	// Output:
	// 192.0.2.7: {Country:SE ASN:64500 ASOrg:Example Resolver Co Resolver:}
	// 2001:db8:1::53: {Country:NL ASN:64501 ASOrg:Example v6 Net Resolver:}
	// 8.8.8.8: {Country: ASN:0 ASOrg: Resolver:google}
	// GeoLite2-City 2026-11-28T00:00:00Z; GeoLite2-ASN 2026-11-28T00:00:00Z; resolvers 2026-12-03
}

// TestLookup: the first database that knows a field gives it, a
// registered country stands in for a missing one, IPv4-mapped IPv6 reads
// as IPv4, and what is not an address knows nothing.
func TestLookup(t *testing.T) {
	dir := t.TempDir()
	testenv.WriteGeoDB(t, filepath.Join(dir, "a.mmdb"), "GeoLite2-City", v1, cityNets)
	testenv.WriteGeoDB(t, filepath.Join(dir, "b.mmdb"), "GeoIP2-ISP", v1, append([]testenv.GeoNet{{CIDR: "192.0.2.0/24", Country: "FI"}}, asnNets...))
	dbs := enrich.NewDatabases(dir, nil)
	a, err := dbs.Get("a.mmdb")
	if err != nil {
		t.Fatal(err)
	}
	b, err := dbs.Get("b.mmdb")
	if err != nil {
		t.Fatal(err)
	}
	e := enrich.NewEnricher([]*enrich.DB{a, b}, enrich.ShippedResolvers())
	for addr, want := range map[string]enrich.Info{
		"192.0.2.200":          {Country: "SE"}, // a's country, not b's; outside b's AS
		"192.0.2.1":            {Country: "SE", ASN: 64500, ASOrg: "Example Resolver Co"},
		"::ffff:192.0.2.1":     {Country: "SE", ASN: 64500, ASOrg: "Example Resolver Co"},
		"198.51.100.9":         {Country: "DE"},
		"203.0.113.1":          {},
		"2606:4700:4700::1111": {Resolver: "cloudflare"},
		"9.9.9.9":              {Resolver: "quad9"},
		"not an address":       {},
		"":                     {},
	} {
		if got := e.Lookup(addr); got != want {
			t.Errorf("%q: %+v, want %+v", addr, got, want)
		}
	}
}

// TestReplacedDatabase: a database renamed over its file is read again;
// one that does not open leaves the version before in use, saying why,
// in the log once for that version of the file; a name outside the
// directory or missing is refused naming it.
func TestReplacedDatabase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "City.mmdb")
	testenv.WriteGeoDB(t, path, "GeoLite2-City", v1, cityNets)
	var logs bytes.Buffer
	dbs := enrich.NewDatabases(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	first, err := dbs.Get("City.mmdb")
	if err != nil || !first.Built.Equal(v1) {
		t.Fatalf("%v %v", first, err)
	}
	if again, _ := dbs.Get("City.mmdb"); again != first {
		t.Fatal("an unchanged file was read again")
	}
	testenv.WriteGeoDB(t, path, "GeoLite2-City", v2, []testenv.GeoNet{{CIDR: "192.0.2.0/24", Country: "NO"}})
	second, err := dbs.Get("City.mmdb")
	if err != nil || !second.Built.Equal(v2) {
		t.Fatalf("after the rename: %v %v", second, err)
	}
	if got := enrich.NewEnricher([]*enrich.DB{second}, nil).Lookup("192.0.2.1").Country; got != "NO" {
		t.Fatalf("the new version says %q", got)
	}
	// Half a file, as a copy in place leaves it for a moment.
	raw, _ := os.ReadFile(path)
	os.WriteFile(path+".half", raw[:len(raw)/2], 0o644)
	os.Rename(path+".half", path)
	kept, err := dbs.Get("City.mmdb")
	if kept != second || err == nil || !strings.Contains(err.Error(), "database City.mmdb") {
		t.Fatalf("a damaged replacement: %v, %v; want the version before and an error", kept, err)
	}
	if kept, err := dbs.Get("City.mmdb"); kept != second || err == nil {
		t.Fatalf("the damaged replacement asked again: %v, %v", kept, err)
	}
	if n := strings.Count(logs.String(), "does not open"); n != 1 || !strings.Contains(logs.String(), "db=City.mmdb") || !strings.Contains(logs.String(), "in_use=\"GeoLite2-City 2026-12-02") {
		t.Errorf("the log says %d times that the replacement does not open, want once with the version in use:\n%s", n, logs.String())
	}
	for _, name := range []string{"../City.mmdb", ".hidden", ""} {
		if _, err := dbs.Get(name); err == nil || !strings.Contains(err.Error(), "plain file") {
			t.Errorf("%q: %v", name, err)
		}
	}
	if _, err := dbs.Get("Missing.mmdb"); !errors.Is(err, enrich.ErrNoDatabase) || !strings.Contains(err.Error(), "Missing.mmdb") {
		t.Errorf("a missing database: %v", err)
	}
	if _, err := enrich.NewDatabases(dir, nil).Get("nothing"); !errors.Is(err, enrich.ErrNoDatabase) {
		t.Errorf("a missing database in a fresh table: %v", err)
	}
}

// TestResolverList: an operator's list reads prefixes and names, says
// which line is wrong, and its entries win over the shipped ones.
func TestResolverList(t *testing.T) {
	own, err := enrich.ReadResolvers(strings.NewReader("# egress\n172.253.0.0/16 google-egress\n8.8.8.8/32 mine # overrides\n"), "own")
	if err != nil {
		t.Fatal(err)
	}
	r := enrich.ShippedResolvers()
	r.Add(own)
	for addr, want := range map[string]string{"172.253.4.5": "google-egress", "8.8.8.8": "mine", "8.8.4.4": "google", "10.0.0.1": ""} {
		if got := enrich.NewEnricher(nil, r).Lookup(addr).Resolver; got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
	if _, err := enrich.ReadResolvers(strings.NewReader("8.8.8.8/32 a\n1.2.3/8 b\n"), "bad"); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad line: %v", err)
	}
}

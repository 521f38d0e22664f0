package testenv

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// GeoNet is a network of a test database and what it says of it: a
// country (as MaxMind's City and Country databases hold it), a
// registered country, an autonomous system (as the ASN database).
type GeoNet struct {
	CIDR, Country, Registered string
	ASN                       uint32
	Org                       string
}

// WriteGeoDB writes a MaxMind-format database of type typ built at built
// to path, written beside it and renamed over it as an operator replaces
// one, with MaxMind's own writer.
func WriteGeoDB(t testing.TB, path, typ string, built time.Time, nets []GeoNet) {
	t.Helper()
	w, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: typ, BuildEpoch: built.Unix(), RecordSize: 24, IncludeReservedNetworks: true,
		Description: map[string]string{"en": "Plumb test " + typ}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		_, ipnet, err := net.ParseCIDR(n.CIDR)
		if err != nil {
			t.Fatal(err)
		}
		rec := mmdbtype.Map{}
		if n.Country != "" {
			rec["country"] = mmdbtype.Map{"iso_code": mmdbtype.String(n.Country)}
		}
		if n.Registered != "" {
			rec["registered_country"] = mmdbtype.Map{"iso_code": mmdbtype.String(n.Registered)}
		}
		if n.ASN != 0 {
			rec["autonomous_system_number"] = mmdbtype.Uint32(n.ASN)
			rec["autonomous_system_organization"] = mmdbtype.String(n.Org)
		}
		if err := w.Insert(ipnet, rec); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

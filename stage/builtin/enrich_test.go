package builtin

import (
	"bytes"
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/dns/enrich"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/stage"
)

// geoVersion writes the test databases of one version: the generated
// capture's clients (10/8, 2001:db8::/32) in country, its servers in
// US, with an AS each.
func geoVersion(t *testing.T, dir string, built time.Time, country string) {
	t.Helper()
	testenv.WriteGeoDB(t, filepath.Join(dir, "City.mmdb"), "GeoLite2-City", built, []testenv.GeoNet{
		{CIDR: "10.0.0.0/8", Country: country}, {CIDR: "2001:db8::/32", Country: country},
		{CIDR: "198.41.0.0/24", Country: "US"}, {CIDR: "2001:503::/32", Country: "US"},
	})
	testenv.WriteGeoDB(t, filepath.Join(dir, "ASN.mmdb"), "GeoLite2-ASN", built, []testenv.GeoNet{
		{CIDR: "10.0.0.0/8", ASN: 64500, Org: "Clients Inc"}, {CIDR: "198.41.0.0/24", ASN: 397197, Org: "Root Ops"},
	})
}

func enrichRegistry(dir string) *stage.Registry {
	reg := registry()
	RegisterEnrich(reg, enrich.NewDatabases(dir, nil))
	return reg
}

// table reads an Arrow IPC file whole.
func table(t *testing.T, data []byte) arrow.Table {
	t.Helper()
	f, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []arrow.RecordBatch
	for i := 0; i < f.NumRecords(); i++ {
		rec, err := f.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		rec.Retain()
		recs = append(recs, rec)
	}
	return array.NewTableFromRecords(f.Schema(), recs)
}

// TestEnrichRecordsAndPairs: DNS records and transactions of a generated
// capture keep every row and column, and gain each address's country,
// AS and resolver, with the database versions in every row.
func TestEnrichRecordsAndPairs(t *testing.T) {
	dir := t.TempDir()
	geoVersion(t, dir, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), "SE")
	reg := enrichRegistry(dir)
	capture := dnsCapture(t, 1<<20)
	for _, c := range []struct{ program, addr, other string }{{"dns", "src", "dst"}, {"dnspairs", "client", "server"}} {
		t.Run(c.program, func(t *testing.T) {
			b, err := reg.New("dns", nil)
			if c.program == "dnspairs" {
				b, err = reg.New("dnspairs", nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			rows, err := run(t, b, capture)
			if err != nil {
				t.Fatal(err)
			}
			e, err := reg.New("enrich", url.Values{"db": {"City.mmdb,ASN.mmdb"}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := run(t, e, rows)
			if err != nil {
				t.Fatal(err)
			}
			in, got := table(t, rows), table(t, out)
			if in.NumRows() == 0 || got.NumRows() != in.NumRows() {
				t.Fatalf("%d rows in, %d out", in.NumRows(), got.NumRows())
			}
			for i, f := range in.Schema().Fields() {
				if got.Schema().Field(i).Name != f.Name || !array.ChunkedEqual(in.Column(i).Data(), got.Column(i).Data()) {
					t.Fatalf("column %s changed", f.Name)
				}
			}
			want := map[string][3]string{"10.": {"SE", "64500", "Clients Inc"}, "2001:db8:": {"SE", "", ""},
				"198.41.0.": {"US", "397197", "Root Ops"}, "2001:503:": {"US", "", ""}}
			for _, col := range []string{c.addr, c.other} {
				addrs, country, asn, org := testenv.ColumnStrings(t, got, col), testenv.ColumnStrings(t, got, col+"_country"), testenv.ColumnStrings(t, got, col+"_asn"), testenv.ColumnStrings(t, got, col+"_as_org")
				res := testenv.ColumnStrings(t, got, col+"_resolver")
				for i, a := range addrs {
					var w [3]string
					for prefix, v := range want {
						if strings.HasPrefix(a, prefix) {
							w = v
						}
					}
					if [3]string{country[i], asn[i], org[i]} != w || res[i] != "" {
						t.Fatalf("row %d: %s %s: %s %s %s %q, want %v", i, col, a, country[i], asn[i], org[i], res[i], w)
					}
				}
			}
			by := testenv.ColumnStrings(t, got, "enriched_by")
			const v = "GeoLite2-City 2026-11-28T00:00:00Z; GeoLite2-ASN 2026-11-28T00:00:00Z; resolvers 2026-12-03"
			if by[0] != v || by[len(by)-1] != v {
				t.Fatalf("enriched_by %q", by[0])
			}
			// Enriched twice is refused as malformed, saying why.
			if _, err := run(t, e, out); err == nil || !strings.Contains(err.Error(), "enriched already") {
				t.Fatalf("enriching twice: %v", err)
			}
		})
	}
}

// TestEnrichDatabaseSwappedUnderLoad: while blocks are enriched eight at
// a time, the databases are replaced again and again (renamed over, as
// an operator's updater does): every block keeps every row, and each is
// enriched wholly by one version, which its rows name.
func TestEnrichDatabaseSwappedUnderLoad(t *testing.T) {
	dir := t.TempDir()
	versions := map[string]string{}
	for i, c := range []string{"SE", "NO"} {
		built := time.Date(2026, 11, 28+i, 0, 0, 0, 0, time.UTC)
		versions["GeoLite2-City "+built.Format(time.RFC3339)] = c
	}
	geoVersion(t, dir, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), "SE")
	reg := enrichRegistry(dir)
	b, _ := reg.New("dns", nil)
	rows, err := run(t, b, dnsCapture(t, 256<<10))
	if err != nil {
		t.Fatal(err)
	}
	want := table(t, rows).NumRows()
	e, err := reg.New("enrich", url.Values{"db": {"City.mmdb,ASN.mmdb"}, "resolvers": {"none"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var swaps sync.WaitGroup
	swaps.Add(1)
	go func() {
		defer swaps.Done()
		for i := 1; ctx.Err() == nil; i++ {
			geoVersion(t, dir, time.Date(2026, 11, 28+i%2, 0, 0, 0, 0, time.UTC), []string{"SE", "NO"}[i%2])
		}
	}()
	var mu sync.Mutex
	seen := map[string]int{}
	var runs sync.WaitGroup
	for range 8 {
		runs.Add(1)
		go func() {
			defer runs.Done()
			for range 12 {
				var out bytes.Buffer
				if err := e.Run(context.Background(), stage.Input{}, bytes.NewReader(rows), &out); err != nil {
					t.Error(err)
					return
				}
				tbl := table(t, out.Bytes())
				by, country, src := testenv.ColumnStrings(t, tbl, "enriched_by"), testenv.ColumnStrings(t, tbl, "src_country"), testenv.ColumnStrings(t, tbl, "src")
				if tbl.NumRows() != want {
					t.Errorf("%d rows, want %d", tbl.NumRows(), want)
				}
				city, _, _ := strings.Cut(by[0], "; ")
				for i := range by {
					if by[i] != by[0] {
						t.Errorf("row %d enriched by %q, row 0 by %q", i, by[i], by[0])
						return
					}
					if strings.HasPrefix(src[i], "10.") && country[i] != versions[city] {
						t.Errorf("row %d: %s in %q by %s", i, src[i], country[i], city)
						return
					}
				}
				mu.Lock()
				seen[city]++
				mu.Unlock()
			}
		}()
	}
	runs.Wait()
	cancel()
	swaps.Wait()
	if len(seen) != 2 {
		t.Fatalf("blocks were enriched by %v: want both versions", seen)
	}
	t.Logf("blocks by version: %v", seen)
}

// TestEnrichRefusesWhatItCannotDo: a job naming a database the server
// lacks, a path, or nothing to enrich with is refused when submitted.
func TestEnrichRefusesWhatItCannotDo(t *testing.T) {
	dir := t.TempDir()
	geoVersion(t, dir, time.Now(), "SE")
	reg := enrichRegistry(dir)
	for _, c := range []struct{ args, want string }{
		{"db=Nope.mmdb", "database Nope.mmdb: no such database in the databases directory; an admin copies it there"},
		{"db=../City.mmdb", "name a plain file"},
		{"resolvers=none", "nothing to enrich with"},
		{"resolvers=../../etc/passwd", "want shipped, none, or a plain file name"},
		{"resolvers=mine.txt", "resolvers=mine.txt: no such file"},
		{"dbs=City.mmdb", "dbs"},
	} {
		args, _ := url.ParseQuery(c.args)
		if _, err := reg.New("enrich", args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
	if _, err := enrichRegistry("").New("enrich", url.Values{"db": {"City.mmdb"}}); err == nil || !strings.Contains(err.Error(), "--geoip") {
		t.Errorf("no directory: %v", err)
	}
}

package builtin

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/dns/enrich"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestFilterKeepsTheRowsAsked: a filter stage keeps the records whose
// qname is under a name of a list file (written loosely: case, final
// dots, comments) or that a where= condition selects, all columns kept;
// exclude=true keeps exactly the others.
func TestFilterKeepsTheRowsAsked(t *testing.T) {
	dir := t.TempDir()
	reg := registry()
	RegisterFilter(reg, enrich.NewDatabases(dir, nil))
	b, _ := reg.New("dns", nil)
	rows, err := run(t, b, dnsCapture(t, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	all := table(t, rows)
	qnames := testenv.ColumnStrings(t, all, "qname")
	doms := testenv.ColumnStrings(t, all, "registered_domain")
	// Two domains of the capture, and how many rows fall under them.
	a, c := doms[0], ""
	for _, d := range doms {
		if d != "" && d != a {
			c = d
			break
		}
	}
	under := func(q string, names ...string) bool {
		for _, n := range names {
			if q == n || strings.HasSuffix(q, "."+n) {
				return true
			}
		}
		return false
	}
	want := 0
	for _, q := range qnames {
		if under(q, a, c) {
			want++
		}
	}
	os.WriteFile(filepath.Join(dir, "watch.txt"), []byte("# names we watch\n"+strings.ToUpper(a)+".\n\n"+c+"  # and this\n"), 0o644)
	for _, tc := range []struct {
		args url.Values
		want int
	}{
		{url.Values{"names": {"watch.txt"}}, want},
		{url.Values{"names": {"watch.txt"}, "exclude": {"true"}}, len(qnames) - want},
		{url.Values{"where": {`[{"column": "qname", "op": "suffix", "value": "` + a + `"}]`}}, count(qnames, func(q string) bool { return under(q, a) })},
		{url.Values{"where": {`[{"column": "qr", "op": "=", "value": true}]`}, "names": {"watch.txt"}}, -1},
	} {
		f, err := reg.New("filter", tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		out, err := run(t, f, rows)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		got := table(t, out)
		if got.NumCols() != all.NumCols() {
			t.Fatalf("%v: %d columns of %d", tc.args, got.NumCols(), all.NumCols())
		}
		kept := testenv.ColumnStrings(t, got, "qname")
		if tc.want >= 0 && len(kept) != tc.want {
			t.Errorf("%v: %d rows, want %d", tc.args, len(kept), tc.want)
		}
		if tc.want < 0 {
			qr := testenv.ColumnStrings(t, got, "qr")
			for i := range kept {
				if qr[i] != "true" || !under(kept[i], a, c) {
					t.Fatalf("%v: row %s qr=%s", tc.args, kept[i], qr[i])
				}
			}
			if len(kept) == 0 || len(kept) >= want {
				t.Errorf("%v: %d rows of %d under the names", tc.args, len(kept), want)
			}
		}
	}
	for args, why := range map[string]string{
		"":           "nothing to filter on",
		"where=nope": "JSON list of conditions",
		`where=[{"column":"qname","op":"regex","value":"(a"}]`: "regex",
		"names=missing.txt":             "no such list",
		"names=../watch.txt":            "plain file name",
		"names=watch.txt&exclude=maybe": "exclude",
	} {
		v, _ := url.ParseQuery(args)
		if _, err := reg.New("filter", v); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want %q", args, err, why)
		}
	}
}

func count(v []string, f func(string) bool) int {
	n := 0
	for _, s := range v {
		if f(s) {
			n++
		}
	}
	return n
}

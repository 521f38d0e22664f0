package testenv

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// ColumnStrings returns the column name of a table as text, a value a
// row ("" for null), failing the test when the table has no such column.
func ColumnStrings(t testing.TB, tbl arrow.Table, name string) []string {
	t.Helper()
	idx := tbl.Schema().FieldIndices(name)
	if len(idx) == 0 {
		t.Fatalf("no column %s in %v", name, tbl.Schema())
	}
	var out []string
	for _, c := range tbl.Column(idx[0]).Data().Chunks() {
		for i := 0; i < c.Len(); i++ {
			if c.IsNull(i) {
				out = append(out, "")
			} else {
				out = append(out, c.ValueStr(i))
			}
		}
	}
	return out
}

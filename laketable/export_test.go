package laketable

import (
	"context"
	"time"
)

// KeepSnapshots sets how many snapshots a table keeps, and for how long,
// so a test sees them expired.
func (t *Tables) KeepSnapshots(n int, d time.Duration) { t.keepSnapshots, t.keepFor = n, d }

// DeleteUnkeptAt sets the age from which a compacted file no snapshot
// holds is deleted.
func (t *Tables) DeleteUnkeptAt(d time.Duration) { t.unkeptAfter = d }

// Snapshots is how many snapshots the table of a queue has.
func (t *Tables) Snapshots(queue string) int {
	tbl, err := t.cat.LoadTable(context.Background(), []string{Namespace, TableName(queue)})
	if err != nil {
		return -1
	}
	return len(tbl.Metadata().Snapshots())
}

// Columns names the columns of the table of a queue, each with "?" after
// it when optional.
func (t *Tables) Columns(queue string) []string {
	tbl, err := t.cat.LoadTable(context.Background(), []string{Namespace, TableName(queue)})
	if err != nil {
		return nil
	}
	var out []string
	for _, f := range tbl.Schema().Fields() {
		if f.Required {
			out = append(out, f.Name)
		} else {
			out = append(out, f.Name+"?")
		}
	}
	return out
}

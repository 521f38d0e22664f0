package builtin

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/dns/enrich"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/rowfilter"
	"github.com/plumb-dev/plumb/stage"
)

// RegisterFilter adds filter, whose name lists are files of dbs's
// directory (the --geoip directory, where an operator keeps reference
// data).
func RegisterFilter(reg *stage.Registry, dbs *enrich.Databases) {
	reg.Add(stage.Factory{
		Name: "filter",
		Doc: "Keeps the rows of an Arrow table (DNS records, transactions, any) where conditions hold: ?where= a JSON list " +
			"of conditions as the records ticket takes them ({\"column\": \"qname\", \"op\": \"suffix\", \"value\": \"example.com\"}; ops " +
			"= != < <= > >= in like suffix regex is_null not_null), and ?names=FILE, a list in the --geoip directory of names " +
			"(one a line, # comments) whose qname or any name under them matches; ?exclude=true keeps the other rows instead.",
		New: func(args url.Values) (stage.Builtin, error) {
			return newFilter(args, dbs)
		},
	})
}

// maxNames bounds a name list.
const maxNames = 1 << 20

func newFilter(args url.Values, dbs *enrich.Databases) (*Filter, error) {
	if err := stage.StrictArgs(args, "where", "names", "exclude"); err != nil {
		return nil, err
	}
	f := &Filter{}
	if v := args.Get("where"); v != "" {
		if err := json.Unmarshal([]byte(v), &f.conds); err != nil {
			return nil, fmt.Errorf("where=: want a JSON list of conditions ({\"column\": ..., \"op\": ..., \"value\": ...}): %v", err)
		}
		// Checked now against the records' schema when they name its
		// columns, so a job with a bad pattern is refused.
		empty := array.NewRecordBatch(dnsrec.Schema, rowfilter.EmptyColumns(dnsrec.Schema), 0)
		defer empty.Release()
		if _, err := rowfilter.Evaluate(empty, f.conds); err != nil && !strings.Contains(err.Error(), "no column") {
			return nil, fmt.Errorf("where=: %v", err)
		}
	}
	if name := args.Get("names"); name != "" {
		path, ok := dbs.Path(name)
		if !ok {
			return nil, fmt.Errorf("names=%q: want a plain file name in the --geoip directory", name)
		}
		file, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("names=%s: no such list in the --geoip directory; an admin copies it there", name)
		}
		defer file.Close()
		f.names = map[string]bool{}
		sc := bufio.NewScanner(io.LimitReader(file, 256<<20))
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			if n := strings.ToLower(strings.Trim(strings.TrimSpace(line), ".")); n != "" {
				if len(f.names) == maxNames {
					return nil, fmt.Errorf("names=%s: over %d names", name, maxNames)
				}
				f.names[n] = true
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("names=%s: %v", name, err)
		}
	}
	switch args.Get("exclude") {
	case "", "false":
	case "true":
		f.exclude = true
	default:
		return nil, fmt.Errorf("exclude=%q: want true or false", args.Get("exclude"))
	}
	if f.conds == nil && f.names == nil {
		return nil, fmt.Errorf("nothing to filter on: give where= or names=")
	}
	return f, nil
}

// Filter keeps the rows of Arrow tables where conditions hold.
type Filter struct {
	conds   []flight.Condition
	names   map[string]bool
	exclude bool
}

// Run implements stage.Builtin.
func (f *Filter) Run(ctx context.Context, _ stage.Input, in io.Reader, out io.Writer) error {
	return rewriteArrow(ctx, in, out, func(schema *arrow.Schema) (*arrow.Schema, func(arrow.RecordBatch) (arrow.RecordBatch, error), error) {
		var qname int
		if f.names != nil {
			idx := schema.FieldIndices("qname")
			if len(idx) == 0 {
				return nil, nil, fmt.Errorf("names= filters on qname, which the table has not")
			}
			qname = idx[0]
		}
		return schema, func(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
			keep := make([]bool, rec.NumRows())
			for i := range keep {
				keep[i] = true
			}
			if f.conds != nil {
				var err error
				if keep, err = rowfilter.Evaluate(rec, f.conds); err != nil {
					return nil, err
				}
			}
			if f.names != nil {
				names, ok := rec.Column(qname).(*array.String)
				if !ok {
					return nil, fmt.Errorf("qname is %s, not a string", rec.Column(qname).DataType())
				}
				for i := range keep {
					keep[i] = keep[i] && names.IsValid(i) && f.listed(names.Value(i))
				}
			}
			if f.exclude {
				for i := range keep {
					keep[i] = !keep[i]
				}
			}
			return rowfilter.Keep(rec, keep)
		}, nil
	}, ipc.WithZstdLevel(dnsrec.RecordsZstdLevel))
}

// listed says whether a name or a name above it is in the list.
func (f *Filter) listed(name string) bool {
	for {
		if f.names[name] {
			return true
		}
		_, rest, ok := strings.Cut(name, ".")
		if !ok {
			return false
		}
		name = rest
	}
}

// Package rowfilter keeps the rows of Arrow record batches where
// conditions hold (the records ticket's filter, and builtin:filter): =,
// !=, <, <=, >, >=, in, like, suffix (a DNS name and every name under
// it), regex (RE2), is_null, not_null. Every condition is bounded before
// it is compiled: a list, a pattern, a regular expression's size.
package rowfilter

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/plumb-dev/plumb/flight"
)

// Project returns the schema with the named columns in that order.
func Project(schema *arrow.Schema, cols []string) (*arrow.Schema, error) {
	if len(cols) == 0 {
		return schema, nil
	}
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		idx := schema.FieldIndices(c)
		if len(idx) == 0 {
			return nil, fmt.Errorf("no column %q (columns: %s)", c, columnNames(schema))
		}
		fields[i] = schema.Field(idx[0])
	}
	return arrow.NewSchema(fields, nil), nil
}

// Conform returns the batch with the columns of schema, in its order: a
// column the batch lacks is all null where the schema lets it be (a
// column newer writers added: a table's older blocks read it as null),
// and one the schema lacks is left out. A column of another type, or a
// non-nullable one missing, is an error naming it.
func Conform(rec arrow.RecordBatch, schema *arrow.Schema) (arrow.RecordBatch, error) {
	if rec.Schema().Equal(schema) {
		rec.Retain()
		return rec, nil
	}
	cols := make([]arrow.Array, schema.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, f := range schema.Fields() {
		idx := rec.Schema().FieldIndices(f.Name)
		switch {
		case len(idx) > 0 && arrow.TypeEqual(rec.Schema().Field(idx[0]).Type, f.Type):
			cols[i] = rec.Column(idx[0])
			cols[i].Retain()
		case len(idx) > 0:
			return nil, fmt.Errorf("column %q is %s here, %s in the table", f.Name, rec.Schema().Field(idx[0]).Type, f.Type)
		case !f.Nullable:
			return nil, fmt.Errorf("no column %q, which cannot be null (columns: %s)", f.Name, columnNames(rec.Schema()))
		default:
			cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, int(rec.NumRows()))
		}
	}
	return array.NewRecordBatch(schema, cols, rec.NumRows()), nil
}

func columnNames(s *arrow.Schema) string {
	var names []string
	for _, f := range s.Fields() {
		names = append(names, f.Name)
	}
	return fmt.Sprint(names)
}

// Select keeps the rows of a batch where every condition holds, and
// projects its columns.
func Select(rec arrow.RecordBatch, columns []string, conds []flight.Condition) (arrow.RecordBatch, error) {
	schema, err := Project(rec.Schema(), columns)
	if err != nil {
		return nil, err
	}
	cols := make([]arrow.Array, schema.NumFields())
	for i, f := range schema.Fields() {
		cols[i] = rec.Column(rec.Schema().FieldIndices(f.Name)[0])
	}
	if len(conds) == 0 {
		return array.NewRecordBatch(schema, cols, rec.NumRows()), nil
	}
	keep, err := Evaluate(rec, conds)
	if err != nil {
		return nil, err
	}
	projected := array.NewRecordBatch(schema, cols, rec.NumRows())
	defer projected.Release()
	return Keep(projected, keep)
}

// Keep returns the rows of rec where keep is true.
func Keep(rec arrow.RecordBatch, keep []bool) (arrow.RecordBatch, error) {
	// The kept rows as runs [start, end): each column is the
	// concatenation of its runs.
	var runs [][2]int64
	for i := 0; i < len(keep); i++ {
		if !keep[i] {
			continue
		}
		j := i
		for j < len(keep) && keep[j] {
			j++
		}
		runs = append(runs, [2]int64{int64(i), int64(j)})
		i = j
	}
	var rows int64
	for _, r := range runs {
		rows += r[1] - r[0]
	}
	cols := rec.Columns()
	out := make([]arrow.Array, len(cols))
	defer func() {
		for _, a := range out {
			if a != nil {
				a.Release()
			}
		}
	}()
	for i, c := range cols {
		if len(runs) == 0 {
			out[i] = array.MakeArrayOfNull(memory.DefaultAllocator, c.DataType(), 0)
			continue
		}
		parts := make([]arrow.Array, len(runs))
		for k, r := range runs {
			parts[k] = array.NewSlice(c, r[0], r[1])
		}
		a, err := array.Concatenate(parts, memory.DefaultAllocator)
		for _, p := range parts {
			p.Release()
		}
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return array.NewRecordBatch(rec.Schema(), out, rows), nil
}

// Evaluate returns the rows where every condition holds.
func Evaluate(rec arrow.RecordBatch, conds []flight.Condition) ([]bool, error) {
	n := int(rec.NumRows())
	keep := make([]bool, n)
	for i := range keep {
		keep[i] = true
	}
	for _, c := range conds {
		idx := rec.Schema().FieldIndices(c.Column)
		if len(idx) == 0 {
			return nil, fmt.Errorf("filter: no column %q (columns: %s)", c.Column, columnNames(rec.Schema()))
		}
		test, err := predicate(rec.Column(idx[0]), c)
		if err != nil {
			return nil, err
		}
		for i := range keep {
			if keep[i] {
				keep[i] = test(i)
			}
		}
	}
	return keep, nil
}

// MaxInValues and MaxPattern bound what one condition may ask.
const (
	MaxInValues = 10000
	MaxPattern  = 1024
)

// predicate returns whether row i of col passes a condition.
func predicate(col arrow.Array, c flight.Condition) (func(i int) bool, error) {
	if d, ok := col.(*array.Dictionary); ok && c.Op != "is_null" && c.Op != "not_null" {
		// A row of a dictionary column (instance, transport) passes
		// where its value does: each value is tested once.
		test, err := predicate(d.Dictionary(), c)
		if err != nil {
			return nil, err
		}
		holds := make([]bool, d.Dictionary().Len())
		for k := range holds {
			holds[k] = test(k)
		}
		return func(i int) bool { return d.IsValid(i) && holds[d.GetValueIndex(i)] }, nil
	}
	notNull := func(f func(i int) bool) func(i int) bool {
		return func(i int) bool { return !col.IsNull(i) && f(i) }
	}
	switch c.Op {
	case "is_null", "not_null":
		if c.Value != nil {
			return nil, fmt.Errorf("filter on %s: %s takes no value", c.Column, c.Op)
		}
		if c.Op == "is_null" {
			return col.IsNull, nil
		}
		return func(i int) bool { return !col.IsNull(i) }, nil
	case "in":
		vals, ok := c.Value.([]any)
		if !ok || len(vals) > MaxInValues {
			return nil, fmt.Errorf("filter on %s: in wants a list of at most %d values", c.Column, MaxInValues)
		}
		tests := make([]func(int) int, len(vals))
		for k, v := range vals {
			cmp, err := comparer(col, flight.Condition{Column: c.Column, Op: "=", Value: v})
			if err != nil {
				return nil, err
			}
			tests[k] = cmp
		}
		return notNull(func(i int) bool {
			for _, cmp := range tests {
				if cmp(i) == 0 {
					return true
				}
			}
			return false
		}), nil
	case "like", "suffix", "regex":
		a, isStr := col.(*array.String)
		v, ok := c.Value.(string)
		if !isStr {
			return nil, fmt.Errorf("filter on %s: %s works on string columns, not %s", c.Column, c.Op, col.DataType())
		}
		if !ok || len(v) > MaxPattern {
			return nil, fmt.Errorf("filter on %s: %s wants a string of at most %d bytes", c.Column, c.Op, MaxPattern)
		}
		if c.Op == "suffix" {
			// Names are lower-case without the final dot; "." or ""
			// is the root, above every name.
			name := strings.ToLower(strings.Trim(v, "."))
			if name == "" {
				return notNull(func(int) bool { return true }), nil
			}
			dotted := "." + name
			return notNull(func(i int) bool {
				s := a.Value(i)
				return s == name || strings.HasSuffix(s, dotted)
			}), nil
		}
		if c.Op == "regex" {
			// RE2: linear in the name whatever the pattern, and Go
			// refuses a pattern whose program would be too large.
			re, err := regexp.Compile(v)
			if err != nil {
				return nil, fmt.Errorf("filter on %s: regex %q: %v", c.Column, v, err)
			}
			return notNull(func(i int) bool { return re.MatchString(a.Value(i)) }), nil
		}
		re, err := likeRegexp(v)
		if err != nil {
			return nil, fmt.Errorf("filter on %s: like %q: %v", c.Column, v, err)
		}
		return notNull(func(i int) bool { return re.MatchString(a.Value(i)) }), nil
	}
	cmp, err := comparer(col, c)
	if err != nil {
		return nil, err
	}
	return notNull(func(i int) bool { return holds(string(c.Op), cmp(i)) }), nil
}

// likeRegexp turns an SQL LIKE pattern into an anchored regular
// expression (linear time, RE2): % is any run of characters, _ one, a
// backslash escapes the next.
func likeRegexp(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(p); i++ {
		switch ch := p[i]; ch {
		case '%':
			b.WriteString(`.*`)
		case '_':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(p) {
				return nil, errors.New("ends in an escape")
			}
			i++
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		default:
			b.WriteString(regexp.QuoteMeta(string(ch)))
		}
	}
	b.WriteString(`)$`)
	return regexp.Compile(b.String())
}

func holds(op string, c int) bool {
	switch op {
	case "=", "==":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

// comparer returns a function comparing row i of col with the condition's
// value (-1, 0, 1).
func comparer(col arrow.Array, c flight.Condition) (func(i int) int, error) {
	switch c.Op {
	case "=", "==", "!=", "<", "<=", ">", ">=":
	default:
		return nil, fmt.Errorf("filter on %s: op %q: want = != < <= > >= in like suffix regex is_null not_null", c.Column, c.Op)
	}
	bad := func(want string) error {
		return fmt.Errorf("filter on %s: value %v: want %s", c.Column, c.Value, want)
	}
	num, isNum := c.Value.(float64)
	str, isStr := c.Value.(string)
	switch a := col.(type) {
	case *array.String:
		if !isStr {
			return nil, bad("a string")
		}
		return func(i int) int { return cmpOrdered(a.Value(i), str) }, nil
	case *array.Boolean:
		v, ok := c.Value.(bool)
		if !ok {
			return nil, bad("true or false")
		}
		return func(i int) int {
			if a.Value(i) == v {
				return 0
			}
			return 1
		}, nil
	case *array.Timestamp:
		if !isStr {
			return nil, bad("an RFC 3339 time")
		}
		ts, err := time.Parse(time.RFC3339Nano, str)
		if err != nil {
			return nil, bad("an RFC 3339 time")
		}
		unit := a.DataType().(*arrow.TimestampType).Unit
		want := ts.UnixNano() / int64(unit.Multiplier())
		return func(i int) int { return cmpOrdered(int64(a.Value(i)), want) }, nil
	}
	if !isNum {
		return nil, bad("a number")
	}
	switch a := col.(type) {
	case *array.Uint8:
		return func(i int) int { return cmpOrdered(float64(a.Value(i)), num) }, nil
	case *array.Uint16:
		return func(i int) int { return cmpOrdered(float64(a.Value(i)), num) }, nil
	case *array.Uint32:
		return func(i int) int { return cmpOrdered(float64(a.Value(i)), num) }, nil
	case *array.Uint64:
		return func(i int) int { return cmpOrdered(float64(a.Value(i)), num) }, nil
	case *array.Int64:
		return func(i int) int { return cmpOrdered(float64(a.Value(i)), num) }, nil
	case *array.Int32:
		return func(i int) int { return cmpOrdered(float64(a.Value(i)), num) }, nil
	case *array.Float64:
		return func(i int) int { return cmpOrdered(a.Value(i), num) }, nil
	}
	return nil, fmt.Errorf("filter on %s: columns of type %s cannot be filtered", c.Column, col.DataType())
}

func cmpOrdered[T int64 | float64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// EmptyColumns are columns of no rows of a schema's types, for checking
// conditions against a schema before any row.
func EmptyColumns(schema *arrow.Schema) []arrow.Array {
	cols := make([]arrow.Array, schema.NumFields())
	for i, f := range schema.Fields() {
		cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, 0)
	}
	return cols
}

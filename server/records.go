package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/ipcguard"
	"github.com/plumb-dev/plumb/pcap/dnsrec"
	"github.com/plumb-dev/plumb/state"
)

// maxRecordsBlock bounds the size of one Arrow block a records read loads.
const maxRecordsBlock = 1 << 30

// maxRecordsMemory bounds what one block's batch may decompress to in a
// records read; dnsrec writes batches of a few MiB.
const maxRecordsMemory = 256 << 20

// bound is one end of a records range.
type bound struct {
	set  bool
	time time.Time
	seq  uint64
	byTS bool
}

func parseBound(raw json.RawMessage, what string) (bound, error) {
	if len(raw) == 0 {
		return bound{}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return bound{}, fmt.Errorf("%s %q: want an RFC 3339 time or a sequence number", what, s)
		}
		return bound{set: true, time: t, byTS: true}, nil
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return bound{}, fmt.Errorf("%s %s: want an RFC 3339 time or a sequence number", what, raw)
	}
	return bound{set: true, seq: n}, nil
}

// serveRecords streams the selected rows.
func (s *Service) serveRecords(ctx context.Context, raw []byte, stream aflight.FlightService_DoGetServer) error {
	var t flight.RecordsTicket
	if err := flight.DecodeStrict(raw, &t); err != nil {
		return status.Errorf(codes.InvalidArgument, "records ticket %q: %v; want {\"records\": QUEUE, \"instance\", \"from\", \"to\", \"columns\": [...], \"filter\": [{\"column\",\"op\",\"value\"}]}", truncate(raw), err)
	}
	if err := block.ValidateQueue(t.Records); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	from, err := parseBound(t.From, "from")
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	to, err := parseBound(t.To, "to")
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	var blocks []state.Block
	for after := uint64(0); ; {
		bs, err := s.db.Blocks(t.Records, after, 1000)
		if err != nil {
			return statusOf(err, codes.Internal)
		}
		for _, b := range bs {
			after = b.Serial
			switch {
			case t.Instance != "" && b.Instance != t.Instance,
				from.set && !from.byTS && b.Seq < from.seq,
				to.set && !to.byTS && b.Seq > to.seq,
				to.set && to.byTS && b.Time.After(to.time):
				continue
			}
			blocks = append(blocks, b)
		}
		if len(bs) < 1000 {
			break
		}
	}
	// Rows come in event-time order of their blocks, whatever order the
	// blocks arrived in (stage runs finish in any order).
	slices.SortStableFunc(blocks, func(a, b state.Block) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		if a.Instance != b.Instance {
			return strings.Compare(a.Instance, b.Instance)
		}
		return cmpOrdered(int64(a.Seq), int64(b.Seq))
	})
	var w *aflight.Writer
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	for _, b := range blocks {
		data, err := s.readAll(ctx, b)
		if err != nil {
			return err
		}
		f, err := ipcguard.OpenFile(data, maxRecordsMemory)
		if err != nil {
			return status.Errorf(codes.FailedPrecondition, "block %s is not an Arrow IPC file (%v); a records ticket reads queues of Arrow blocks such as dns.arrow", b.Name, err)
		}
		for i := 0; i < f.NumRecords(); i++ {
			rec, err := f.RecordBatch(i)
			if errors.Is(err, ipcguard.ErrOverBudget) {
				f.Close()
				return status.Errorf(codes.ResourceExhausted, "block %s, batch %d: %v; write Arrow blocks in smaller batches", b.Name, i, err)
			}
			if err != nil {
				f.Close()
				return status.Errorf(codes.DataLoss, "block %s, batch %d: %v", b.Name, i, err)
			}
			out, err := selectRows(rec, t, from, to)
			rec.Release()
			if err != nil {
				f.Close()
				return status.Errorf(codes.InvalidArgument, "block %s: %v", b.Name, err)
			}
			if w == nil {
				w = aflight.NewRecordWriter(stream, ipc.WithSchema(out.Schema()), ipc.WithZstd())
			}
			if out.NumRows() > 0 {
				err = w.Write(out)
			}
			out.Release()
			if err != nil {
				f.Close()
				return statusOf(err, codes.Unavailable)
			}
		}
		f.Close()
	}
	if w == nil {
		// No block: still answer with the schema, so a reader gets an
		// empty table with the right columns.
		schema, err := project(dnsrec.Schema, t.Columns)
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		w = aflight.NewRecordWriter(stream, ipc.WithSchema(schema))
		rec := array.NewRecordBatch(schema, emptyColumns(schema), 0)
		defer rec.Release()
		return statusOf(w.Write(rec), codes.Unavailable)
	}
	return nil
}

func emptyColumns(schema *arrow.Schema) []arrow.Array {
	cols := make([]arrow.Array, schema.NumFields())
	for i, f := range schema.Fields() {
		cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, 0)
	}
	return cols
}

func (s *Service) readAll(ctx context.Context, b state.Block) ([]byte, error) {
	if b.Size > maxRecordsBlock {
		return nil, status.Errorf(codes.ResourceExhausted, "block %s is %d bytes; records reads take Arrow blocks up to %d", b.Name, b.Size, maxRecordsBlock)
	}
	rc, err := s.store.Open(ctx, b.Key)
	if err != nil {
		return nil, statusOf(err, codes.Unavailable)
	}
	defer rc.Close()
	data := make([]byte, b.Size)
	if _, err := io.ReadFull(rc, data); err != nil {
		return nil, statusOf(fmt.Errorf("read block %s: %w", b.Name, err), codes.Unavailable)
	}
	return data, nil
}

// project returns the schema with the named columns in that order.
func project(schema *arrow.Schema, cols []string) (*arrow.Schema, error) {
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

func columnNames(s *arrow.Schema) string {
	var names []string
	for _, f := range s.Fields() {
		names = append(names, f.Name)
	}
	return fmt.Sprint(names)
}

// selectRows applies the time range and filter to a batch and projects
// its columns.
func selectRows(rec arrow.RecordBatch, t flight.RecordsTicket, from, to bound) (arrow.RecordBatch, error) {
	conds := slices.Clone(t.Filter)
	if from.set && from.byTS {
		conds = append(conds, flight.Condition{Column: "time", Op: ">=", Value: from.time.Format(time.RFC3339Nano)})
	}
	if to.set && to.byTS {
		conds = append(conds, flight.Condition{Column: "time", Op: "<=", Value: to.time.Format(time.RFC3339Nano)})
	}
	schema, err := project(rec.Schema(), t.Columns)
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
	keep, err := evaluate(rec, conds)
	if err != nil {
		return nil, err
	}
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
	return array.NewRecordBatch(schema, out, rows), nil
}

// evaluate returns the rows where every condition holds.
func evaluate(rec arrow.RecordBatch, conds []flight.Condition) ([]bool, error) {
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
		col := rec.Column(idx[0])
		cmp, err := comparer(col, c)
		if err != nil {
			return nil, err
		}
		for i := range keep {
			if keep[i] {
				keep[i] = !col.IsNull(i) && holds(c.Op, cmp(i))
			}
		}
	}
	return keep, nil
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
		return nil, fmt.Errorf("filter on %s: op %q: want = != < <= > >=", c.Column, c.Op)
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

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
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

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/ipcguard"
	"github.com/plumb-dev/plumb/pcap/dnspair"
	"github.com/plumb-dev/plumb/pcap/dnsrec"
	"github.com/plumb-dev/plumb/pipeline"
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

// recordsRequest is a records ticket read and checked.
type recordsRequest struct {
	flight.RecordsTicket
	from, to bound
}

const recordsForm = `{"records": QUEUE, "instance", "from", "to", "columns": [...], "filter": [{"column","op","value"}], "limit"}`

// parseRecords reads a records ticket or command; what is wrong with it
// is the ticket's fault, said before any block is read.
func parseRecords(raw []byte) (recordsRequest, error) {
	var r recordsRequest
	if err := flight.DecodeStrict(raw, &r.RecordsTicket); err != nil {
		return r, status.Errorf(codes.InvalidArgument, "records ticket %q: %v; want %s", truncate(raw), err, recordsForm)
	}
	if err := block.ValidateQueue(r.Records); err != nil {
		return r, status.Errorf(codes.InvalidArgument, "records ticket: %v", err)
	}
	var err error
	if r.from, err = parseBound(r.From, "from"); err != nil {
		return r, status.Errorf(codes.InvalidArgument, "records ticket: %v", err)
	}
	if r.to, err = parseBound(r.To, "to"); err != nil {
		return r, status.Errorf(codes.InvalidArgument, "records ticket: %v", err)
	}
	if r.Limit < 0 {
		return r, status.Errorf(codes.InvalidArgument, "records ticket: limit %d: want a positive count, or none", r.Limit)
	}
	return r, nil
}

// recordBlocks returns the blocks a request reads, in the event-time
// order of their blocks (stage runs finish in any order), skipping those
// its instance and sequence bounds leave out without reading them. An
// unknown queue is NOT_FOUND; a queue a stage will fill but has not yet
// has no blocks.
func (s *Service) recordBlocks(r recordsRequest) ([]state.Block, error) {
	if _, err := s.db.Queue(r.Records); errors.Is(err, state.ErrNotFound) {
		if s.producer(r.Records) == nil {
			return nil, status.Errorf(codes.NotFound, "no queue %s; list queues with `plumb queues`", r.Records)
		}
	} else if err != nil {
		return nil, statusOf(err, codes.Internal)
	}
	var blocks []state.Block
	for after := uint64(0); ; {
		bs, err := s.db.Blocks(r.Records, after, 1000)
		if err != nil {
			return nil, statusOf(err, codes.Internal)
		}
		for _, b := range bs {
			after = b.Serial
			switch {
			case r.Instance != "" && b.Instance != r.Instance,
				r.from.set && !r.from.byTS && b.Seq < r.from.seq,
				r.to.set && !r.to.byTS && b.Seq > r.to.seq,
				r.to.set && r.to.byTS && b.Time.After(r.to.time):
				continue
			}
			blocks = append(blocks, b)
		}
		if len(bs) < 1000 {
			break
		}
	}
	slices.SortStableFunc(blocks, func(a, b state.Block) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		if a.Instance != b.Instance {
			return strings.Compare(a.Instance, b.Instance)
		}
		return cmpOrdered(int64(a.Seq), int64(b.Seq))
	})
	return blocks, nil
}

// producer is the stage that writes a queue, or nil.
func (s *Service) producer(queue string) *pipeline.Node {
	if s.eng == nil {
		return nil
	}
	for _, n := range s.eng.Graph().Stages {
		if slices.Contains(n.Outputs, queue) {
			return n
		}
	}
	return nil
}

// recordsSchema is the table a queue's records have: its first block's
// schema, or, before any block, the schema of what its stage writes.
func (s *Service) recordsSchema(ctx context.Context, queue string, blocks []state.Block) (*arrow.Schema, error) {
	if len(blocks) > 0 {
		return s.blockSchema(ctx, blocks[0])
	}
	if n := s.producer(queue); n != nil {
		prog, _, _ := strings.Cut(n.Program.String(), "?")
		if prog == "builtin:dnspairs" {
			return dnspair.Schema, nil
		}
	}
	return dnsrec.Schema, nil
}

// maxSchemaPrefix bounds what is read of a block to learn its schema:
// an Arrow IPC file starts with its schema message.
const maxSchemaPrefix = 1 << 20

func (s *Service) blockSchema(ctx context.Context, b state.Block) (*arrow.Schema, error) {
	rc, err := s.store.Open(ctx, b.Key)
	if err != nil {
		return nil, statusOf(fmt.Errorf("block %s: %w", b.Name, err), codes.Unavailable)
	}
	defer rc.Close()
	prefix, err := io.ReadAll(io.LimitReader(rc, maxSchemaPrefix))
	if err != nil {
		return nil, statusOf(fmt.Errorf("read block %s: %w", b.Name, err), codes.Unavailable)
	}
	const magic = "ARROW1\x00\x00"
	var schema *arrow.Schema
	err = ipcguard.Under(func() error {
		if len(prefix) < len(magic) || string(prefix[:len(magic)]) != magic {
			return errors.New("no Arrow file magic")
		}
		r, err := ipc.NewReader(bytes.NewReader(prefix[len(magic):]), ipc.WithAllocator(ipcguard.NewBudget(maxSchemaPrefix)))
		if err != nil {
			return err
		}
		schema = r.Schema()
		r.Release()
		return nil
	})
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "block %s is not an Arrow IPC file (%v); a records ticket reads queues of Arrow blocks such as dns.arrow", b.Name, err)
	}
	return schema, nil
}

// check tries a request's columns and filter on a schema, so their
// errors name the ticket before any row is sent.
func (r recordsRequest) check(schema *arrow.Schema) (*arrow.Schema, error) {
	out, err := project(schema, r.Columns)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "records ticket: %v", err)
	}
	empty := array.NewRecordBatch(schema, emptyColumns(schema), 0)
	defer empty.Release()
	if _, err := evaluate(empty, r.conditions()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "records ticket: %v", err)
	}
	return out, nil
}

// conditions are the filter and the time bounds of a request.
func (r recordsRequest) conditions() []flight.Condition {
	conds := slices.Clone(r.Filter)
	if r.from.set && r.from.byTS {
		conds = append(conds, flight.Condition{Column: "time", Op: ">=", Value: r.from.time.Format(time.RFC3339Nano)})
	}
	if r.to.set && r.to.byTS {
		conds = append(conds, flight.Condition{Column: "time", Op: "<=", Value: r.to.time.Format(time.RFC3339Nano)})
	}
	return conds
}

// planRecords finds what a records request reads: the blocks, and the
// table's schema with the request tried on it. Reading rows and answering
// GetFlightInfo both start here.
func (s *Service) planRecords(ctx context.Context, r recordsRequest) (blocks []state.Block, out *arrow.Schema, err error) {
	if blocks, err = s.recordBlocks(r); err != nil {
		return nil, nil, err
	}
	schema, err := s.recordsSchema(ctx, r.Records, blocks)
	if err != nil {
		return nil, nil, err
	}
	out, err = r.check(schema)
	return blocks, out, err
}

// serveRecords streams the selected rows.
func (s *Service) serveRecords(ctx context.Context, raw []byte, stream aflight.FlightService_DoGetServer) error {
	r, err := parseRecords(raw)
	if err != nil {
		return err
	}
	blocks, outSchema, err := s.planRecords(ctx, r)
	if err != nil {
		return err
	}
	conds := r.conditions()
	w := aflight.NewRecordWriter(stream, ipc.WithSchema(outSchema), ipc.WithZstd())
	defer w.Close()
	sent := int64(0)
	for _, b := range blocks {
		if r.Limit > 0 && sent >= r.Limit {
			break
		}
		n, err := s.sendRecords(ctx, w, b, r, outSchema, conds, sent)
		sent += n
		if err != nil {
			return err
		}
	}
	if sent == 0 {
		// Still a batch, so a reader gets an empty table with the columns.
		rec := array.NewRecordBatch(outSchema, emptyColumns(outSchema), 0)
		defer rec.Release()
		return statusOf(w.Write(rec), codes.Unavailable)
	}
	return nil
}

// sendRecords sends the selected rows of one block, up to the request's
// limit (sent rows went before), and returns how many it sent.
func (s *Service) sendRecords(ctx context.Context, w *aflight.Writer, b state.Block, r recordsRequest, outSchema *arrow.Schema, conds []flight.Condition, sent int64) (int64, error) {
	data, err := s.readAll(ctx, b)
	if err != nil {
		return 0, err
	}
	f, err := ipcguard.OpenFile(data, maxRecordsMemory)
	if err != nil {
		return 0, status.Errorf(codes.FailedPrecondition, "block %s is not an Arrow IPC file (%v); a records ticket reads queues of Arrow blocks such as dns.arrow", b.Name, err)
	}
	defer f.Close()
	var n int64
	for i := 0; i < f.NumRecords() && (r.Limit == 0 || sent+n < r.Limit); i++ {
		var rec arrow.RecordBatch
		err := ipcguard.Under(func() (err error) { rec, err = f.RecordBatchAt(i); return err })
		if errors.Is(err, ipcguard.ErrOverBudget) {
			return n, status.Errorf(codes.ResourceExhausted, "block %s, batch %d: %v; write Arrow blocks in smaller batches", b.Name, i, err)
		}
		if err != nil {
			return n, status.Errorf(codes.DataLoss, "block %s, batch %d: %v", b.Name, i, err)
		}
		out, err := selectRows(rec, r.Columns, conds)
		rec.Release()
		if err != nil {
			// The ticket was checked on the first block's schema: this
			// block's table differs from it.
			return n, status.Errorf(codes.FailedPrecondition, "block %s: %v (its columns differ from the queue's first block)", b.Name, err)
		}
		if r.Limit > 0 && sent+n+out.NumRows() > r.Limit {
			cut := out.NewSlice(0, r.Limit-sent-n)
			out.Release()
			out = cut
		}
		if out.NumRows() > 0 {
			if !out.Schema().Equal(outSchema) {
				out.Release()
				return n, status.Errorf(codes.FailedPrecondition, "block %s: its columns differ from the queue's first block; read it with a ticket of its own", b.Name)
			}
			err = w.Write(out)
			n += out.NumRows()
		}
		out.Release()
		if err != nil {
			return n, statusOf(err, codes.Unavailable)
		}
	}
	return n, nil
}

// recordsInfo answers GetFlightInfo and GetSchema for a records command:
// the table's schema, and a ticket that reads it.
func (s *Service) recordsInfo(ctx context.Context, desc *aflight.FlightDescriptor) (*aflight.FlightInfo, error) {
	r, err := parseRecords(desc.Cmd)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Read, r.Records, "flight info"); err != nil {
		return nil, err
	}
	blocks, out, err := s.planRecords(ctx, r)
	if err != nil {
		return nil, err
	}
	var size int64
	for _, b := range blocks {
		size += b.Size
	}
	return &aflight.FlightInfo{
		Schema:           aflight.SerializeSchema(out, memory.DefaultAllocator),
		FlightDescriptor: desc,
		Endpoint:         []*aflight.FlightEndpoint{{Ticket: &aflight.Ticket{Ticket: desc.Cmd}}},
		TotalRecords:     -1,
		TotalBytes:       size,
	}, nil
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

// selectRows keeps the rows of a batch where every condition holds, and
// projects its columns.
func selectRows(rec arrow.RecordBatch, columns []string, conds []flight.Condition) (arrow.RecordBatch, error) {
	schema, err := project(rec.Schema(), columns)
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

// maxInValues and maxPattern bound what one condition may ask.
const (
	maxInValues = 10000
	maxPattern  = 1024
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
		if !ok || len(vals) > maxInValues {
			return nil, fmt.Errorf("filter on %s: in wants a list of at most %d values", c.Column, maxInValues)
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
		if !ok || len(v) > maxPattern {
			return nil, fmt.Errorf("filter on %s: %s wants a string of at most %d bytes", c.Column, c.Op, maxPattern)
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
	return notNull(func(i int) bool { return holds(c.Op, cmp(i)) }), nil
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
		return nil, fmt.Errorf("filter on %s: op %q: want = != < <= > >= in like suffix is_null not_null", c.Column, c.Op)
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

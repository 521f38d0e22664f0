package server

import (
	"bytes"
	"cmp"
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

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/dns/dnspair"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/ipcguard"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/rowfilter"
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
		return cmp.Compare(a.Seq, b.Seq)
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

// recordsSchema is the table a queue's records have: its newest
// selected block's schema (older blocks, written before a column was
// added, read it as null: rowfilter.Conform), or, before any block, the
// schema of what its stage writes.
func (s *Service) recordsSchema(ctx context.Context, queue string, blocks []state.Block) (*arrow.Schema, error) {
	if len(blocks) > 0 {
		return s.blockSchema(ctx, blocks[len(blocks)-1])
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
	out, err := rowfilter.Project(schema, r.Columns)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "records ticket: %v", err)
	}
	empty := array.NewRecordBatch(schema, rowfilter.EmptyColumns(schema), 0)
	defer empty.Release()
	if _, err := rowfilter.Evaluate(empty, r.conditions()); err != nil {
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
func (s *Service) planRecords(ctx context.Context, r recordsRequest) (blocks []state.Block, table, out *arrow.Schema, err error) {
	if blocks, err = s.recordBlocks(r); err != nil {
		return nil, nil, nil, err
	}
	if table, err = s.recordsSchema(ctx, r.Records, blocks); err != nil {
		return nil, nil, nil, err
	}
	out, err = r.check(table)
	return blocks, table, out, err
}

// serveRecords streams the selected rows.
func (s *Service) serveRecords(ctx context.Context, raw []byte, stream aflight.FlightService_DoGetServer) error {
	r, err := parseRecords(raw)
	if err != nil {
		return err
	}
	blocks, table, outSchema, err := s.planRecords(ctx, r)
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
		n, err := s.sendRecords(ctx, w, b, r, table, outSchema, conds, sent)
		sent += n
		if err != nil {
			return err
		}
	}
	if sent == 0 {
		// Still a batch, so a reader gets an empty table with the columns.
		rec := array.NewRecordBatch(outSchema, rowfilter.EmptyColumns(outSchema), 0)
		defer rec.Release()
		return statusOf(w.Write(rec), codes.Unavailable)
	}
	return nil
}

// sendRecords sends the selected rows of one block, up to the request's
// limit (sent rows went before), and returns how many it sent.
func (s *Service) sendRecords(ctx context.Context, w *aflight.Writer, b state.Block, r recordsRequest, table, outSchema *arrow.Schema, conds []flight.Condition, sent int64) (int64, error) {
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
		whole, err := rowfilter.Conform(rec, table)
		rec.Release()
		if err != nil {
			return n, status.Errorf(codes.FailedPrecondition, "block %s: %v; its columns differ from the newest block's: read it with a ticket of its own", b.Name, err)
		}
		out, err := rowfilter.Select(whole, r.Columns, conds)
		whole.Release()
		if err != nil {
			return n, status.Errorf(codes.FailedPrecondition, "block %s: %v", b.Name, err)
		}
		if r.Limit > 0 && sent+n+out.NumRows() > r.Limit {
			cut := out.NewSlice(0, r.Limit-sent-n)
			out.Release()
			out = cut
		}
		if out.NumRows() > 0 {
			if !out.Schema().Equal(outSchema) {
				out.Release()
				return n, status.Errorf(codes.FailedPrecondition, "block %s: its columns differ from the newest block's; read it with a ticket of its own", b.Name)
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
	blocks, _, out, err := s.planRecords(ctx, r)
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

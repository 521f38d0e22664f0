package flight

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/state"
)

const ticketForms = `{"block": NAME} or {"queue": Q, "group": G, "follow": true|false, "from": "earliest"|"latest"}`

// parseTicket decodes and validates a DoGet ticket.
func parseTicket(raw []byte) (Ticket, error) {
	var t Ticket
	if err := decodeStrict(raw, &t); err != nil {
		return t, status.Errorf(codes.InvalidArgument, "ticket %q is not valid JSON of the form %s: %v", truncate(raw), ticketForms, err)
	}
	switch {
	case t.Block != "" && t.Queue != "":
		return t, status.Errorf(codes.InvalidArgument, "ticket names both a block and a queue; want %s", ticketForms)
	case t.Block != "":
		if t.Group != "" || t.Follow || t.From != "" {
			return t, status.Errorf(codes.InvalidArgument, "a block ticket takes no group, follow or from; want %s", ticketForms)
		}
		if _, err := block.Parse(t.Block); err != nil {
			return t, status.Error(codes.InvalidArgument, err.Error())
		}
	case t.Queue != "":
		if err := block.ValidateQueue(t.Queue); err != nil {
			return t, status.Error(codes.InvalidArgument, err.Error())
		}
		if t.Group != "" {
			if err := block.ValidateGroup(t.Group); err != nil {
				return t, status.Error(codes.InvalidArgument, err.Error())
			}
		}
		switch t.From {
		case "":
			t.From = string(state.Latest)
			if t.Group == "" && !t.Follow {
				t.From = string(state.Earliest) // a plain read lists what is there
			}
		case string(state.Earliest), string(state.Latest):
		default:
			return t, status.Errorf(codes.InvalidArgument, "from %q: want \"earliest\" or \"latest\"", t.From)
		}
		if t.Visibility < 0 || t.Visibility > 86400 {
			return t, status.Errorf(codes.InvalidArgument, "visibility %v s is outside 0..86400", t.Visibility)
		}
	default:
		return t, status.Errorf(codes.InvalidArgument, "ticket names neither a block nor a queue; want %s", ticketForms)
	}
	return t, nil
}

// DoGet streams one block, a queue's blocks, or a consumer group's blocks.
func (s *Service) DoGet(tkt *aflight.Ticket, stream aflight.FlightService_DoGetServer) error {
	t, err := parseTicket(tkt.GetTicket())
	if err != nil {
		return err
	}
	ctx, cancel := mergeDone(stream.Context(), s.ctx)
	defer cancel()
	w, err := newBlockWriter(stream)
	if err != nil {
		return statusOf(err, codes.Unavailable)
	}
	switch {
	case t.Block != "":
		n, _ := block.Parse(t.Block)
		b, err := s.db.Lookup(n.ID())
		if err != nil || !sameName(b.Name, n) {
			return status.Errorf(codes.NotFound, "block %s is not stored (list a queue's blocks with the list-blocks action or `plumb blocks QUEUE`)", t.Block)
		}
		err = s.sendBlock(ctx, w, b)
		return statusOf(err, codes.Unavailable)
	case t.Group == "":
		err = s.scan(ctx, w, t)
	default:
		err = s.serveGroup(ctx, w, t)
	}
	if s.ctx.Err() != nil && stream.Context().Err() == nil {
		return status.Error(codes.Unavailable, "server is shutting down; reconnect to go on")
	}
	return statusOf(err, codes.Unavailable)
}

func sameName(stored string, n block.Name) bool {
	sn, err := block.Parse(stored)
	return err == nil && sn.String() == n.String()
}

// scan sends a queue's blocks in arrival order without delivery tracking;
// with Follow it then waits for new blocks.
func (s *Service) scan(ctx context.Context, w *blockWriter, t Ticket) error {
	var after uint64
	if t.From == string(state.Latest) {
		var err error
		if after, err = s.db.LastSerial(t.Queue); err != nil {
			return err
		}
	}
	for {
		arrived := s.arrived(t.Queue)
		page, err := s.db.Blocks(t.Queue, after, 64)
		if err != nil {
			return err
		}
		for _, b := range page {
			if err := s.sendBlock(ctx, w, b); err != nil {
				return err
			}
			after = b.Serial
		}
		if len(page) > 0 {
			continue
		}
		if !t.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-arrived:
		}
	}
}

// serveGroup hands the group's owed blocks to this reader, one reservation
// at a time, and waits for more when following.
func (s *Service) serveGroup(ctx context.Context, w *blockWriter, t Ticket) error {
	if _, err := s.db.EnsureGroup(t.Queue, t.Group, state.From(t.From)); err != nil {
		return err
	}
	vis := s.cfg.Visibility
	if t.Visibility > 0 {
		vis = time.Duration(t.Visibility * float64(time.Second))
	}
	reader := uuid.NewString()
	for {
		arrived := s.arrived(t.Queue)
		b, ok, err := s.db.Reserve(t.Queue, t.Group, reader, vis)
		if err != nil {
			return err
		}
		if ok {
			if err := s.sendBlock(ctx, w, b); err != nil {
				return err
			}
			continue
		}
		if !t.Follow {
			return nil
		}
		// Wake for a new block, or when a reservation of another reader
		// may have expired.
		wait := time.Second
		if next, err := s.db.NextExpiry(t.Queue, t.Group); err == nil && !next.IsZero() {
			wait = min(max(time.Until(next), 10*time.Millisecond), wait)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-arrived:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// sendBlock streams one block as (offset, data) batches of ChunkSize.
func (s *Service) sendBlock(ctx context.Context, w *blockWriter, b state.Block) error {
	rc, err := s.store.Open(ctx, b.Key)
	if err != nil {
		return fmt.Errorf("block %s: %w", b.Name, err)
	}
	defer rc.Close()
	meta, _ := json.Marshal(Header{Name: b.Name, Size: b.Size, SHA256: b.SHA256})
	if b.Size == 0 {
		return w.write(0, nil, meta)
	}
	var off int64
	for off < b.Size {
		n := int(min(int64(ChunkSize), b.Size-off))
		buf := w.buf[:n]
		if _, err := io.ReadFull(rc, buf); err != nil {
			return fmt.Errorf("block %s: read at offset %d of %d: %w", b.Name, off, b.Size, err)
		}
		if err := w.write(off, buf, meta); err != nil {
			return err
		}
		meta = nil
		off += int64(n)
	}
	return nil
}

// blockWriter writes block batches to a Flight stream. It sends the schema
// at once, so a reader of an empty or waiting stream sees it, and builds
// each batch around the read buffer without copying it into a builder.
type blockWriter struct {
	stream aflight.DataStreamWriter
	pw     *payloadWriter
	w      *ipc.Writer
	buf    []byte
	offs   [8]byte
	ends   [8]byte
}

func newBlockWriter(stream aflight.DataStreamWriter) (*blockWriter, error) {
	return newBlockWriterDesc(stream, nil)
}

// newBlockWriterDesc is newBlockWriter with a descriptor sent with the
// schema, as DoPut requires.
func newBlockWriterDesc(stream aflight.DataStreamWriter, desc *aflight.FlightDescriptor) (*blockWriter, error) {
	// ipc.Writer sends the schema lazily, on the first batch. Close a
	// throwaway writer to get the schema message now, and have the real
	// writer skip its own copy.
	first := &payloadWriter{stream: stream, desc: desc}
	if err := ipc.NewWriterWithPayloadWriter(first, ipc.WithSchema(BlockSchema)).Close(); err != nil {
		return nil, err
	}
	pw := &payloadWriter{stream: stream, skip: 1}
	return &blockWriter{
		stream: stream,
		pw:     pw,
		w:      ipc.NewWriterWithPayloadWriter(pw, ipc.WithSchema(BlockSchema)),
		buf:    make([]byte, ChunkSize),
	}, nil
}

func (b *blockWriter) write(off int64, data, meta []byte) error {
	rows := 1
	if data == nil {
		rows = 0
	}
	binary.LittleEndian.PutUint64(b.offs[:], uint64(off))
	binary.LittleEndian.PutUint32(b.ends[4:], uint32(len(data)))
	offCol := array.NewInt64Data(array.NewData(arrow.PrimitiveTypes.Int64, rows,
		[]*memory.Buffer{nil, memory.NewBufferBytes(b.offs[:8*rows])}, nil, 0, 0))
	defer offCol.Release()
	dataCol := array.NewBinaryData(array.NewData(arrow.BinaryTypes.Binary, rows,
		[]*memory.Buffer{nil, memory.NewBufferBytes(b.ends[:4*(rows+1)]), memory.NewBufferBytes(data)}, nil, 0, 0))
	defer dataCol.Release()
	rec := array.NewRecordBatch(BlockSchema, []arrow.Array{offCol, dataCol}, int64(rows))
	defer rec.Release()
	b.pw.meta = meta
	return b.w.Write(rec)
}

// payloadWriter sends IPC payloads as FlightData, reusing one body buffer.
type payloadWriter struct {
	stream aflight.DataStreamWriter
	skip   int
	desc   *aflight.FlightDescriptor
	meta   []byte
	body   bytes.Buffer
}

func (p *payloadWriter) Start() error { return nil }
func (p *payloadWriter) Close() error { return nil }

func (p *payloadWriter) WritePayload(pl ipc.Payload) error {
	if p.skip > 0 {
		p.skip--
		return nil
	}
	m := pl.Meta()
	defer m.Release()
	p.body.Reset()
	if err := pl.SerializeBody(&p.body); err != nil {
		return err
	}
	fd := &aflight.FlightData{DataHeader: m.Bytes(), DataBody: p.body.Bytes(), AppMetadata: p.meta, FlightDescriptor: p.desc}
	p.meta, p.desc = nil, nil
	return p.stream.Send(fd)
}

// mergeDone returns a context that ends when either parent does.
func mergeDone(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(a)
	stop := context.AfterFunc(b, func() { cancel(context.Cause(b)) })
	return ctx, func() { stop(); cancel(errors.New("done")) }
}

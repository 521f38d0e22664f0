package flight

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/mem"
)

// MsgSender is a gRPC stream (server or client side).
type MsgSender interface {
	SendMsg(m any) error
}

// bodyPrefix is the part of a batch's IPC body before the block bytes: the
// offset value (int64) and the binary column's two int32 offsets.
const bodyPrefix = 16

// BlockWriter writes block batches to a Flight stream. It sends the schema
// at once, so a reader of an empty or waiting stream sees it at once, and
// reads block bytes straight into the buffer that becomes the IPC body, so
// no byte is copied between the file and gRPC's framing.
type BlockWriter struct {
	stream MsgSender
	pw     *payloadWriter
	w      *ipc.Writer
	pool   mem.BufferPool
}

// NewBlockWriter starts a block stream on stream: it sends the schema,
// with desc when given (DoPut requires one; DoGet answers have none).
func NewBlockWriter(stream MsgSender, desc *aflight.FlightDescriptor) (*BlockWriter, error) {
	// ipc.Writer sends the schema lazily, on the first batch. Close a
	// throwaway writer to get the schema message now, and have the real
	// writer skip its own copy.
	first := &payloadWriter{stream: stream, desc: desc}
	if err := ipc.NewWriterWithPayloadWriter(first, ipc.WithSchema(BlockSchema)).Close(); err != nil {
		return nil, err
	}
	pw := &payloadWriter{stream: stream, skip: 1}
	return &BlockWriter{
		stream: stream,
		pw:     pw,
		w:      ipc.NewWriterWithPayloadWriter(pw, ipc.WithSchema(BlockSchema)),
		pool:   mem.DefaultBufferPool(),
	}, nil
}

// CopyBlock sends size bytes of r as batches of ChunkSize, meta on the
// first.
func (b *BlockWriter) CopyBlock(name string, r io.Reader, size int64, meta []byte) error {
	if size == 0 {
		return b.write(0, nil, 0, meta)
	}
	for off := int64(0); off < size; {
		n := int(min(int64(ChunkSize), size-off))
		buf := b.pool.Get(bodyPrefix + n + 7)
		if _, err := io.ReadFull(r, (*buf)[bodyPrefix:bodyPrefix+n]); err != nil {
			b.pool.Put(buf)
			return fmt.Errorf("block %s: read at offset %d of %d: %w", name, off, size, err)
		}
		if err := b.write(off, buf, n, meta); err != nil {
			return err
		}
		meta = nil
		off += int64(n)
	}
	return nil
}

// Event sends a batch of no rows whose app_metadata is meta: how a
// stream announces a window, a gap or its end between blocks.
func (b *BlockWriter) Event(meta []byte) error { return b.write(0, nil, 0, meta) }

// write sends one batch: the n block bytes at (*buf)[bodyPrefix:] (no row
// when buf is nil). It takes over buf.
func (b *BlockWriter) write(off int64, buf *[]byte, n int, meta []byte) error {
	rows := 1
	var body []byte
	if buf == nil {
		rows = 0
		body = make([]byte, bodyPrefix)
	} else {
		body = *buf
	}
	binary.LittleEndian.PutUint64(body[0:8], uint64(off))
	binary.LittleEndian.PutUint32(body[8:12], 0)
	binary.LittleEndian.PutUint32(body[12:16], uint32(n))
	offCol := array.NewInt64Data(array.NewData(arrow.PrimitiveTypes.Int64, rows,
		[]*memory.Buffer{nil, memory.NewBufferBytes(body[0 : 8*rows])}, nil, 0, 0))
	defer offCol.Release()
	dataCol := array.NewBinaryData(array.NewData(arrow.BinaryTypes.Binary, rows,
		[]*memory.Buffer{nil, memory.NewBufferBytes(body[8 : 12+4*rows]), memory.NewBufferBytes(body[bodyPrefix : bodyPrefix+n])}, nil, 0, 0))
	defer dataCol.Release()
	rec := array.NewRecordBatch(BlockSchema, []arrow.Array{offCol, dataCol}, int64(rows))
	defer rec.Release()
	b.pw.meta, b.pw.buf, b.pw.pool = meta, buf, b.pool
	return b.w.Write(rec)
}

// payloadWriter sends IPC payloads as FlightData.
type payloadWriter struct {
	stream MsgSender
	skip   int
	desc   *aflight.FlightDescriptor
	meta   []byte
	// buf is the pooled buffer the next payload's body should lie in.
	buf  *[]byte
	pool mem.BufferPool
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
	msg := &rawData{desc: p.desc, header: m.Bytes(), meta: p.meta}
	p.meta, p.desc = nil, nil
	if p.buf != nil {
		// The body is the pooled buffer when Arrow lays it out as expected
		// (checked byte for byte, without copying); otherwise copy it.
		lw := &layoutWriter{buf: *p.buf}
		if err := pl.SerializeBody(lw); err == nil && !lw.off {
			*p.buf = (*p.buf)[:lw.pos]
			msg.body = mem.NewBuffer(p.buf, p.pool)
		} else {
			p.pool.Put(p.buf)
		}
		p.buf = nil
	}
	if msg.body == nil {
		var body bytes.Buffer
		if err := pl.SerializeBody(&body); err != nil {
			return err
		}
		msg.body = mem.SliceBuffer(body.Bytes())
	}
	return p.stream.SendMsg(msg)
}

// layoutWriter checks that a body serialises to exactly the bytes already
// in buf: each write either is the next stretch of buf itself or zero
// padding that fits in buf.
type layoutWriter struct {
	buf []byte
	pos int
	off bool // the layout differs
}

func (l *layoutWriter) Write(p []byte) (int, error) {
	switch {
	case l.off || len(p) == 0:
	case l.pos+len(p) > cap(l.buf):
		l.off = true
	case &p[0] == &l.buf[:cap(l.buf)][l.pos]:
		l.pos += len(p)
	case allZero(p):
		l.buf = l.buf[:cap(l.buf)]
		clear(l.buf[l.pos : l.pos+len(p)])
		l.pos += len(p)
	default:
		l.off = true
	}
	return len(p), nil
}

func allZero(p []byte) bool {
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}

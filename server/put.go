package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/ipcguard"
	"github.com/plumb-dev/plumb/state"
)

// putMessages reads FlightData for ipc.Reader and keeps what arrow-go's own
// reader drops: app_metadata of metadata-only messages. Those are queued in
// pending, in stream order, before the record that follows them.
type putMessages struct {
	stream  aflight.FlightService_DoPutServer
	first   *aflight.FlightData
	pending [][]byte
	held    int    // bytes in pending
	meta    []byte // app_metadata of the message last returned

	schemaSeen bool
}

// Metadata-only messages a DoPut may send before a batch: block headers
// are ~150 bytes, so these leave room for many empty blocks and none
// for a client that would have the server hold its messages (200 of
// 5 MiB took a server from 24 MB to 1 GB).
const (
	maxPendingMeta  = 64
	maxMetaBytes    = 16 << 10
	maxPendingBytes = 256 << 10
)

var errTooMuchMeta = status.Errorf(codes.InvalidArgument, "DoPut: more than %d metadata-only messages or %d bytes of them before a batch, or one over %d bytes; send each block's header with its data",
	maxPendingMeta, maxPendingBytes, maxMetaBytes)

func (p *putMessages) Message() (*ipc.Message, error) {
	for {
		fd := p.first
		p.first = nil
		if fd == nil {
			var err error
			if fd, err = p.stream.Recv(); err != nil {
				return nil, err
			}
		}
		if len(fd.AppMetadata) > maxMetaBytes {
			return nil, errTooMuchMeta
		}
		if len(fd.DataHeader) == 0 {
			if len(fd.AppMetadata) > 0 {
				if len(p.pending) >= maxPendingMeta || p.held+len(fd.AppMetadata) > maxPendingBytes {
					return nil, errTooMuchMeta
				}
				p.pending = append(p.pending, fd.AppMetadata)
				p.held += len(fd.AppMetadata)
			}
			continue
		}
		p.meta = fd.AppMetadata
		allowed := []byte{ipcguard.RecordBatch}
		if !p.schemaSeen {
			allowed, p.schemaSeen = []byte{ipcguard.Schema}, true
		}
		if err := ipcguard.CheckHeader(fd.DataHeader, allowed...); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "DoPut: %v", err)
		}
		return ipc.NewMessage(memory.NewBufferBytes(fd.DataHeader), memory.NewBufferBytes(fd.DataBody)), nil
	}
}

func (p *putMessages) Retain()  {}
func (p *putMessages) Release() {}

// upload is one block being received.
type upload struct {
	name     block.Name
	hdr      flight.Header
	sum      blob.Sum
	key      string
	got      int64
	discard  bool // already stored with the same checksum: drain and answer duplicate
	staged   bool // a leased run's output: stored, not committed
	pw       *io.PipeWriter
	putDone  chan struct{} // closed when the store's Put returned
	putErr   error
	existing state.Block
}

// DoPut receives blocks, stores each once, and answers each with a
// PutResult. Several blocks may follow one another on one stream.
func (s *Service) DoPut(stream aflight.FlightService_DoPutServer) (err error) {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return statusOf(err, codes.Canceled)
	}
	desc := first.GetFlightDescriptor()
	if desc == nil || desc.Type != aflight.DescriptorCMD {
		return status.Error(codes.InvalidArgument, `DoPut needs a command descriptor {"queue": Q, "instance": I}`)
	}
	var cmd flight.PutCommand
	if err := flight.DecodeStrict(desc.Cmd, &cmd); err != nil {
		return status.Errorf(codes.InvalidArgument, `DoPut descriptor %q is not {"queue": Q, "instance": I}: %v`, truncate(desc.Cmd), truncate([]byte(err.Error())))
	}
	if err := block.ValidateQueue(cmd.Queue); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := block.ValidateInstance(cmd.Instance); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	// Authorised before anything more is read: the first message is all a
	// caller without the right gets the server to hold.
	if cmd.Lease != "" {
		err = s.allow(ctx, auth.Admin, "", "stage output to "+cmd.Queue)
	} else {
		err = s.allow(ctx, auth.Write, cmd.Queue, "upload to "+cmd.Queue)
	}
	if err != nil {
		return err
	}

	msgs := &putMessages{stream: stream, first: first}
	var cur *upload
	defer func() {
		if cur != nil {
			cur.abort(fmt.Errorf("upload of %s ended after %d of %d bytes", cur.hdr.Name, cur.got, cur.hdr.Size))
			if err == nil {
				err = status.Errorf(codes.InvalidArgument, "stream ended inside block %s after %d of its %d bytes; nothing of it was stored", cur.hdr.Name, cur.got, cur.hdr.Size)
			}
			s.log.Warn("upload interrupted", "block", cur.hdr.Name, "got", cur.got, "size", cur.hdr.Size, "err", err)
		}
	}()

	// startOrFinish handles a header: it ends a complete block and starts
	// the next.
	header := func(raw []byte) error {
		if cur != nil {
			return status.Errorf(codes.InvalidArgument, "header for a new block while block %s has %d of its %d bytes", cur.hdr.Name, cur.got, cur.hdr.Size)
		}
		u, err := s.begin(ctx, cmd, raw)
		if err != nil {
			s.ctr.uploads.WithLabelValues("refused").Inc()
			return err
		}
		cur = u
		if cur.hdr.Size == 0 {
			return s.finish(ctx, stream, &cur)
		}
		return nil
	}

	rdr, err := ipc.NewReaderFromMessageReader(msgs, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return statusOf(err, codes.InvalidArgument)
	}
	defer rdr.Release()
	if !flight.IsBlockSchema(rdr.Schema()) {
		return status.Errorf(codes.InvalidArgument, "DoPut schema is %s; want %s", rdr.Schema(), flight.BlockSchema)
	}
	for {
		ok := rdr.Next()
		for _, raw := range msgs.pending {
			if err := header(raw); err != nil {
				return err
			}
		}
		msgs.pending, msgs.held = msgs.pending[:0], 0
		if !ok {
			break
		}
		rec := rdr.RecordBatch()
		if len(msgs.meta) > 0 {
			if err := header(msgs.meta); err != nil {
				return err
			}
		}
		if rec.NumRows() == 0 {
			continue
		}
		if cur == nil {
			return status.Error(codes.InvalidArgument, "data before a block header; send {\"name\",\"size\",\"sha256\"} as app_metadata first")
		}
		if err := checkBatch(rec); err != nil {
			return status.Errorf(codes.InvalidArgument, "DoPut: a batch of block %s: %v", cur.hdr.Name, err)
		}
		offs := rec.Column(0).(*array.Int64)
		data := rec.Column(1).(*array.Binary)
		for i := 0; i < int(rec.NumRows()); i++ {
			if err := cur.write(offs.Value(i), data.Value(i)); err != nil {
				return err
			}
			if cur.got == cur.hdr.Size {
				if err := s.finish(ctx, stream, &cur); err != nil {
					return err
				}
				if i+1 < int(rec.NumRows()) {
					return status.Error(codes.InvalidArgument, "rows after the end of a block in the same batch; start each block with its own header")
				}
			}
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return statusOf(err, codes.InvalidArgument)
	}
	return nil
}

// checkBatch checks a client's batch before its values are read: the
// columns hold as many rows as the batch says, and their offsets and
// buffers are consistent (a bit flip made offsets reach outside the data).
func checkBatch(rec arrow.RecordBatch) error {
	if rec.NumCols() != 2 {
		return fmt.Errorf("%d columns, want 2", rec.NumCols())
	}
	for i, col := range rec.Columns() {
		if int64(col.Len()) != rec.NumRows() {
			return fmt.Errorf("column %d holds %d rows of the batch's %d", i, col.Len(), rec.NumRows())
		}
		if err := array.ValidateFull(col); err != nil {
			return fmt.Errorf("column %d: %v", i, err)
		}
	}
	return nil
}

// MaxKernelDropped bounds the kernel drops one block may claim (2^40, a
// trillion packets): a window sums them over up to 2^22 blocks without
// overflow.
const MaxKernelDropped = 1 << 40

// parseHeader decodes and validates a block header sent on a stream for
// cmd's queue and instance.
func parseHeader(cmd flight.PutCommand, raw []byte, maxSize int64) (flight.Header, block.Name, blob.Sum, error) {
	var (
		h   flight.Header
		sum blob.Sum
	)
	if err := flight.DecodeStrict(raw, &h); err != nil {
		return h, block.Name{}, sum, status.Errorf(codes.InvalidArgument, `block header %q is not {"name","size","sha256"}: %v`, truncate(raw), err)
	}
	n, err := block.Parse(h.Name)
	if err != nil {
		return h, n, sum, status.Error(codes.InvalidArgument, err.Error())
	}
	if n.Queue != cmd.Queue || n.Instance != cmd.Instance {
		return h, n, sum, status.Errorf(codes.InvalidArgument, "block %s belongs to queue %q instance %q, but this stream is for queue %q instance %q",
			h.Name, n.Queue, n.Instance, cmd.Queue, cmd.Instance)
	}
	if h.Size < 0 || h.Size > maxSize {
		return h, n, sum, status.Errorf(codes.InvalidArgument, "block %s: size %d is outside 0..%d", h.Name, h.Size, maxSize)
	}
	if sum, err = blob.ParseSum(h.SHA256); err != nil {
		return h, n, sum, status.Errorf(codes.InvalidArgument, "block %s: %v", h.Name, err)
	}
	if h.KernelDropped < 0 || h.KernelDropped > MaxKernelDropped {
		// Summed over a window's blocks: a claim past any kernel's count
		// would only overflow the sum.
		return h, n, sum, status.Errorf(codes.InvalidArgument, "block %s: kernel_dropped %d is outside 0..%d", h.Name, h.KernelDropped, int64(MaxKernelDropped))
	}
	return h, n, sum, nil
}

// begin validates a header and starts receiving the block.
func (s *Service) begin(ctx context.Context, cmd flight.PutCommand, raw []byte) (*upload, error) {
	h, n, sum, err := parseHeader(cmd, raw, s.cfg.MaxBlockSize)
	if err != nil {
		return nil, err
	}
	u := &upload{name: n, hdr: h, sum: sum, key: blob.BlockKey(n, sum)}
	if cmd.Lease != "" {
		// A worker's output: stored now, published when its run commits.
		if err := s.allow(ctx, auth.Admin, "", "stage output "+n.String()); err != nil {
			return nil, err
		}
		if s.eng == nil {
			return nil, status.Error(codes.Unimplemented, "this server runs no pipelines")
		}
		if err := s.eng.Staged(cmd.Lease, n); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		u.staged = true
	} else if err := s.allow(ctx, auth.Write, n.Queue, "upload block "+n.String()); err != nil {
		return nil, err
	} else if n.Seq < 1 || n.Seq > block.MaxSourceSeq {
		return nil, status.Errorf(codes.InvalidArgument, "block %s: sequence number %d is outside 1..%d; agents number a site's blocks from 1", n, n.Seq, uint64(block.MaxSourceSeq))
	} else if err := s.claimSite(ctx, n); err != nil {
		return nil, err
	}
	old, err := s.db.Lookup(n.ID())
	switch {
	case u.staged:
	case err == nil && old.SHA256 == sum.String() && old.Size == h.Size:
		u.discard, u.existing = true, old
		return u, nil
	case err == nil:
		return nil, status.Errorf(codes.FailedPrecondition, "block %s is already stored with sha256 %s (%d bytes); refusing sha256 %s (%d bytes). Nothing was overwritten; send it under a new sequence number or instance",
			old.Name, old.SHA256, old.Size, sum, h.Size)
	case !errors.Is(err, state.ErrNotFound):
		return nil, statusOf(err, codes.Internal)
	}
	if err := s.space.room(h.Size, "block "+n.String()); err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	u.pw, u.putDone = pw, make(chan struct{})
	go func() {
		defer close(u.putDone)
		u.putErr = s.store.Put(ctx, u.key, pr, h.Size, sum)
		pr.CloseWithError(u.putErr) // unblock the writer if Put gave up early
	}()
	return u, nil
}

func (u *upload) write(off int64, data []byte) error {
	if off != u.got {
		return status.Errorf(codes.InvalidArgument, "block %s: batch at offset %d, want %d", u.hdr.Name, off, u.got)
	}
	if u.got+int64(len(data)) > u.hdr.Size {
		return status.Errorf(codes.InvalidArgument, "block %s: more bytes than its declared size %d", u.hdr.Name, u.hdr.Size)
	}
	u.got += int64(len(data))
	if u.discard {
		return nil
	}
	if _, err := u.pw.Write(data); err != nil {
		return u.wait(err)
	}
	return nil
}

// wait returns the store's verdict on the block.
func (u *upload) wait(writeErr error) error {
	<-u.putDone
	err := u.putErr
	if err == nil {
		err = writeErr
	}
	if errors.Is(err, blob.ErrMismatch) {
		return status.Errorf(codes.InvalidArgument, "block %s does not match its header: %v; nothing was stored, re-send it", u.hdr.Name, err)
	}
	return statusOf(err, codes.Unavailable)
}

func (u *upload) abort(why error) {
	if u.pw != nil {
		u.pw.CloseWithError(why)
		<-u.putDone
	}
}

// finish waits for the blob to be durable, commits the metadata and
// answers the client.
func (s *Service) finish(ctx context.Context, stream aflight.FlightService_DoPutServer, cur **upload) error {
	u := *cur
	*cur = nil
	st := state.Duplicate
	if !u.discard {
		u.pw.Close()
		if err := u.wait(nil); err != nil {
			return err
		}
		if u.staged {
			s.ctr.uploads.WithLabelValues("staged").Inc()
			res, _ := json.Marshal(flight.PutResult{Name: u.hdr.Name, Status: "staged"})
			return stream.Send(&aflight.PutResult{AppMetadata: res})
		}
		_, commitSt, err := s.db.CommitBlock(state.Block{
			Name: u.hdr.Name, Queue: u.name.Queue, Instance: u.name.Instance, Seq: u.name.Seq,
			Time: u.name.Time, Size: u.hdr.Size, SHA256: u.sum.String(), Key: u.key, KernelDropped: u.hdr.KernelDropped,
			Final: u.hdr.Final,
		})
		if errors.Is(err, state.ErrConflict) {
			// Lost a race with another upload of the same identity; our blob
			// has its own key, so removing it touches nothing stored.
			s.store.Delete(context.WithoutCancel(ctx), u.key)
		}
		if err != nil {
			return statusOf(err, codes.Internal)
		}
		st = commitSt
		if st == state.Stored {
			s.log.Debug("block stored", "block", u.hdr.Name, "size", u.hdr.Size)
		}
	}
	s.ctr.uploads.WithLabelValues(string(st)).Inc()
	res, _ := json.Marshal(flight.PutResult{Name: u.hdr.Name, Status: string(st)})
	return stream.Send(&aflight.PutResult{AppMetadata: res})
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

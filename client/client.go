package client

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/flight"

	"github.com/apache/arrow-go/v18/arrow/array"
	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/block"
)

// Client is a Go client of a Plumb server.
type Client struct {
	conn   *grpc.ClientConn
	fc     aflight.FlightServiceClient
	tokens *tokenHolder // the token of Security.User's login
	// Retries is how many times a put is tried again after a transient
	// error (the server unreachable or restarting). Safe because the
	// server answers a re-sent block as a duplicate.
	Retries int
	addr    string // as dialled
	sec     Security
}

// Dial connects to a server at addr (host:port). The connection is made
// lazily; the first call reports an unreachable server.
//
// addr may name several servers sharing their metadata, comma-separated
// ("a:8815,b:8815"), or one DNS name with several addresses: the client
// talks to one of them, chosen at random so that many clients spread,
// and moves to another when it becomes unreachable. A call under way
// when its server dies fails (a put is retried, see Retries).
func Dial(addr string) (*Client, error) { return DialSecure(addr, Security{}) }

// DialSecure connects with TLS and a token as sec says.
func DialSecure(addr string, sec Security) (*Client, error) {
	tokens := &tokenHolder{}
	secOpts, err := sec.dialOptions(tokens)
	if err != nil {
		return nil, err
	}
	target, servers, err := dialTarget(addr)
	if err != nil {
		return nil, err
	}
	if servers != nil {
		secOpts = append(secOpts, grpc.WithResolvers(servers))
	}
	conn, err := grpc.NewClient(target, append(secOpts,
		// One server at a time (its calls and leases go together), a
		// random one of those named, the next when it fails.
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"pick_first": {"shuffleAddressList": true}}]}`),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.ForceCodecV2(flight.Codec())),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}),
		// Reconnect within seconds after an outage, not gRPC's default of
		// up to two minutes: agents and workers should notice a server
		// that is back.
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second,
			Backoff: backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second}}),
		grpc.WithWriteBufferSize(1<<20),
		grpc.WithReadBufferSize(1<<20),
		grpc.WithInitialWindowSize(flight.StreamWindow),
		grpc.WithInitialConnWindowSize(flight.ConnWindow),
		// Errors match the package's sentinels (errors.Is(err, ErrNotFound)).
		grpc.WithChainUnaryInterceptor(unaryErrors),
		grpc.WithChainStreamInterceptor(streamErrors),
	)...)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", addr, err)
	}
	c := &Client{conn: conn, fc: aflight.NewFlightServiceClient(conn), tokens: tokens, Retries: 5, addr: addr, sec: sec}
	if sec.User != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.Login(ctx, sec.User, sec.Secret); err != nil {
			conn.Close()
			return nil, fmt.Errorf("log in to %s as %s: %w", addr, sec.User, err)
		}
	}
	return c, nil
}

// dialTarget is the gRPC target of addr: itself for one server (a DNS
// name's addresses all count), or a resolver of the comma-separated list.
func dialTarget(addr string) (string, *manual.Resolver, error) {
	if !strings.Contains(addr, ",") {
		return addr, nil, nil
	}
	var st resolver.State
	for a := range strings.SplitSeq(addr, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return "", nil, fmt.Errorf("server %q in %q: %w; want host:port,host:port", a, addr, err)
		}
		// Each server's certificate is checked against its own name, not
		// the whole list (unless Security.ServerName says otherwise).
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a, ServerName: host}}})
	}
	r := manual.NewBuilderWithScheme("plumb-servers")
	r.InitialState(st)
	return r.Scheme() + ":///" + addr, r, nil
}

// Servers returns a client of each server of a comma-separated address,
// with the same security: a remote worker leases from the server that
// schedules, whichever that is, where other callers may use any. For one
// address it returns the client itself. The caller closes the others.
func (c *Client) Servers() ([]*Client, error) {
	if !strings.Contains(c.addr, ",") {
		return []*Client{c}, nil
	}
	var out []*Client
	for a := range strings.SplitSeq(c.addr, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		one, err := DialSecure(a, c.sec)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, err
		}
		out = append(out, one)
	}
	return out, nil
}

// Flight is the arrow-go Flight client underneath, for calls this
// package has no method for. It carries the same login and TLS.
func (c *Client) Flight() aflight.FlightServiceClient { return c.fc }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Source is one block to upload: its name and a way to read its bytes
// (again, if the upload is retried).
type Source struct {
	Name string
	Size int64
	// SHA256 in hex; computed by reading Open once when empty.
	SHA256 string
	// KernelDropped is what the capturing kernel dropped while the block
	// was cut (capture agents say; zero otherwise).
	KernelDropped int64
	// Final marks the last block of a finite source (flight.Header).
	Final bool
	Open  func() (io.ReadCloser, error)
}

// BytesSource is a block held in memory.
func BytesSource(name string, data []byte) Source {
	return Source{Name: name, Size: int64(len(data)),
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
}

// FileSource describes a file whose base name is a block name.
func FileSource(path string) (Source, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Source{}, err
	}
	name := filepath.Base(path)
	if _, err := block.Parse(name); err != nil {
		return Source{}, fmt.Errorf("file %s: %w; name the file as a block or pass --name", path, err)
	}
	return Source{Name: name, Size: fi.Size(), Open: func() (io.ReadCloser, error) { return os.Open(path) }}, nil
}

func (s *Source) hash() error {
	if s.SHA256 != "" {
		return nil
	}
	rc, err := s.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		return fmt.Errorf("block %s: %w", s.Name, err)
	}
	if n != s.Size {
		return fmt.Errorf("block %s: read %d bytes, expected %d (did the file change?)", s.Name, n, s.Size)
	}
	s.SHA256 = hex.EncodeToString(h.Sum(nil))
	return nil
}

// Put uploads blocks of one queue and instance on one stream and returns
// the server's answer for each, retrying transient failures with backoff.
func (c *Client) Put(ctx context.Context, srcs ...Source) ([]flight.PutResult, error) {
	return c.put(ctx, "", srcs)
}

// PutStaged uploads the outputs of a leased stage run: their bytes are
// stored but no block exists until the run commits (CommitLease).
func (c *Client) PutStaged(ctx context.Context, lease string, srcs ...Source) ([]flight.PutResult, error) {
	return c.put(ctx, lease, srcs)
}

func (c *Client) put(ctx context.Context, lease string, srcs []Source) ([]flight.PutResult, error) {
	if len(srcs) == 0 {
		return nil, nil
	}
	first, err := block.Parse(srcs[0].Name)
	if err != nil {
		return nil, err
	}
	for i := range srcs {
		n, err := block.Parse(srcs[i].Name)
		if err != nil {
			return nil, err
		}
		if n.Queue != first.Queue || n.Instance != first.Instance {
			return nil, fmt.Errorf("block %s is not of queue %s instance %s; put each queue and instance separately", srcs[i].Name, first.Queue, first.Instance)
		}
		if err := srcs[i].hash(); err != nil {
			return nil, err
		}
	}
	var results []flight.PutResult
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		done := len(results)
		more, err := c.putOnce(ctx, flight.PutCommand{Queue: first.Queue, Instance: first.Instance, Lease: lease}, srcs[done:])
		results = append(results, more...)
		if err == nil || attempt >= c.Retries || !Transient(err) || ctx.Err() != nil {
			return results, err
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return results, ctx.Err()
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// Transient reports whether an error may go away if the call is retried.
func Transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

func (c *Client) putOnce(parent context.Context, pc flight.PutCommand, srcs []Source) ([]flight.PutResult, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	stream, err := c.fc.DoPut(ctx)
	if err != nil {
		return nil, err
	}
	// Results arrive while blocks are still being sent; read them as they
	// come so the server's error is seen as soon as it is sent.
	type answer struct {
		res []flight.PutResult
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		var a answer
		for {
			pr, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				a.err = err
				break
			}
			var r flight.PutResult
			if err := json.Unmarshal(pr.AppMetadata, &r); err != nil {
				a.err = fmt.Errorf("server sent a PutResult that is not JSON: %q", pr.AppMetadata)
				break
			}
			a.res = append(a.res, r)
		}
		answers <- a
	}()
	cmd, _ := json.Marshal(pc)
	sendErr := c.send(stream, &aflight.FlightDescriptor{Type: aflight.DescriptorCMD, Cmd: cmd}, srcs)
	if sendErr == nil {
		sendErr = stream.CloseSend()
	} else {
		// The server's status, not the send error, says what went wrong.
		stream.CloseSend()
		if errors.Is(sendErr, io.EOF) {
			sendErr = nil
		} else {
			cancel()
		}
	}
	a := <-answers
	if sendErr != nil && (a.err == nil || status.Code(a.err) == codes.Canceled && parent.Err() == nil) {
		// The stream was cancelled here, over the failed send: the send's
		// error is the answer, not the cancellation it caused (which an
		// agent took for the server refusing the block, for ever).
		a.err = sendErr
	}
	if a.err == nil && len(a.res) != len(srcs) {
		a.err = status.Errorf(codes.Unavailable, "server answered %d of %d blocks", len(a.res), len(srcs))
	}
	return a.res, a.err
}

func (c *Client) send(stream aflight.FlightService_DoPutClient, desc *aflight.FlightDescriptor, srcs []Source) error {
	w, err := flight.NewBlockWriter(stream, desc)
	if err != nil {
		return err
	}
	for _, src := range srcs {
		if err := sendSource(w, src); err != nil {
			return err
		}
	}
	return nil
}

func sendSource(w *flight.BlockWriter, src Source) error {
	meta, _ := json.Marshal(flight.Header{Name: src.Name, Size: src.Size, SHA256: src.SHA256, KernelDropped: src.KernelDropped, Final: src.Final})
	rc, err := src.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	return w.CopyBlock(src.Name, rc, src.Size, meta)
}

// Get returns a stream of one block. Read it with Next and Read.
func (c *Client) Get(ctx context.Context, name string) (*Stream, error) {
	return c.DoGet(ctx, flight.Ticket{Block: name})
}

// WindowStream reads a queue's complete windows as a consumer group:
// each window's header (a WindowHeader, to Stream.OnEvent) comes before
// its blocks. Acknowledge the blocks with Ack, as for a group.
func (c *Client) WindowStream(ctx context.Context, t WindowTicket) (*Stream, error) {
	return c.doGet(ctx, t)
}

// DoGet opens a block stream for a ticket.
func (c *Client) DoGet(ctx context.Context, t flight.Ticket) (*Stream, error) { return c.doGet(ctx, t) }

// giveBack gives back to the group every block the named read holds
// unacked. It may fail: the server then gives them back at the
// visibility timeout, as for a client that died.
func (c *Client) giveBack(t flight.Ticket) {
	ctx, cancel := context.WithTimeout(context.Background(), giveBackWait)
	defer cancel()
	c.action(ctx, flight.ActNack, flight.AckRequest{Queue: t.Queue, Group: t.Group, Reader: t.Reader}, func([]byte) error { return nil })
}

// giveBackWait bounds how long an early return of Consume waits to give
// its blocks back.
const giveBackWait = 2 * time.Second

// doGet opens a stream of blocks for any ticket.
func (c *Client) doGet(ctx context.Context, ticket any) (*Stream, error) {
	raw, err := json.Marshal(ticket)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	rpc, err := c.fc.DoGet(ctx, &aflight.Ticket{Ticket: raw})
	if err != nil {
		cancel()
		return nil, err
	}
	rr, err := aflight.NewRecordReader(rpc)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Stream{rr: rr, cancel: cancel}, nil
}

// Ack acknowledges blocks for a consumer group.
func (c *Client) Ack(ctx context.Context, queue, group string, names ...string) (int, error) {
	var res struct {
		Acked int `json:"acked"`
	}
	err := c.action(ctx, flight.ActAck, flight.AckRequest{Queue: queue, Group: group, Blocks: names}, func(raw []byte) error {
		return json.Unmarshal(raw, &res)
	})
	return res.Acked, err
}

// Nack gives blocks this group's reader holds but could not finish back
// to the group at once, for any of its readers to take next (the
// attempt stays counted), rather than after the visibility timeout. It
// returns how many were held. Consume gives back what it holds unacked
// when it returns early, those the server sent ahead included; a Stream
// of a group read closed early gives back what was still being sent.
func (c *Client) Nack(ctx context.Context, queue, group string, names ...string) (int, error) {
	var res struct {
		Released int `json:"released"`
	}
	err := c.action(ctx, flight.ActNack, flight.AckRequest{Queue: queue, Group: group, Blocks: names}, func(raw []byte) error {
		return json.Unmarshal(raw, &res)
	})
	return res.Released, err
}

// LastSeq returns the highest sequence number the server holds for an
// instance of a queue.
func (c *Client) LastSeq(ctx context.Context, queue, instance string) (flight.LastSeqResult, error) {
	var res flight.LastSeqResult
	err := c.action(ctx, flight.ActLastSeq, flight.PutCommand{Queue: queue, Instance: instance}, func(raw []byte) error {
		return json.Unmarshal(raw, &res)
	})
	return res, err
}

// QueueStats returns one queue's counts.
func (c *Client) QueueStats(ctx context.Context, queue string) (flight.QueueStats, error) {
	var st flight.QueueStats
	err := c.action(ctx, flight.ActQueueStats, map[string]string{"queue": queue}, func(raw []byte) error {
		return json.Unmarshal(raw, &st)
	})
	return st, err
}

// Blocks lists a queue's blocks in arrival order.
func (c *Client) Blocks(ctx context.Context, queue string) ([]Block, error) {
	var out []Block
	var after uint64
	for {
		n := len(out)
		err := c.action(ctx, flight.ActListBlocks, flight.ListBlocksRequest{Queue: queue, After: after, Limit: 1000}, func(raw []byte) error {
			var b Block
			if err := json.Unmarshal(raw, &b); err != nil {
				return err
			}
			out = append(out, b)
			after = b.Serial
			return nil
		})
		if err != nil || len(out)-n < 1000 {
			return out, err
		}
	}
}

// Queues lists every queue with its counts.
func (c *Client) Queues(ctx context.Context) ([]flight.QueueStats, error) {
	stream, err := c.fc.ListFlights(ctx, &aflight.Criteria{})
	if err != nil {
		return nil, err
	}
	var out []flight.QueueStats
	for {
		fi, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		var st flight.QueueStats
		if err := json.Unmarshal(fi.AppMetadata, &st); err != nil {
			return out, fmt.Errorf("flight %v: app_metadata is not queue stats: %w", fi.FlightDescriptor.GetPath(), err)
		}
		out = append(out, st)
	}
}

func (c *Client) action(ctx context.Context, a flight.Action, body any, each func([]byte) error) error {
	err := c.actionOnce(ctx, a, body, each)
	if err == nil || status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), flight.NotScheduling) || !strings.Contains(c.addr, ",") {
		return err
	}
	// Asked a server that does not schedule: ask the others, which is
	// how `plumb windows --server a,b,c` finds the open windows.
	servers, serr := c.Servers()
	if serr != nil {
		return err
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for _, s := range servers {
		if err = s.actionOnce(ctx, a, body, each); err == nil || !strings.Contains(err.Error(), flight.NotScheduling) {
			return err
		}
	}
	return err
}

func (c *Client) actionOnce(ctx context.Context, a flight.Action, body any, each func([]byte) error) error {
	raw, _ := json.Marshal(body)
	stream, err := c.fc.DoAction(ctx, &aflight.Action{Type: a.Name, Body: raw})
	if err != nil {
		return err
	}
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := each(r.Body); err != nil {
			return err
		}
	}
}

// Stream reads blocks from a DoGet. Next moves to the next block; Read
// reads its bytes and checks its SHA-256 at the end.
type Stream struct {
	// OnEvent, when set, receives the app_metadata of batches that are
	// not blocks: stream events (gaps, skips, late blocks) and window
	// headers. Without it they are skipped.
	OnEvent func(meta []byte)

	rr     *aflight.Reader
	cancel context.CancelFunc
	hdr    flight.Header
	left   int64
	chunk  []byte
	h      hash.Hash
	err    error
}

// Next advances to the next block, skipping what is unread of the current
// one. It returns false at the end of the stream or on error (see Err).
func (s *Stream) Next() bool {
	if s.err != nil {
		return false
	}
	if s.left > 0 || len(s.chunk) > 0 {
		if _, err := io.Copy(io.Discard, s); err != nil {
			s.err = err
			return false
		}
	}
	for {
		if !s.rr.Next() {
			s.err = s.rr.Err()
			return false
		}
		meta := s.rr.LatestAppMetadata()
		if len(meta) == 0 {
			s.err = errors.New("protocol error: a block's first batch has no header")
			return false
		}
		s.hdr = flight.Header{}
		if err := json.Unmarshal(meta, &s.hdr); err != nil {
			s.err = fmt.Errorf("protocol error: block header %q: %w", meta, err)
			return false
		}
		if s.hdr.Name != "" {
			break
		}
		if s.OnEvent != nil { // not a block: an event or a window header
			s.OnEvent(meta)
		}
	}
	s.left, s.h = s.hdr.Size, sha256.New()
	s.take()
	return true
}

// take makes the current record's data the current chunk.
func (s *Stream) take() {
	rec := s.rr.RecordBatch()
	s.chunk = nil
	if rec.NumRows() > 0 {
		s.chunk = rec.Column(1).(*array.Binary).Value(0)
	}
}

// Header describes the current block.
func (s *Stream) Header() flight.Header { return s.hdr }

// Read reads the current block. It returns io.EOF at the block's end, or an
// error if the bytes do not match the block's SHA-256.
func (s *Stream) Read(p []byte) (int, error) {
	if s.h == nil {
		if s.err != nil {
			return 0, s.Err()
		}
		return 0, errors.New("no current block: call Next first")
	}
	for len(s.chunk) == 0 {
		if s.left == 0 {
			if got := hex.EncodeToString(s.h.Sum(nil)); got != s.hdr.SHA256 {
				return 0, fmt.Errorf("block %s: received sha256 %s, header says %s", s.hdr.Name, got, s.hdr.SHA256)
			}
			return 0, io.EOF
		}
		if !s.rr.Next() {
			err := s.rr.Err()
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("block %s: stream ended with %d bytes left: %w", s.hdr.Name, s.left, err)
		}
		if len(s.rr.LatestAppMetadata()) > 0 {
			return 0, fmt.Errorf("protocol error: block %s: next header before its last %d bytes", s.hdr.Name, s.left)
		}
		s.take()
	}
	n := copy(p, s.chunk)
	s.chunk = s.chunk[n:]
	s.left -= int64(n)
	s.h.Write(p[:n])
	if s.left < 0 {
		return n, fmt.Errorf("block %s: more bytes than its header's %d", s.hdr.Name, s.hdr.Size)
	}
	return n, nil
}

// Err returns the error that ended the stream, nil at a clean end.
func (s *Stream) Err() error {
	if s.err == io.EOF {
		return nil
	}
	return s.err
}

// Close ends the stream.
func (s *Stream) Close() {
	s.cancel()
	s.rr.Release()
}

// Consume reads a consumer group's blocks (t.Group must be set) and calls
// fn with each block's header and bytes. A block is acknowledged only after
// fn returns nil and its bytes all arrived and matched their SHA-256;
// otherwise it stays owed, and when Consume returns it goes back to the
// group at once with every block the server sent ahead, for the group's
// next read (after the visibility timeout only if the server cannot be
// told). Consume returns when the stream ends, fn fails, or ctx ends.
func (c *Client) Consume(ctx context.Context, t flight.Ticket, fn func(flight.Header, io.Reader) error) (err error) {
	if t.Group == "" {
		return errors.New("Consume needs a consumer group in the ticket")
	}
	if t.Reader == "" {
		// Named, so that an early return gives back what the server
		// sent ahead even when it had finished sending.
		t.Reader = cryptorand.Text()
	}
	s, err := c.DoGet(ctx, t)
	if err != nil {
		return err
	}
	defer func() {
		s.Close()
		if err != nil {
			c.giveBack(t)
		}
	}()
	for s.Next() {
		h := s.Header()
		if err := fn(h, s); err != nil {
			return fmt.Errorf("block %s: %w", h.Name, err)
		}
		// fn may not have read to the end; the checksum is only known there.
		if _, err := io.Copy(io.Discard, s); err != nil {
			return err
		}
		if _, err := c.Ack(ctx, t.Queue, t.Group, h.Name); err != nil {
			return fmt.Errorf("ack %s: %w", h.Name, err)
		}
	}
	return s.Err()
}

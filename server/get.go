package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/google/uuid"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/admission"
	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/state"
)

const ticketForms = `{"block": NAME}, {"queue": Q, "group": G, "follow": true|false, "from": "earliest"|"latest"}, {"records": Q, ...} {"window": Q, "spec": {...}, "group": G} or {"stream": Q, "instance", "consumer"}`

// parseTicket decodes and validates a DoGet ticket.
func parseTicket(raw []byte) (flight.Ticket, error) {
	var t flight.Ticket
	if err := flight.DecodeStrict(raw, &t); err != nil {
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
			t.From = flight.FromLatest
			if t.Group == "" && !t.Follow {
				t.From = flight.FromEarliest // a plain read lists what is there
			}
		default:
			if err := t.From.Valid(); err != nil {
				return t, status.Error(codes.InvalidArgument, err.Error())
			}
		}
		if t.Visibility < 0 || t.Visibility > 24*time.Hour {
			return t, status.Errorf(codes.InvalidArgument, "visibility %v is outside 0..24h", t.Visibility)
		}
		if t.Reader != "" {
			if t.Group == "" {
				return t, status.Errorf(codes.InvalidArgument, "a ticket's reader names a group read; this ticket has no group")
			}
			if err := flight.ValidateReader(t.Reader); err != nil {
				return t, status.Error(codes.InvalidArgument, err.Error())
			}
		}
	default:
		return t, status.Errorf(codes.InvalidArgument, "ticket names neither a block nor a queue; want %s", ticketForms)
	}
	return t, nil
}

// DoGet streams one block, a queue's blocks, or a consumer group's blocks.
func (s *Service) DoGet(tkt *aflight.Ticket, stream aflight.FlightService_DoGetServer) error {
	return guardSends(stream, s.cfg.SendTimeout, func(stream aflight.FlightService_DoGetServer) error {
		return s.doGet(tkt, stream)
	})
}

func (s *Service) doGet(tkt *aflight.Ticket, stream aflight.FlightService_DoGetServer) error {
	var probe struct {
		Records string `json:"records"`
		Window  string `json:"window"`
		Stream  string `json:"stream"`
	}
	if json.Unmarshal(tkt.GetTicket(), &probe) == nil && (probe.Records != "" || probe.Window != "" || probe.Stream != "") {
		for _, q := range []string{probe.Records, probe.Window, probe.Stream} {
			if q == "" {
				continue
			}
			if err := s.allow(stream.Context(), auth.Read, q, "read"); err != nil {
				return err
			}
		}
		ctx, cancel := mergeDone(stream.Context(), s.ctx)
		defer cancel()
		switch {
		case probe.Window != "":
			return s.serveWindows(ctx, tkt.GetTicket(), stream)
		case probe.Stream != "":
			return s.serveStream(ctx, tkt.GetTicket(), stream)
		}
		return s.serveRecords(ctx, tkt.GetTicket(), stream)
	}
	t, err := parseTicket(tkt.GetTicket())
	if err != nil {
		return err
	}
	q := t.Queue
	if t.Block != "" {
		n, _ := block.Parse(t.Block)
		q = n.Queue
	}
	if err := s.allow(stream.Context(), auth.Read, q, "read"); err != nil {
		return err
	}
	ctx, cancel := mergeDone(stream.Context(), s.ctx)
	defer cancel()
	w, err := flight.NewBlockWriter(stream, nil)
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
func (s *Service) scan(ctx context.Context, w *flight.BlockWriter, t flight.Ticket) error {
	var after, held uint64
	at, fromTime := t.From.Time()
	if t.From == flight.FromLatest || fromTime {
		last, err := s.db.LastSerial(t.Queue)
		if err != nil {
			return err
		}
		if fromTime {
			held = last // of these, the blocks before the start are passed over
		} else {
			after = last
		}
	}
	for {
		arrived := s.db.Changed(t.Queue)
		page, err := s.db.Blocks(t.Queue, after, 64)
		if err != nil {
			return err
		}
		for _, b := range page {
			if fromTime && b.Serial <= held && b.Time.Before(at) {
				after = b.Serial
				continue
			}
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
func (s *Service) serveGroup(ctx context.Context, w *flight.BlockWriter, t flight.Ticket) error {
	vis := s.cfg.Visibility
	if t.Visibility > 0 {
		vis = t.Visibility
		if vis > s.cfg.MaxVisibility {
			return status.Errorf(codes.InvalidArgument, "ticket visibility %v is over this server's maximum of %v; ask for less (a block not acked by then goes to another reader)", t.Visibility, s.cfg.MaxVisibility)
		}
	}
	if _, err := s.useGroup(ctx, t.Queue, t.Group, state.From(t.From), "read", true); err != nil {
		return err
	}
	reader := uuid.NewString()
	named := &readerSent{} // remembered nowhere unless the client named the read
	if t.Reader != "" {
		named = s.readers.start(t.Reader, t.Queue, t.Group, reader, s.cfg.Now())
		defer func() { s.readers.end(named, s.cfg.Now(), vis) }()
	}
	// sent are the blocks this reader sent lately: when the client goes
	// away (a break out of its loop, a close) those it did not ack go back
	// to the group at once, as a Kafka consumer's do on close, instead of
	// after the visibility timeout. Acked ones are done and stay so.
	var sent []uint64
	defer func() {
		if ctx.Err() != nil && len(sent) > 0 {
			if err := s.db.Release(t.Queue, t.Group, reader, sent...); err != nil {
				s.log.Warn("a reader went away; its unacked blocks go back to the group after the visibility timeout", "queue", t.Queue, "group", t.Group, "err", err)
			}
		}
	}()
	// after is the last serial this reader reserved: the next reserve
	// looks past it, not again over the blocks it holds, except every
	// 64th and when nothing is past it (then from the floor, for blocks
	// whose reservation expired).
	var after uint64
	for n := 1; ; n++ {
		arrived := s.db.Changed(t.Queue)
		from := after
		if n%64 == 0 {
			from = 0
		}
		// Small blocks are reserved several at once, one commit for
		// them all: a reader of tiny blocks paid a commit, and an
		// fsync, for each, and fell behind a busy queue. The bound in
		// bytes keeps the reservations of those sent last from
		// running out while the first are sent.
		ahead, err := s.db.ReserveAfter(t.Queue, t.Group, reader, vis, from, reserveAhead, reserveAheadBytes)
		if err == nil && len(ahead) == 0 && from != 0 {
			ahead, err = s.db.ReserveAfter(t.Queue, t.Group, reader, vis, 0, reserveAhead, reserveAheadBytes)
		}
		if err != nil {
			return err
		}
		for i, b := range ahead {
			after = max(after, b.Serial)
			if err := s.sendBlock(ctx, w, b); err != nil {
				// This reader will not deliver them: let another have
				// them now rather than after the visibility timeout.
				s.db.Release(t.Queue, t.Group, reader, b.Serial)
				s.db.Unreserve(t.Queue, t.Group, reader, serials(ahead[i+1:])...)
				return err
			}
			if sent = append(sent, b.Serial); len(sent) > maxSentKept {
				sent = slices.Delete(sent, 0, len(sent)-maxSentKept) // long acked or expired
			}
			s.readers.sent(named, b.Serial)
		}
		if len(ahead) > 0 {
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

// maxSentKept bounds the blocks a group reader remembers sending, to give
// back those not acked when its client goes away.
const maxSentKept = 4096

// A group reader reserves up to reserveAhead blocks at once, holding at
// most reserveAheadBytes together (a larger block goes alone).
const (
	reserveAhead      = 32
	reserveAheadBytes = 256 << 10
)

func serials(bs []state.Block) []uint64 {
	out := make([]uint64, len(bs))
	for i, b := range bs {
		out[i] = b.Serial
	}
	return out
}

// sendBlock streams one block as (offset, data) batches of ChunkSize.
func (s *Service) sendBlock(ctx context.Context, w *flight.BlockWriter, b state.Block) error {
	// Reads wait for a transfer slot; under least-laxity-first a read that
	// can no longer meet its deadline is refused now, not served late.
	done, err := s.adm.AcquireFor(ctx, reader(ctx), b.Size)
	if errors.Is(err, admission.ErrHopeless) {
		return status.Errorf(codes.DeadlineExceeded, "block %s: %v; ask with a later deadline", b.Name, err)
	}
	if err != nil {
		return err
	}
	var sent int64
	defer func() { done(sent) }()
	rc, err := s.store.Open(ctx, b.Key)
	if errors.Is(err, blob.ErrNotFound) && s.eng != nil {
		// Lost bytes of a derived block: the reader waits while its
		// stage makes them again from the inputs.
		if rerr := s.eng.Recompute(ctx, b); rerr != nil {
			if errors.Is(rerr, engine.ErrInputsExpired) {
				return status.Error(codes.FailedPrecondition, rerr.Error())
			}
			return fmt.Errorf("block %s: its bytes are lost and recomputing failed: %w", b.Name, rerr)
		}
		if b2, lerr := s.db.Lookup(b.ID()); lerr == nil {
			b = b2 // a stage that is not deterministic made other bytes
		}
		rc, err = s.store.Open(ctx, b.Key)
	}
	if err != nil {
		return fmt.Errorf("block %s: %w", b.Name, err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if lim := s.readLimiter(); lim != nil {
		r = &paced{ctx: ctx, r: rc, lim: lim}
	}
	meta, _ := json.Marshal(flight.Header{Name: b.Name, Size: b.Size, SHA256: b.SHA256})
	if err := w.CopyBlock(b.Name, r, b.Size, meta); err != nil {
		return err
	}
	sent = b.Size
	return nil
}

// reader is whose share of the read slots a read takes: its user, or
// on a server without users its peer's address.
func reader(ctx context.Context) string {
	if id, ok := AuthFromContext(ctx); ok {
		return "user " + id.User
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		host, _, err := net.SplitHostPort(p.Addr.String())
		if err == nil {
			return "host " + host
		}
		return "host " + p.Addr.String()
	}
	return ""
}

// mergeDone returns a context that ends when either parent does.
func mergeDone(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(a)
	stop := context.AfterFunc(b, func() { cancel(context.Cause(b)) })
	return ctx, func() { stop(); cancel(errors.New("done")) }
}

// paced reads no faster than its limiter lets: the server's --read-rate,
// one token bucket for all reads, so one reader alone gets the whole rate
// and many share it (each transfer used to be held to rate ÷ slots).
type paced struct {
	ctx context.Context
	r   io.Reader
	lim *rate.Limiter
}

// paceQuantum is the most bytes a read waits for at once. Reservations
// of the bucket are served in order, so a whole 1 MiB chunk reserved at
// once made a small read arriving behind three of them wait for all
// their bytes; in quanta, concurrent transfers interleave.
const paceQuantum = 64 << 10

func (p *paced) Read(b []byte) (int, error) {
	if q := min(p.lim.Burst(), paceQuantum); len(b) > q {
		b = b[:q]
	}
	n, err := p.r.Read(b)
	if n > 0 {
		if werr := p.lim.WaitN(p.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// readLimiter is the shared token bucket of --read-rate, or nil.
func (s *Service) readLimiter() *rate.Limiter {
	if s.cfg.ReadRate <= 0 {
		return nil
	}
	s.limOnce.Do(func() {
		// A tenth of a second's worth per wait keeps the rate smooth;
		// at least 64 KiB so small rates still move whole chunks.
		burst := max(int(s.cfg.ReadRate/10), 64<<10)
		s.lim = rate.NewLimiter(rate.Limit(s.cfg.ReadRate), burst)
	})
	return s.lim
}

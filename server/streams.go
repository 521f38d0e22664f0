package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

// validStream checks the names a stream action's body gives.
func validStream(r flight.StreamRequest) error {
	return errors.Join(block.ValidateQueue(r.Queue), block.ValidateInstance(r.Instance), block.ValidateGroup(r.Consumer))
}

// streamAction runs one stream action on an opened cursor.
func (s *Service) streamAction(ctx context.Context, a flight.Action, body []byte, fn func(r flight.StreamRequest) (any, error)) (any, error) {
	r, err := decode(a, body, validStream)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Read, r.Queue, a.Name); err != nil {
		return nil, err
	}
	if _, err := s.useConsumer(ctx, r.Queue, r.Instance, r.Consumer, r.From, a.Name); err != nil {
		return nil, err
	}
	res, err := fn(r)
	switch {
	case errors.Is(err, state.ErrNotPresent), errors.Is(err, state.ErrPresent):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case err != nil:
		return nil, statusOf(err, codes.InvalidArgument)
	}
	return res, nil
}

func (s *Service) peekNext(ctx context.Context, body []byte) (any, error) {
	return s.streamAction(ctx, flight.ActPeekNext, body, func(r flight.StreamRequest) (any, error) {
		return s.db.PeekNext(r.Queue, r.Instance, r.Consumer)
	})
}

func (s *Service) processNext(ctx context.Context, body []byte) (any, error) {
	return s.streamAction(ctx, flight.ActProcessNext, body, func(r flight.StreamRequest) (any, error) {
		b, err := s.db.ProcessNext(r.Queue, r.Instance, r.Consumer)
		return flight.ProcessResult{Seq: b.Seq, Block: b.Name, Ticket: flight.Ticket{Block: b.Name}}, err
	})
}

func (s *Service) commitStream(ctx context.Context, body []byte) (any, error) {
	return s.streamAction(ctx, flight.ActCommit, body, func(r flight.StreamRequest) (any, error) {
		c, err := s.db.Commit(r.Queue, r.Instance, r.Consumer, r.Seq)
		if err == nil {
			s.streamDelivered(block.ID{Queue: r.Queue, Instance: r.Instance, Seq: r.Seq}, r.Consumer)
		}
		return c, err
	})
}

// streamDelivered records, for the latency accounting, a stream consumer
// committing a block.
func (s *Service) streamDelivered(id block.ID, consumer string) {
	if s.eng == nil {
		return
	}
	if b, err := s.db.Lookup(id); err == nil {
		s.eng.StreamDelivered(b, consumer)
	}
}

func (s *Service) skipStream(ctx context.Context, body []byte) (any, error) {
	return s.streamAction(ctx, flight.ActSkip, body, func(r flight.StreamRequest) (any, error) {
		return s.db.Skip(r.Queue, r.Instance, r.Consumer)
	})
}

func (s *Service) putState(ctx context.Context, body []byte) (any, error) {
	return s.streamAction(ctx, flight.ActPutState, body, func(r flight.StreamRequest) (any, error) {
		c, err := s.db.PutState(r.Queue, r.Instance, r.Consumer, r.State)
		return c.State, err
	})
}

// getState reads a cursor without moving it; a stage's cursor may be
// read too (it shows how far the stage is), by whoever may read the queue.
func (s *Service) getState(ctx context.Context, body []byte) (any, error) {
	r, err := decode(flight.ActGetState, body, validStream)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Read, r.Queue, flight.ActGetState.Name); err != nil {
		return nil, err
	}
	c, err := s.db.GetCursor(r.Queue, r.Instance, r.Consumer)
	if errors.Is(err, state.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "get-state: no stream consumer %s of %s/%s; process-next or a stream ticket opens one", r.Consumer, r.Queue, r.Instance)
	}
	if err != nil {
		return nil, statusOf(err, codes.InvalidArgument)
	}
	if s.authz != nil && c.Others(caller(ctx), callerID(ctx), s.may(ctx, auth.Admin, r.Queue)) {
		s.audit.Warn("denied", "audit", true, "user", caller(ctx), "action", flight.ActGetState.Name, "queue", r.Queue, "consumer", r.Consumer)
		return nil, status.Errorf(codes.PermissionDenied, "get-state: stream consumer %s of %s/%s %v, %s; use a consumer name of your own", r.Consumer, r.Queue, r.Instance, state.ErrOwned, c.Owner)
	}
	return c, nil
}

// deleteState deletes a stream consumer: its owner or an admin may; a
// stage's consumer is the engine's.
func (s *Service) deleteState(ctx context.Context, body []byte) (any, error) {
	r, err := decode(flight.ActDeleteState, body, validStream)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Read, r.Queue, flight.ActDeleteState.Name); err != nil {
		return nil, err
	}
	if strings.HasPrefix(r.Consumer, stageGroupPrefix) {
		return nil, status.Errorf(codes.PermissionDenied, "delete-state: %s is a pipeline stage's consumer; retract the job instead", r.Consumer)
	}
	c, err := s.db.GetCursor(r.Queue, r.Instance, r.Consumer)
	if errors.Is(err, state.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "delete-state: no stream consumer %s of %s/%s", r.Consumer, r.Queue, r.Instance)
	}
	if err != nil {
		return nil, statusOf(err, codes.InvalidArgument)
	}
	if s.authz != nil && c.Others(caller(ctx), callerID(ctx), s.may(ctx, auth.Admin, r.Queue)) {
		s.audit.Warn("denied", "audit", true, "user", caller(ctx), "action", flight.ActDeleteState.Name, "queue", r.Queue, "consumer", r.Consumer)
		return nil, status.Errorf(codes.PermissionDenied, "delete-state: stream consumer %s of %s/%s %v, %s", r.Consumer, r.Queue, r.Instance, state.ErrOwned, c.Owner)
	}
	if err := s.db.DeleteCursor(r.Queue, r.Instance, r.Consumer); err != nil {
		return nil, statusOf(err, codes.Internal)
	}
	s.audit.Info("stream consumer deleted", "audit", true, "user", caller(ctx), "queue", r.Queue, "instance", r.Instance, "consumer", r.Consumer)
	return map[string]bool{"deleted": true}, nil
}

func (s *Service) listState(ctx context.Context, body []byte) (any, error) {
	r, err := decode[flight.QueueRequest](flight.ActListState, body, nil)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Read, r.Queue, flight.ActListState.Name); err != nil {
		return nil, err
	}
	cs, err := s.db.Cursors(r.Queue)
	if s.authz != nil && !s.may(ctx, auth.Admin, r.Queue) {
		// Others' consumers and their state are theirs.
		cs = slices.DeleteFunc(cs, func(c state.Cursor) bool { return c.Owner != caller(ctx) })
	}
	return listOf(cs), err
}

func (s *Service) checkpoint(ctx context.Context, body []byte) (any, error) {
	return s.streamAction(ctx, flight.ActCheckpoint, body, func(r flight.StreamRequest) (any, error) {
		return s.db.SaveCheckpointAt(r.Queue, r.Instance, r.Consumer, r.Seq, r.State)
	})
}

func (s *Service) serveStream(ctx context.Context, raw []byte, stream aflight.FlightService_DoGetServer) error {
	var t flight.StreamTicket
	if err := flight.DecodeStrict(raw, &t); err != nil {
		return status.Errorf(codes.InvalidArgument, "stream ticket %q: %v; want {\"stream\": QUEUE, \"instance\", \"consumer\", \"from\", \"follow\", \"gap\": {\"wait\": \"10s\", \"then\": \"skip\"|\"stop\"}}", truncate(raw), err)
	}
	for _, err := range []error{block.ValidateQueue(t.Stream), block.ValidateInstance(t.Instance), block.ValidateGroup(t.Consumer)} {
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "stream ticket: %v", err)
		}
	}
	from := "checkpoint"
	if len(t.From) > 0 {
		var str string
		if json.Unmarshal(t.From, &str) == nil {
			from = str
		} else {
			from = string(t.From)
		}
	}
	if t.Gap != nil && t.Gap.Then != "skip" && t.Gap.Then != "stop" {
		return status.Errorf(codes.InvalidArgument, "stream ticket: gap.then %q: want skip or stop", t.Gap.Then)
	}
	var gapWait time.Duration
	if t.Gap != nil && t.Gap.Wait != "" {
		d, err := pipeline.ParseDuration(t.Gap.Wait)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "stream ticket: gap.wait %q: %v", t.Gap.Wait, err)
		}
		gapWait = time.Duration(d)
	}
	if _, err := s.useConsumer(ctx, t.Stream, t.Instance, t.Consumer, from, "stream"); err != nil {
		return err
	}
	w, err := flight.NewBlockWriter(stream, nil)
	if err != nil {
		return statusOf(err, codes.Unavailable)
	}
	event := func(e flight.StreamEvent) error {
		meta, _ := json.Marshal(e)
		return w.Event(meta)
	}
	var holeSince time.Time // when the stream reached the current hole
	var holeAt uint64
	for {
		changed := s.db.Changed(t.Stream)
		p, err := s.db.PeekNext(t.Stream, t.Instance, t.Consumer)
		if err != nil {
			return statusOf(err, codes.Internal)
		}
		if len(p.Late) > 0 {
			if err := event(flight.StreamEvent{Event: "late", Next: p.Next, Late: p.Late}); err != nil {
				return err
			}
		}
		if p.Present {
			b, err := s.db.ProcessNext(t.Stream, t.Instance, t.Consumer)
			if err != nil {
				return statusOf(err, codes.Internal)
			}
			if err := s.sendBlock(ctx, w, b); err != nil {
				return statusOf(err, codes.Unavailable)
			}
			if _, err := s.db.Commit(t.Stream, t.Instance, t.Consumer, b.Seq); err != nil {
				return statusOf(err, codes.Internal)
			}
			if s.eng != nil {
				s.eng.StreamDelivered(b, t.Consumer)
			}
			continue
		}
		wait := time.Minute
		if p.Gap > 1 { // a hole, with blocks after it
			if holeAt != p.Next || holeSince.IsZero() {
				holeAt, holeSince = p.Next, s.cfg.Now()
				if err := event(flight.StreamEvent{Event: "gap", Next: p.Next, Missing: uint64(p.Gap - 1)}); err != nil {
					return err
				}
			}
			if t.Gap != nil {
				left := gapWait - s.cfg.Now().Sub(holeSince)
				if left <= 0 {
					if t.Gap.Then == "stop" {
						return event(flight.StreamEvent{Event: "stopped", Next: p.Next, Missing: uint64(p.Gap - 1)})
					}
					if _, err := s.db.Skip(t.Stream, t.Instance, t.Consumer); err != nil {
						return statusOf(err, codes.Internal)
					}
					if err := event(flight.StreamEvent{Event: "skipped", Next: p.Next}); err != nil {
						return err
					}
					holeSince = time.Time{}
					continue
				}
				wait = min(wait, left)
			}
		} else if !t.Follow {
			return nil // caught up
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

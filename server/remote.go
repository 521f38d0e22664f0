package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/stage"
)

func (s *Service) workerEngine(ctx context.Context, action string) (*engine.Engine, error) {
	if err := s.allow(ctx, auth.Admin, "", action); err != nil {
		return nil, err
	}
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	if s.shared && !eng.Scheduling() {
		// Leases live in the scheduler's memory: a worker must talk to
		// it, and fails over to another address on Unavailable.
		return nil, s.notScheduling(action, "give the worker every server's address")
	}
	return eng, nil
}

// notScheduling is the answer to a call only the scheduling server can
// take: Unavailable, naming the server that schedules.
func (s *Service) notScheduling(action, what string) error {
	who := "no server holds the duty now; one takes it within --duty-ttl"
	if ds, err := s.db.Duties(); err == nil {
		for _, d := range ds {
			if d.Name == "scheduling" && s.cfg.Now().Before(d.Until) {
				who = "the server that does is " + d.Holder
			}
		}
	}
	return status.Errorf(codes.Unavailable, "%s: %v (%s); %s", action, engine.ErrNotScheduling, who, what)
}

func leaseErr(err error) error {
	if errors.Is(err, engine.ErrLeaseGone) {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return err
}

func (s *Service) lease(ctx context.Context, body []byte) (any, error) {
	eng, err := s.workerEngine(ctx, flight.ActLease.Name)
	if err != nil {
		return nil, err
	}
	var h flight.Hello
	if err := flight.DecodeStrict(body, &h); err != nil || h.Worker == "" || h.Slots <= 0 {
		return nil, badBody(flight.ActLease.Name, body, errors.Join(err, errors.New(`want {"worker","host","slots">0,"stages","missing"}`)))
	}
	deadline := time.After(flight.LeaseWait)
	for {
		changed, staged := s.db.Changed(""), eng.StagesChanged()
		l, ok, err := eng.Lease(ctx, h)
		if err != nil || ok {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ctx.Done():
			return flight.Lease{}, nil
		case <-deadline:
			return flight.Lease{}, nil // nothing now; ask again
		case <-changed:
		case <-staged:
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (s *Service) leaseAction(ctx context.Context, a flight.Action, body []byte, fn func(*engine.Engine, flight.LeaseRequest) error) (any, error) {
	eng, err := s.workerEngine(ctx, a.Name)
	if err != nil {
		return nil, err
	}
	req, err := decode[flight.LeaseRequest](a, body, nil)
	if err != nil {
		return nil, err
	}
	if err := fn(eng, req); err != nil {
		return nil, leaseErr(err)
	}
	return map[string]string{"lease": req.Lease}, nil
}

func (s *Service) heartbeat(ctx context.Context, body []byte) (any, error) {
	return s.leaseAction(ctx, flight.ActHeartbeat, body, func(e *engine.Engine, r flight.LeaseRequest) error { return e.Heartbeat(r.Lease) })
}

func (s *Service) commitLease(ctx context.Context, body []byte) (any, error) {
	return s.leaseAction(ctx, flight.ActCommitLease, body, func(e *engine.Engine, r flight.LeaseRequest) error {
		cpu := time.Duration(r.CPUSeconds * float64(time.Second))
		if r.Part {
			return e.CommitLeasePart(r.Lease, cpu)
		}
		if err := stage.CheckDrops(r.Dropped); err != nil {
			return badBody(flight.ActCommitLease.Name, body, err)
		}
		if err := e.CheckTally(r.Tally); err != nil {
			return badBody(flight.ActCommitLease.Name, body, err)
		}
		return e.CommitLease(ctx, r.Lease, engine.LeaseResult{Outputs: r.Outputs, CPU: cpu, Carry: r.Carry, Parted: r.Parted, Dropped: r.Dropped, Tally: r.Tally})
	})
}

func (s *Service) failLease(ctx context.Context, body []byte) (any, error) {
	return s.leaseAction(ctx, flight.ActFailLease, body, func(e *engine.Engine, r flight.LeaseRequest) error {
		if r.Release {
			return e.ReleaseLease(r.Lease)
		}
		return e.FailLease(r.Lease, r.Error)
	})
}

func (s *Service) workers(ctx context.Context, _ []byte) (any, error) {
	eng, err := s.workerEngine(ctx, flight.ActWorkers.Name)
	if err != nil {
		return nil, err
	}
	return listOf(eng.Workers()), nil
}

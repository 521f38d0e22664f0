package flight

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/engine"
)

// LeaseWait is how long a lease request waits for work before answering
// that there is none.
const LeaseWait = 5 * time.Second

// LeaseRequest is the body of heartbeat, commit-lease and fail-lease.
type LeaseRequest struct {
	Lease   string          `json:"lease"`
	Outputs []engine.Output `json:"outputs,omitempty"` // commit-lease
	Error   string          `json:"error,omitempty"`   // fail-lease
	Release bool            `json:"release,omitempty"` // fail-lease: give it back, no attempt counted
	// CPUSeconds is what the run's programs used on the worker
	// (commit-lease), for plumb stats.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// Carry is what a sequential stage's run left for the site's next
	// block (commit-lease).
	Carry []byte `json:"carry,omitempty"`
}

func (s *Service) workerEngine(ctx context.Context, action string) (*engine.Engine, error) {
	if err := s.allow(ctx, auth.Admin, "", action); err != nil {
		return nil, err
	}
	return s.engine()
}

func leaseErr(err error) error {
	if errors.Is(err, engine.ErrLeaseGone) {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return err
}

func (s *Service) lease(ctx context.Context, body []byte) (any, error) {
	eng, err := s.workerEngine(ctx, "lease")
	if err != nil {
		return nil, err
	}
	var h engine.Hello
	if err := decodeStrict(body, &h); err != nil || h.Worker == "" || h.Slots <= 0 {
		return nil, badBody("lease", body, errors.Join(err, errors.New(`want {"worker","host","slots">0,"stages","missing"}`)))
	}
	deadline := time.After(LeaseWait)
	for {
		changed := s.db.Changed("")
		l, ok, err := eng.Lease(ctx, h)
		if err != nil || ok {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ctx.Done():
			return engine.Lease{}, nil
		case <-deadline:
			return engine.Lease{}, nil // nothing now; ask again
		case <-changed:
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (s *Service) leaseAction(ctx context.Context, name string, body []byte, fn func(*engine.Engine, LeaseRequest) error) (any, error) {
	eng, err := s.workerEngine(ctx, name)
	if err != nil {
		return nil, err
	}
	var req LeaseRequest
	if err := decodeStrict(body, &req); err != nil {
		return nil, badBody(name, body, err)
	}
	if err := fn(eng, req); err != nil {
		return nil, leaseErr(err)
	}
	return map[string]string{"lease": req.Lease}, nil
}

func (s *Service) heartbeat(ctx context.Context, body []byte) (any, error) {
	return s.leaseAction(ctx, "heartbeat", body, func(e *engine.Engine, r LeaseRequest) error { return e.Heartbeat(r.Lease) })
}

func (s *Service) commitLease(ctx context.Context, body []byte) (any, error) {
	return s.leaseAction(ctx, "commit-lease", body, func(e *engine.Engine, r LeaseRequest) error {
		return e.CommitLease(ctx, r.Lease, r.Outputs, time.Duration(r.CPUSeconds*float64(time.Second)), r.Carry)
	})
}

func (s *Service) failLease(ctx context.Context, body []byte) (any, error) {
	return s.leaseAction(ctx, "fail-lease", body, func(e *engine.Engine, r LeaseRequest) error {
		if r.Release {
			return e.ReleaseLease(r.Lease)
		}
		return e.FailLease(r.Lease, r.Error)
	})
}

func (s *Service) workers(ctx context.Context, _ []byte) (any, error) {
	eng, err := s.workerEngine(ctx, "workers")
	if err != nil {
		return nil, err
	}
	return listOf(eng.Workers()), nil
}

// Lease asks for a stage run; ok is false when there was none within
// LeaseWait.
func (c *Client) Lease(ctx context.Context, h engine.Hello) (engine.Lease, bool, error) {
	var l engine.Lease
	err := c.action(ctx, "lease", h, func(raw []byte) error { return json.Unmarshal(raw, &l) })
	return l, err == nil && l.ID != "", err
}

// LeaseDo runs heartbeat, commit-lease or fail-lease.
func (c *Client) LeaseDo(ctx context.Context, action string, req LeaseRequest) error {
	return c.action(ctx, action, req, func([]byte) error { return nil })
}

// Workers lists the remote workers the server has seen lately.
func (c *Client) Workers(ctx context.Context) ([]engine.WorkerInfo, error) {
	return collect[engine.WorkerInfo](ctx, c, "workers", struct{}{})
}

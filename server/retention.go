package server

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/fsck"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

func (s *Service) setRetention(ctx context.Context, body []byte) (any, error) {
	var l pipeline.Limits
	req, err := decode(flight.ActSetRetention, body, func(r flight.RetentionRequest) (err error) {
		if err := block.ValidateQueue(r.Queue); err != nil {
			return err
		}
		l, err = pipeline.Retention(r.Retention).Limits()
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Admin, req.Queue, flight.ActSetRetention.Name); err != nil {
		return nil, err
	}
	if s.eng != nil && s.eng.Graph() != nil {
		for _, n := range s.eng.Graph().Stages {
			for _, q := range n.Outputs {
				if q == req.Queue && n.Retention != pipeline.UntilConsumed {
					return nil, status.Errorf(codes.FailedPrecondition, "queue %s keeps blocks as stage %s says (retention %s); change the job instead", q, n.Name, n.Retention)
				}
			}
		}
	}
	by := "operator"
	if u := caller(ctx); u != "" {
		by = u
	}
	p := state.Policy{Retention: req.Retention, MaxAge: l.MaxAge, MaxBytes: l.MaxBytes, DropUnconsumed: req.DropUnconsumed, By: by}
	if err := s.db.SetPolicy(req.Queue, p); err != nil {
		return nil, err
	}
	s.log.Info("retention set", "queue", req.Queue, "retention", req.Retention, "drop_unconsumed", req.DropUnconsumed, "by", by)
	return p, nil
}

func (s *Service) retentions(ctx context.Context, _ []byte) (any, error) {
	ps, err := s.db.Policies()
	if err != nil {
		return nil, err
	}
	var out []flight.QueuePolicy
	for q, p := range ps {
		if s.may(ctx, auth.Read, q) {
			out = append(out, flight.QueuePolicy{Queue: q, Policy: p})
		}
	}
	slices.SortFunc(out, func(a, b flight.QueuePolicy) int { return strings.Compare(a.Queue, b.Queue) })
	return listOf(out), nil
}

func (s *Service) lost(ctx context.Context, body []byte) (any, error) {
	req, err := decode(flight.ActLost, body, func(r flight.GroupRequest) error { return block.ValidateQueue(r.Queue) })
	if err != nil {
		return nil, err
	}
	if err := s.readQueue(ctx, flight.ActLost, req.Queue); err != nil {
		return nil, err
	}
	if req.Group != "" && !strings.HasPrefix(req.Group, stageGroupPrefix) {
		if _, err := s.useGroup(ctx, req.Queue, req.Group, "", flight.ActLost.Name, false); err != nil {
			return nil, err
		}
	}
	ls, err := s.db.LostBlocks(req.Queue, req.Group)
	return listOf(ls), err
}

func (s *Service) fsck(ctx context.Context, body []byte) (any, error) {
	req, err := decodeOptional[flight.FsckRequest](flight.ActFsck, body)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Admin, "", flight.ActFsck.Name); err != nil {
		return nil, err
	}
	opt := fsck.Options{Repair: req.Repair, Verify: req.Verify, Grace: time.Duration(req.GraceSeconds * float64(time.Second)), Now: s.cfg.Now}
	if s.eng != nil {
		opt.Recompute, opt.Scratch = s.eng.Recompute, s.eng.Scratch
	}
	rep, err := fsck.Check(ctx, s.db, s.store, opt)
	if err == nil {
		s.log.Info("fsck", "repair", req.Repair, "verify", req.Verify, "report", rep.String())
	}
	return rep, err
}

func (s *Service) multi() (*blob.Multi, error) {
	m, ok := s.store.(*blob.Multi)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this server has one store")
	}
	return m, nil
}

func (s *Service) storeAction(ctx context.Context, a flight.Action, body []byte) (*blob.Multi, flight.StoreRequest, error) {
	req, err := decode(a, body, func(r flight.StoreRequest) error { return auth.ValidName("store", r.Name) })
	if err != nil {
		return nil, req, err
	}
	if err := s.allow(ctx, auth.Admin, "", a.Name); err != nil {
		return nil, req, err
	}
	m, err := s.multi()
	return m, req, err
}

func (s *Service) storeList(ctx context.Context, _ []byte) (any, error) {
	if err := s.allow(ctx, auth.Admin, "", flight.ActStoreList.Name); err != nil {
		return nil, err
	}
	m, err := s.multi()
	if err != nil {
		return nil, err
	}
	return listOf(m.Members()), nil
}

func (s *Service) storeAdd(ctx context.Context, body []byte) (any, error) {
	m, req, err := s.storeAction(ctx, flight.ActStoreAdd, body)
	if err != nil {
		return nil, err
	}
	st, err := blob.Open(ctx, req.URL)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "store %s: %v", req.Name, err)
	}
	if err := blob.Claim(ctx, st, s.db.ID(), false); err != nil {
		st.Close()
		return nil, status.Errorf(codes.FailedPrecondition, "store %s: %v", req.Name, err)
	}
	if err := m.Add(req.Name, req.URL, st); err != nil {
		st.Close()
		return nil, status.Error(codes.AlreadyExists, err.Error())
	}
	if err := s.db.PutStore(state.StoreRecord{Name: req.Name, URL: req.URL}); err != nil {
		return nil, err
	}
	s.log.Info("store added", "store", req.Name, "url", st.String())
	return map[string]string{"added": req.Name}, nil
}

func (s *Service) storeRemove(ctx context.Context, body []byte) (any, error) {
	m, req, err := s.storeAction(ctx, flight.ActStoreRemove, body)
	if err != nil {
		return nil, err
	}
	if err := m.Remove(ctx, req.Name); errors.Is(err, blob.ErrNoStore) {
		return nil, status.Error(codes.NotFound, err.Error())
	} else if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err := s.db.DeleteStore(req.Name); err != nil {
		return nil, err
	}
	s.log.Info("store removed", "store", req.Name)
	return map[string]string{"removed": req.Name}, nil
}

func (s *Service) storeDrain(ctx context.Context, body []byte) (any, error) {
	m, req, err := s.storeAction(ctx, flight.ActStoreDrain, body)
	if err != nil {
		return nil, err
	}
	if req.Name == flight.PrimaryStore {
		return nil, status.Error(codes.FailedPrecondition, "the primary store (--store) takes what nothing else can; restart the server with another --store to retire it")
	}
	recs, _ := s.db.Stores()
	for _, r := range recs {
		if r.Name == req.Name {
			r.Draining = true
			if err := s.db.PutStore(r); err != nil {
				return nil, err
			}
		}
	}
	deadline := time.Duration(req.DeadlineSeconds * float64(time.Second))
	if deadline <= 0 {
		deadline = 30 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	rep, err := m.Drain(dctx, req.Name, cmp.Or(req.Workers, 4))
	s.log.Info("store drained", "store", req.Name, "moved", rep.Moved, "bytes", rep.Bytes, "left", len(rep.Left), "seconds", rep.Seconds, "err", err)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "drain %s: %v (moved %d, %d left)", req.Name, err, rep.Moved, len(rep.Left))
	}
	return rep, nil
}

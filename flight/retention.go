package flight

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/fsck"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

// RetentionRequest is the body of the set-retention action.
type RetentionRequest struct {
	Queue          string `json:"queue"`
	Retention      string `json:"retention"` // "forever", "30d", "500GiB", "30d,500GiB"; "" to remove
	DropUnconsumed bool   `json:"drop_unconsumed,omitempty"`
}

func (s *Service) setRetention(ctx context.Context, body []byte) (any, error) {
	var req RetentionRequest
	if err := decodeStrict(body, &req); err != nil {
		return nil, badBody("set-retention", body, err)
	}
	if err := block.ValidateQueue(req.Queue); err != nil {
		return nil, badBody("set-retention", body, err)
	}
	l, err := pipeline.Retention(req.Retention).Limits()
	if err != nil {
		return nil, badBody("set-retention", body, err)
	}
	if err := s.allow(ctx, auth.Admin, req.Queue, "set-retention"); err != nil {
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
	var out []QueuePolicy
	for q, p := range ps {
		if s.may(ctx, auth.Read, q) {
			out = append(out, QueuePolicy{q, p})
		}
	}
	slices.SortFunc(out, func(a, b QueuePolicy) int { return strings.Compare(a.Queue, b.Queue) })
	return listOf(out), nil
}

func (s *Service) lost(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Queue string `json:"queue"`
		Group string `json:"group,omitempty"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return nil, badBody("lost", body, err)
	}
	if err := block.ValidateQueue(req.Queue); err != nil {
		return nil, badBody("lost", body, err)
	}
	if err := s.allow(ctx, auth.Read, req.Queue, "lost"); err != nil {
		return nil, err
	}
	if req.Group != "" && !strings.HasPrefix(req.Group, stageGroupPrefix) {
		if _, err := s.useGroup(ctx, req.Queue, req.Group, "", "lost", false); err != nil {
			return nil, err
		}
	}
	ls, err := s.db.LostBlocks(req.Queue, req.Group)
	return listOf(ls), err
}

// QueuePolicy is one queue's retention, as the retention action lists it.
type QueuePolicy struct {
	Queue string `json:"queue"`
	state.Policy
}

// Retentions lists every queue's retention policy, by queue name.
func (c *Client) Retentions(ctx context.Context) ([]QueuePolicy, error) {
	return collect[QueuePolicy](ctx, c, "retention", struct{}{})
}

// SetRetention sets a source queue's retention ("" removes it).
func (c *Client) SetRetention(ctx context.Context, queue, retention string, dropUnconsumed bool) (state.Policy, error) {
	var p state.Policy
	err := c.action(ctx, "set-retention", RetentionRequest{Queue: queue, Retention: retention, DropUnconsumed: dropUnconsumed},
		func(raw []byte) error { return json.Unmarshal(raw, &p) })
	return p, err
}

// LostBlocks lists the blocks a queue's retention dropped before a group
// (or any, with "") was done with them.
func (c *Client) LostBlocks(ctx context.Context, queue, group string) ([]state.LostBlock, error) {
	return collect[state.LostBlock](ctx, c, "lost", map[string]string{"queue": queue, "group": group})
}

// FsckRequest is the body of the fsck action.
type FsckRequest struct {
	Repair bool `json:"repair,omitempty"`
	Verify bool `json:"verify,omitempty"`
	// GraceSeconds is how old an orphan blob must be to be deleted; an
	// hour when zero.
	GraceSeconds float64 `json:"grace_seconds,omitempty"`
}

func (s *Service) fsck(ctx context.Context, body []byte) (any, error) {
	var req FsckRequest
	if len(body) > 0 {
		if err := decodeStrict(body, &req); err != nil {
			return nil, badBody("fsck", body, err)
		}
	}
	if err := s.allow(ctx, auth.Admin, "", "fsck"); err != nil {
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

// Fsck checks metadata against blobs on the server, and with repair
// mends what it can.
func (c *Client) Fsck(ctx context.Context, req FsckRequest) (fsck.Report, error) {
	var rep fsck.Report
	err := c.action(ctx, "fsck", req, func(raw []byte) error { return json.Unmarshal(raw, &rep) })
	return rep, err
}

// PrimaryStore names the store --store gives.
const PrimaryStore = "primary"

// StoreRequest is the body of the store-add, store-remove and store-drain
// actions.
type StoreRequest struct {
	Name string `json:"name"`
	URL  string `json:"url,omitempty"` // store-add
	// DeadlineSeconds bounds a drain (store-drain); 30 when zero.
	DeadlineSeconds float64 `json:"deadline_seconds,omitempty"`
	// Workers is how many blobs a drain moves at once; 4 when zero.
	Workers int `json:"workers,omitempty"`
}

func (s *Service) multi() (*blob.Multi, error) {
	m, ok := s.store.(*blob.Multi)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this server has one store")
	}
	return m, nil
}

func (s *Service) storeAction(ctx context.Context, action string, body []byte) (*blob.Multi, StoreRequest, error) {
	var req StoreRequest
	if err := decodeStrict(body, &req); err != nil {
		return nil, req, badBody(action, body, err)
	}
	if err := auth.ValidName("store", req.Name); err != nil && action != "store-list" {
		return nil, req, badBody(action, body, err)
	}
	if err := s.allow(ctx, auth.Admin, "", action); err != nil {
		return nil, req, err
	}
	m, err := s.multi()
	return m, req, err
}

func (s *Service) storeList(ctx context.Context, _ []byte) (any, error) {
	if err := s.allow(ctx, auth.Admin, "", "store-list"); err != nil {
		return nil, err
	}
	m, err := s.multi()
	if err != nil {
		return nil, err
	}
	return listOf(m.Members()), nil
}

func (s *Service) storeAdd(ctx context.Context, body []byte) (any, error) {
	m, req, err := s.storeAction(ctx, "store-add", body)
	if err != nil {
		return nil, err
	}
	st, err := blob.Open(ctx, req.URL)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "store %s: %v", req.Name, err)
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
	m, req, err := s.storeAction(ctx, "store-remove", body)
	if err != nil {
		return nil, err
	}
	if err := m.Remove(ctx, req.Name); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err := s.db.DeleteStore(req.Name); err != nil {
		return nil, err
	}
	s.log.Info("store removed", "store", req.Name)
	return map[string]string{"removed": req.Name}, nil
}

func (s *Service) storeDrain(ctx context.Context, body []byte) (any, error) {
	m, req, err := s.storeAction(ctx, "store-drain", body)
	if err != nil {
		return nil, err
	}
	if req.Name == PrimaryStore {
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

// Stores lists the server's blob stores.
func (c *Client) Stores(ctx context.Context) ([]blob.MemberInfo, error) {
	return collect[blob.MemberInfo](ctx, c, "store-list", struct{}{})
}

// StoreDo runs store-add, store-remove or store-drain.
func (c *Client) StoreDo(ctx context.Context, action string, req StoreRequest, out any) error {
	return c.action(ctx, action, req, func(raw []byte) error { return json.Unmarshal(raw, out) })
}

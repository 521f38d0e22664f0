package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/every"
	"github.com/plumb-dev/plumb/state"
)

// GroupIdle is how long a consumer group may go unread before it is
// deleted, unless configured.
const GroupIdle = 7 * 24 * time.Hour

func (s *Service) groupList(ctx context.Context, body []byte) (any, error) {
	req, err := decode(flight.ActGroupList, body, func(r flight.GroupRequest) error { return block.ValidateQueue(r.Queue) })
	if err != nil {
		return nil, err
	}
	if err := s.readQueue(ctx, flight.ActGroupList, req.Queue); err != nil {
		return nil, err
	}
	gs, err := s.db.Groups(req.Queue)
	if err != nil {
		return nil, statusOf(err, codes.Internal)
	}
	if s.authz != nil && !s.may(ctx, auth.Admin, req.Queue) {
		gs = slices.DeleteFunc(gs, func(g state.GroupStats) bool { return g.Owner != caller(ctx) })
	}
	return listOf(gs), nil
}

// groupDelete deletes a consumer group, releasing what it was owed: its
// creator's or an admin's to do; stage groups go with their stage only.
func (s *Service) groupDelete(ctx context.Context, body []byte) (any, error) {
	req, err := decode(flight.ActGroupDelete, body, func(r flight.GroupRequest) error {
		return errors.Join(block.ValidateQueue(r.Queue), block.ValidateGroup(r.Group))
	})
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Read, req.Queue, flight.ActGroupDelete.Name); err != nil {
		return nil, err
	}
	if _, err := s.useGroup(ctx, req.Queue, req.Group, "", flight.ActGroupDelete.Name, false); err != nil {
		return nil, err
	}
	if err := s.db.DeleteGroup(req.Queue, req.Group); err != nil {
		return nil, statusOf(err, codes.Internal)
	}
	s.log.Info("consumer group deleted", "queue", req.Queue, "group", req.Group, "by", caller(ctx))
	return map[string]string{"deleted": req.Group}, nil
}

// expireGroups deletes idle consumer groups every interval until ctx
// ends; stages' groups never expire.
func (s *Service) expireGroups(ctx context.Context, idle, period time.Duration) {
	every.Run(ctx, period, func() {
		gone, err := s.db.ExpireGroups(idle, func(g string) bool { return strings.HasPrefix(g, stageGroupPrefix) })
		if err != nil {
			s.log.Error("expiring idle consumer groups", "err", err)
			return
		}
		for _, g := range gone {
			s.log.Info("consumer group expired: not read for --group-idle; the blocks it was owed are released",
				"queue", g.Queue, "group", g.Group, "owner", g.Owner, "idle", g.Idle.Round(time.Minute))
		}
	})
}

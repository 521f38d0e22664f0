package server

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/state"
)

// claimSite lets a block into its site (instance) when the caller owns
// the site, or the site has no owner yet and the caller becomes it. Admins
// of the queue write any site without claiming it (a backfill into a
// site, say). Without authentication there are no owners.
func (s *Service) claimSite(ctx context.Context, n block.Name) error {
	if s.authz == nil {
		return nil
	}
	id, _ := AuthFromContext(ctx)
	if !id.MayPutSite(n.Queue, n.Instance) {
		s.audit.Warn("denied", "audit", true, "user", id.User, "perm", "site", "queue", n.Queue, "action", "upload block "+n.String(), "key_sites", strings.Join(id.Sites, ","))
		return status.Errorf(codes.PermissionDenied, "block %s: the API key this call used is bound to the sites %s, not %s/%s; use that site's key (plumb user key USER --site QUEUE/SITE)",
			n, strings.Join(id.Sites, ", "), n.Queue, n.Instance)
	}
	if s.may(ctx, auth.Admin, n.Queue) {
		return nil
	}
	_, err := s.db.ClaimInstance(n.Queue, n.Instance, id.User, id.ID)
	if errors.Is(err, state.ErrOwned) {
		s.audit.Warn("denied", "audit", true, "user", id.User, "perm", "site", "queue", n.Queue, "action", "upload block "+n.String())
		return status.Errorf(codes.PermissionDenied, "block %s: %v; put blocks under a site (instance) of your own, or ask an admin to assign this one to you (plumb site assign %s %s %s)",
			n, err, n.Queue, n.Instance, id.User)
	}
	return statusOf(err, codes.Internal)
}

func (s *Service) siteOwners(ctx context.Context, body []byte) (any, error) {
	req, err := decode(flight.ActSiteOwners, body, func(r flight.SiteRequest) error {
		if r.Queue == "" {
			return nil
		}
		return block.ValidateQueue(r.Queue)
	})
	if err != nil {
		return nil, err
	}
	if err := s.knownQueue(req.Queue); err != nil {
		return nil, err
	}
	owners, err := s.db.Owners(req.Queue)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(owners))
	for _, o := range owners {
		// A user sees the sites of the queues they may read or write.
		if !s.may(ctx, auth.Read, o.Queue) && !s.may(ctx, auth.Write, o.Queue) {
			continue
		}
		out = append(out, flight.SiteOwner{Queue: o.Queue, Instance: o.Instance, User: o.User, Since: o.Since, By: o.By})
	}
	return out, nil
}

// validSite checks the site a request names.
func validSite(r flight.SiteRequest) error {
	return errors.Join(block.ValidateQueue(r.Queue), block.ValidateInstance(r.Instance))
}

func (s *Service) siteAssign(ctx context.Context, body []byte) (any, error) {
	req, err := decode(flight.ActSiteAssign, body, validSite)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Admin, req.Queue, flight.ActSiteAssign.Name+" "+req.Queue+" "+req.Instance); err != nil {
		return nil, err
	}
	o := state.Owner{Queue: req.Queue, Instance: req.Instance, User: req.User, By: caller(ctx)}
	if req.User != "" && s.authz != nil {
		id, ok := s.authz.UserID(req.User)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "site-assign: no user %q in the users file; add it first (plumb user add)", req.User)
		}
		o.UserID = id
	}
	if err := s.db.SetOwner(o); err != nil {
		return nil, err
	}
	s.log.Info("site assigned", "queue", req.Queue, "instance", req.Instance, "user", req.User, "by", caller(ctx))
	return flight.SiteOwner{Queue: o.Queue, Instance: o.Instance, User: o.User, By: o.By}, nil
}

func (s *Service) siteEnd(ctx context.Context, body []byte) (any, error) {
	req, err := decode(flight.ActSiteEnd, body, func(r flight.SiteRequest) error {
		if r.User != "" {
			return errors.New(`"user" is not a field of site-end`)
		}
		return validSite(r)
	})
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Admin, req.Queue, flight.ActSiteEnd.Name+" "+req.Queue+" "+req.Instance); err != nil {
		return nil, err
	}
	b, ended, err := s.endCapture(ctx, req.Queue, req.Instance)
	if err != nil {
		return nil, endCaptureStatus(err)
	}
	return flight.SiteEnd{Block: b.Name, Seq: b.Seq, Ended: ended}, nil
}

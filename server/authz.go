package server

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/state"
)

// may reports whether the caller may do p on queue ("" for the whole
// server); always true when authentication is off.
func (s *Service) may(ctx context.Context, p auth.Perm, queue string) bool {
	if s.authz == nil {
		return true
	}
	id, ok := AuthFromContext(ctx)
	return ok && s.authz.Allowed(id, p, queue)
}

// allow is may as an error for the caller, logged to the audit log.
func (s *Service) allow(ctx context.Context, p auth.Perm, queue, what string) error {
	if s.may(ctx, p, queue) {
		if p == auth.Admin && s.authz != nil {
			id, _ := AuthFromContext(ctx)
			s.audit.Info("admin action", "audit", true, "user", id.User, "action", what, "queue", queue)
		}
		return nil
	}
	id, _ := AuthFromContext(ctx)
	s.audit.Warn("denied", "audit", true, "user", id.User, "perm", string(p), "queue", queue, "action", what)
	target := "queue " + queue
	if queue == "" {
		target = "the server (a rule for queues \"*\")"
	}
	return status.Errorf(codes.PermissionDenied, "%s: user %s has no %s permission on %s; an admin grants it with a rule in the users file",
		what, id.User, p, target)
}

// callerID is the authenticated user's stable id, or "".
func callerID(ctx context.Context) string {
	id, _ := AuthFromContext(ctx)
	return id.ID
}

// caller names the authenticated user, or "" when authentication is off.
func caller(ctx context.Context) string {
	id, _ := AuthFromContext(ctx)
	return id.User
}

// stageGroupPrefix starts the consumer groups of pipeline stages; users
// cannot name one.
const stageGroupPrefix = "stage-"

// useGroup checks that the caller may use a consumer group of queue for
// what (read, ack, reset...). A stage's group is the engine's alone; a
// user's group is its creator's and the admins'. With create, a group
// that does not exist is made, owned by the caller, starting at from.
func (s *Service) useGroup(ctx context.Context, queue, group string, from state.From, what string, create bool) (state.Group, error) {
	if strings.HasPrefix(group, stageGroupPrefix) {
		s.audit.Warn("denied", "audit", true, "user", caller(ctx), "action", what, "queue", queue, "group", group)
		return state.Group{}, status.Errorf(codes.PermissionDenied, "%s: consumer group %s of queue %s belongs to a pipeline stage; only the engine and its workers use it (choose another group name)", what, group, queue)
	}
	var g state.Group
	var err error
	if create {
		id, _ := AuthFromContext(ctx)
		g, err = s.db.EnsureOwnedGroup(queue, group, from, id.User, id.ID, s.cfg.MaxGroupsPerUser)
	} else {
		g, err = s.db.GetGroup(queue, group)
	}
	if errors.Is(err, state.ErrNotFound) {
		return g, status.Errorf(codes.NotFound, "%s: %v", what, err)
	}
	if errors.Is(err, state.ErrTooMany) {
		return g, status.Errorf(codes.ResourceExhausted, "%s: %v", what, err)
	}
	if err != nil {
		return g, statusOf(err, codes.InvalidArgument)
	}
	id, _ := AuthFromContext(ctx)
	earlier := g.Owner == id.User && g.OwnerID != "" && id.ID != "" && g.OwnerID != id.ID
	if s.authz == nil || g.Owner == "" || g.Owner == id.User && !earlier || s.may(ctx, auth.Admin, queue) {
		s.db.TouchGroup(queue, group) // its idle expiry starts over
		return g, nil
	}
	s.audit.Warn("denied", "audit", true, "user", caller(ctx), "action", what, "queue", queue, "group", group, "owner", g.Owner)
	if earlier {
		return g, status.Errorf(codes.PermissionDenied, "%s: consumer group %s of queue %s belongs to an earlier user named %s, removed since; use a group of your own", what, group, queue, g.Owner)
	}
	return g, status.Errorf(codes.PermissionDenied, "%s: consumer group %s of queue %s belongs to user %s; use a group of your own", what, group, queue, g.Owner)
}

// useConsumer opens a stream consumer's cursor for the caller: a stage's
// consumer is the engine's alone, a user's is its creator's and the
// admins'.
func (s *Service) useConsumer(ctx context.Context, queue, instance, consumer, from, what string) (state.Cursor, error) {
	if strings.HasPrefix(consumer, stageGroupPrefix) {
		s.audit.Warn("denied", "audit", true, "user", caller(ctx), "action", what, "queue", queue, "consumer", consumer)
		return state.Cursor{}, status.Errorf(codes.PermissionDenied, "%s: stream consumer %s of queue %s belongs to a pipeline stage; only the engine uses it (choose another consumer name)", what, consumer, queue)
	}
	admin := s.authz == nil || s.may(ctx, auth.Admin, queue)
	id, _ := AuthFromContext(ctx)
	c, err := s.db.OpenOwnedCursor(queue, instance, consumer, from, id.User, id.ID, admin)
	if errors.Is(err, state.ErrOwned) {
		s.audit.Warn("denied", "audit", true, "user", caller(ctx), "action", what, "queue", queue, "consumer", consumer)
		return c, status.Errorf(codes.PermissionDenied, "%s: %v; use a consumer name of your own", what, err)
	}
	if err != nil {
		return c, status.Error(codes.InvalidArgument, err.Error())
	}
	return c, nil
}

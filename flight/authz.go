package flight

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
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

// caller names the authenticated user, or "" when authentication is off.
func caller(ctx context.Context) string {
	id, _ := AuthFromContext(ctx)
	return id.User
}

package web

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/plumb-dev/plumb/auth"
)

// WithAuth makes every page and API call but /healthz and /readyz require
// a login (HTTP Basic with the same users and secrets as Flight, or a
// bearer token or API key), and shows each user only the queues and stages
// the users file's rules let it read. /metrics needs admin on "*".
func (s *Server) WithAuth(a *auth.Authority) *Server {
	s.authz = a
	return s
}

type identityKey struct{}

// loginCache remembers verified Basic credentials for a while, so that a
// page refreshing every 2 s does not cost a bcrypt comparison each time.
type loginCache struct {
	mu   sync.Mutex
	seen map[[32]byte]cached
}

type cached struct {
	user  string
	stamp string // the user's id and generation when the secret was checked
	till  time.Time
}

const loginCacheFor = 5 * time.Minute

func (c *loginCache) get(k [32]byte, now time.Time) (cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.seen[k]
	if !ok || now.After(e.till) {
		return cached{}, false
	}
	return e, true
}

func (c *loginCache) put(k [32]byte, id auth.Identity, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil || len(c.seen) > 10000 {
		c.seen = map[[32]byte]cached{}
	}
	c.seen[k] = cached{user: id.User, stamp: id.Stamp, till: now.Add(loginCacheFor)}
}

// requireLogin wraps h with authentication when auth is on.
func (s *Server) requireLogin(h http.Handler) http.Handler {
	if s.authz == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := s.identify(r)
		if !ok {
			s.log.Warn("authentication failed", "log", "audit", "audit", true, "method", "http "+r.URL.Path, "peer", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Basic realm="plumb", charset="UTF-8"`)
			http.Error(w, "log in with a Plumb user and its secret (plumb user add)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

func (s *Server) identify(r *http.Request) (auth.Identity, bool) {
	if user, secret, ok := r.BasicAuth(); ok {
		k := sha256.Sum256([]byte(user + "\x00" + secret))
		// A cached login holds only while the user is the same user of the
		// same generation: a new secret or a revocation ends it at once.
		if c, hit := s.logins.get(k, time.Now()); hit {
			if id, err := s.authz.Identify(c.user, "password"); err == nil && id.Stamp == c.stamp {
				return id, true
			}
		}
		_, id, err := s.authz.Login(user, secret)
		if err != nil {
			return id, false
		}
		s.logins.put(k, id, time.Now())
		return id, true
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		id, err := s.authz.Verify(strings.TrimSpace(tok))
		return id, err == nil
	}
	return auth.Identity{}, false
}

// may reports whether the request's user may do p on queue.
func (s *Server) may(r *http.Request, p auth.Perm, queue string) bool {
	if s.authz == nil {
		return true
	}
	id, ok := r.Context().Value(identityKey{}).(auth.Identity)
	return ok && s.authz.Allowed(id, p, queue)
}

// readsAll reports whether the request's user may read every queue.
func (s *Server) readsAll(r *http.Request, queues []string) bool {
	for _, q := range queues {
		if !s.may(r, auth.Read, q) {
			return false
		}
	}
	return true
}

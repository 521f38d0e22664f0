package web

import (
	"net"
	"net/http"
	"os"
	"strings"
)

// WithHosts adds names the dashboard answers to besides those it always
// does: IP addresses, localhost and this machine's host name. A name
// under which users reach it (through a proxy, or a DNS record of its
// own) must be added, or requests naming it are refused.
func (s *Server) WithHosts(names ...string) *Server {
	for _, n := range names {
		s.hosts = append(s.hosts, strings.ToLower(strings.TrimSuffix(n, ".")))
	}
	return s
}

// allowedHost reports whether a request's Host names the dashboard. A page
// on a name its owner points at 127.0.0.1 (DNS rebinding) is, to the
// browser, of that name's origin: it may read the answers, and without
// --users it could retract jobs. Its requests carry that name as Host; an
// IP address cannot be rebound, and the names allowed here are this
// machine's or the operator's.
func (s *Server) allowedHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if me, err := os.Hostname(); err == nil && strings.EqualFold(host, me) {
		return true
	}
	for _, n := range s.hosts {
		if host == n {
			return true
		}
	}
	return false
}

// checkHost refuses requests naming a host the dashboard does not answer
// to, with 421 Misdirected Request.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.allowedHost(r.Host) {
			http.Error(w, "this dashboard does not answer to the host "+r.Host+"; reach it by IP address or localhost, or start the server with --http-host "+hostOnly(r.Host),
				http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

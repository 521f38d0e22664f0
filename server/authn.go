package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
)

type identityKey struct{}

// AuthFromContext returns the caller's identity, once the server has
// authenticated it; false when authentication is off.
func AuthFromContext(ctx context.Context) (auth.Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(auth.Identity)
	return id, ok
}

// WithIdentity returns ctx carrying id, as the server's interceptors do.
func WithIdentity(ctx context.Context, id auth.Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

const handshakeMethod = "/arrow.flight.protocol.FlightService/Handshake"

const howToAuthenticate = "log in with a Basic handshake (pyarrow: client.authenticate_basic_token(user, secret)), " +
	"or send a bearer token or API key (plumb --token-file FILE)"

// authenticator checks every call: a Basic handshake returns a bearer
// token; every other call needs that token, an API key, or a client
// certificate whose common name is a user.
type authenticator struct {
	authz    *auth.Authority
	audit    *slog.Logger
	failures prometheus.Counter
}

func (a *authenticator) fail(ctx context.Context, method, why string, err error) error {
	addr := ""
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr.String()
	}
	a.audit.Warn("authentication failed", "audit", true, "method", method, "peer", addr, "why", why)
	a.failures.Inc()
	if err != nil && strings.Contains(err.Error(), "expired") {
		why = "the token expired"
	}
	return status.Error(codes.Unauthenticated, why+"; "+howToAuthenticate)
}

// authenticate returns ctx with the caller's identity.
func (a *authenticator) authenticate(ctx context.Context, method string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var scheme, cred string
	if v := md.Get("authorization"); len(v) > 0 {
		scheme, cred, _ = strings.Cut(strings.TrimSpace(v[0]), " ")
		cred = strings.TrimSpace(cred)
	}
	switch {
	case strings.EqualFold(scheme, "bearer") && cred != "":
		id, err := a.authz.Verify(cred)
		if err != nil {
			return ctx, a.fail(ctx, method, "invalid or expired bearer token or API key", err)
		}
		return WithIdentity(ctx, id), nil
	case cred != "":
		return ctx, a.fail(ctx, method, fmt.Sprintf("authorization scheme %q is not accepted here", scheme), nil)
	}
	if cn := peerCommonName(ctx); cn != "" {
		id, err := a.authz.Identify(cn, "cert")
		if err != nil {
			return ctx, a.fail(ctx, method, fmt.Sprintf("client certificate for %q names no user", cn), nil)
		}
		return WithIdentity(ctx, id), nil
	}
	return ctx, a.fail(ctx, method, "no credentials", nil)
}

// peerCommonName is the common name of a verified client certificate.
func peerCommonName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return ""
	}
	return ti.State.VerifiedChains[0][0].Subject.CommonName
}

// handshake answers a Basic handshake with a bearer token in the
// trailer, where pyarrow's authenticate_basic_token and the Go client
// look for it.
func (a *authenticator) handshake(stream grpc.ServerStream) error {
	ctx := stream.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	var scheme, cred string
	for _, v := range md.Get("authorization") {
		if scheme, cred, _ = strings.Cut(strings.TrimSpace(v), " "); strings.EqualFold(scheme, "basic") {
			break
		}
	}
	if !strings.EqualFold(scheme, "basic") {
		return a.fail(ctx, handshakeMethod, "the handshake takes Basic credentials (user:secret)", nil)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		raw, err = base64.RawStdEncoding.DecodeString(strings.TrimSpace(cred))
	}
	user, secret, ok := strings.Cut(string(raw), ":")
	if err != nil || !ok {
		return a.fail(ctx, handshakeMethod, "malformed Basic credentials", nil)
	}
	tok, id, err := a.authz.Login(user, secret)
	if err != nil {
		return a.fail(ctx, handshakeMethod, fmt.Sprintf("wrong user or secret (user %q)", user), nil)
	}
	a.audit.Info("login", "audit", true, "user", id.User)
	stream.SetTrailer(metadata.Pairs("authorization", "Bearer "+tok))
	return nil
}

func (a *authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a *authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod == handshakeMethod {
		if err := a.handshake(ss); err != nil {
			return err
		}
		return h(srv, ss)
	}
	ctx, err := a.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return h(srv, &identityStream{ServerStream: ss, ctx: ctx})
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }

// Handshake implements Flight. The authenticating interceptor has done
// the work; without authentication there is nothing to exchange.
func (s *Service) Handshake(aflight.FlightService_HandshakeServer) error { return nil }

// serverTLS builds the server's TLS: its certificate, and with a client
// CA, required and verified client certificates (mutual TLS).
func serverTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("--client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--client-ca %s holds no PEM certificate", clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// IsLoopback reports whether a listen address reaches only this machine.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// Security is how a client reaches a server: plain TCP, or TLS that
// verifies the server (against the system roots or CAFile), with an
// optional bearer token sent on every call.
type Security struct {
	TLS        bool
	CAFile     string // PEM roots to trust instead of the system's
	ServerName string // name to verify, when it differs from the address
	TokenFile  string // file holding the bearer token or API key
	// CertFile and KeyFile are a client certificate for mutual TLS.
	CertFile, KeyFile string
	// User and Secret log in with a Basic handshake when the client is
	// made; the token it returns goes with every later call.
	User, Secret string
}

func (s Security) dialOptions(tok *tokenHolder) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if s.TLS || s.CAFile != "" || s.CertFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName}
		if s.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("--tls-client-cert/--tls-client-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		if s.CAFile != "" {
			pem, err := os.ReadFile(s.CAFile)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", s.CAFile)
			}
			cfg.RootCAs = pool
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if s.User != "" {
		tok.secure = s.TLS || s.CAFile != ""
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
	} else if s.TokenFile != "" {
		raw, err := os.ReadFile(s.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		tok := strings.TrimSpace(string(raw))
		if tok == "" {
			return nil, fmt.Errorf("--token-file %s is empty", s.TokenFile)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: tok, secure: s.TLS || s.CAFile != ""}))
	}
	return opts, nil
}

// bearer sends "authorization: Bearer TOKEN" on every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is true with TLS; without it the token still
// goes (to a server on loopback, or behind a TLS-terminating proxy).
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// tokenHolder sends the token a login got, once it has one.
type tokenHolder struct {
	mu     sync.Mutex
	token  string
	secure bool
}

func (t *tokenHolder) set(tok string) {
	t.mu.Lock()
	t.token = tok
	t.mu.Unlock()
}

func (t *tokenHolder) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token == "" {
		return nil, nil // the handshake itself carries Basic credentials
	}
	return map[string]string{"authorization": "Bearer " + t.token}, nil
}

func (t *tokenHolder) RequireTransportSecurity() bool { return t.secure }

// Login logs in with a Basic handshake and returns the bearer token; a
// client dialled with Security.User sends it on every later call.
func (c *Client) Login(ctx context.Context, user, secret string) (string, error) {
	c.tokens.set("") // the handshake carries Basic credentials, not an old token
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+secret)))
	stream, err := c.fc.Handshake(ctx)
	if err != nil {
		return "", err
	}
	if err := stream.CloseSend(); err != nil {
		return "", err
	}
	for {
		if _, err = stream.Recv(); err != nil {
			break
		}
	}
	if err != io.EOF {
		return "", err
	}
	for _, v := range stream.Trailer().Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			c.tokens.set(tok)
			return tok, nil
		}
	}
	return "", errors.New("the server answered the login without a token; is authentication on (serve --users)?")
}

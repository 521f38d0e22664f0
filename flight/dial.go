package flight

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Security is how a client reaches a server: plain TCP, or TLS that
// verifies the server (against the system roots or CAFile), with an
// optional bearer token sent on every call.
type Security struct {
	TLS        bool
	CAFile     string // PEM roots to trust instead of the system's
	ServerName string // name to verify, when it differs from the address
	TokenFile  string // file holding the bearer token
}

func (s Security) dialOptions() ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if s.TLS || s.CAFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName}
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
	if s.TokenFile != "" {
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

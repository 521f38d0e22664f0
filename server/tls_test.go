package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/state"
)

// testCA makes a CA and a server certificate for 127.0.0.1, and returns
// the server's TLS certificate and the CA's PEM file.
func testCA(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "plumb test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "plumb server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, caFile
}

// TestClientTLSAndToken: the client verifies the server's certificate
// against --tls-ca, refuses one it does not trust, and sends its token.
func TestClientTLSAndToken(t *testing.T) {
	cert, caFile := testCA(t)
	db, err := state.Open(filepath.Join(t.TempDir(), "meta.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, _ := blob.OpenDir(t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tokens := make(chan string, 16)
	gs := NewGRPCServer(slog.New(slog.NewTextHandler(io.Discard, nil)), nil,
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			md, _ := metadata.FromIncomingContext(ss.Context())
			tokens <- strings.Join(md.Get("authorization"), ",")
			return h(srv, ss)
		}))
	aflight.RegisterFlightServiceServer(gs, NewService(ctx, Config{}, db, store))
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go gs.Serve(lis)
	defer gs.Stop()

	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600)
	c, err := client.DialSecure(lis.Addr().String(), client.Security{CAFile: caFile, TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Queues(ctx); err != nil {
		t.Fatalf("TLS client with the right CA: %v", err)
	}
	if got := <-tokens; got != "Bearer s3cret-token" {
		t.Fatalf("server saw authorization %q", got)
	}

	// Named with an address that does not answer, the server's
	// certificate is checked against its own name, not the list's.
	both, err := client.DialSecure(testenv.FreeAddr(t)+","+lis.Addr().String(), client.Security{CAFile: caFile, TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	defer both.Close()
	if _, err := both.Queues(ctx); err != nil {
		t.Fatalf("TLS client given two addresses, one dead: %v", err)
	}
	<-tokens

	// The system roots do not know the test CA: refused.
	untrusting, err := client.DialSecure(lis.Addr().String(), client.Security{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer untrusting.Close()
	if _, err := untrusting.Queues(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client trusted an unknown CA: %v", err)
	}
	if _, err := client.DialSecure("127.0.0.1:1", client.Security{TokenFile: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Fatal("a missing token file was accepted")
	}
}

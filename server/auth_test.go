package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
)

// usersFile writes a users file: ana (analysts: read dns.*), lax-agent
// (capture: write pcap.sz and dns.*, with an API key) and ops (admin).
func usersFile(t testing.TB) (string, map[string]string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "users.yaml")
	f, _ := auth.LoadOrNew(file)
	secrets := map[string]string{}
	for user, group := range map[string]string{"ana": "analysts", "lax-agent": "capture", "ops": "operators"} {
		s, err := f.AddUser(user, []string{group})
		if err != nil {
			t.Fatal(err)
		}
		secrets[user] = s
	}
	key, err := f.AddKey("lax-agent", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secrets["key"] = key
	f.Rules = []auth.Rule{
		{Queues: "pcap.sz", Groups: []string{"capture"}, Allow: []auth.Perm{auth.Write}},
		{Queues: "dns.*", Groups: []string{"capture"}, Allow: []auth.Perm{auth.Write}},
		{Queues: "dns.*", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read}},
		{Queues: "*", Groups: []string{"operators"}, Allow: []auth.Perm{auth.Admin}},
	}
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	return file, secrets
}

// runServer starts Run with cfg on 127.0.0.1:0 and returns its address.
func runServer(t testing.TB, cfg Config) string {
	t.Helper()
	if cfg.Data == "" {
		cfg.Data = t.TempDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ready := make(chan string, 1)
	cfg.Ready = func(a net.Addr) { ready <- a.String() }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("server did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return addr
}

func dialAs(t testing.TB, addr string, sec client.Security) *client.Client {
	t.Helper()
	c, err := client.DialSecure(addr, sec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func codeOf(err error) codes.Code { return status.Code(err) }

func TestAuthOverFlight(t *testing.T) {
	file, secrets := usersFile(t)
	logs := &testenv.Log{}
	addr := runServer(t, Config{Users: file, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()

	anon := dialAs(t, addr, client.Security{})
	if _, err := anon.Queues(ctx); codeOf(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "token-file") {
		t.Fatalf("no credentials: %v", err)
	}
	if _, err := client.DialSecure(addr, client.Security{User: "ana", Secret: secrets["ops"]}); codeOf(errors.Unwrap(err)) != codes.Unauthenticated {
		t.Fatalf("wrong secret: %v", err)
	}

	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(secrets["key"]+"\n"), 0o600)
	agent := dialAs(t, addr, client.Security{TokenFile: keyFile})
	for _, n := range []string{"20250505-151105-00000001.lax.pcap.sz", "20250505-151105-00000001.lax.dns.arrow"} {
		if _, err := agent.Put(ctx, bytesSource(n, []byte("SECRET "+n))); err != nil {
			t.Fatalf("agent put %s: %v", n, err)
		}
	}
	if _, err := agent.Put(ctx, bytesSource("20250505-151105-00000001.lax.other", []byte("x"))); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("agent put to a queue it may not write: %v", err)
	}
	if _, err := getBlock(t, agent, "20250505-151105-00000001.lax.pcap.sz"); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("agent read: %v", err)
	}

	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	qs, err := ana.Queues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Queue != "dns.arrow" {
		t.Fatalf("ana lists %+v, %v; want only dns.arrow", qs, err)
	}
	if got, err := getBlock(t, ana, "20250505-151105-00000001.lax.dns.arrow"); err != nil || !bytes.Contains(got, []byte("SECRET")) {
		t.Fatalf("ana reads dns.arrow: %q %v", got, err)
	}
	if _, err := getBlock(t, ana, "20250505-151105-00000001.lax.pcap.sz"); codeOf(err) != codes.PermissionDenied ||
		!strings.Contains(err.Error(), "user ana has no read permission on queue pcap.sz") {
		t.Fatalf("ana reads pcap.sz: %v", err)
	}

	// A user added to the file logs in after SIGHUP, without a restart.
	f, _ := auth.Load(file)
	bobSecret, _ := f.AddUser("bob", []string{"analysts"})
	f.Save(file)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := client.DialSecure(addr, client.Security{User: "bob", Secret: bobSecret})
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob cannot log in after SIGHUP: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Failures and denials are in the audit log.
	for _, want := range []string{`msg="authentication failed" log=audit audit=true`, `why="no credentials"`,
		`msg=denied log=audit audit=true user=ana perm=read queue=pcap.sz`, `msg=denied log=audit audit=true user=lax-agent perm=write queue=other`,
		`msg="users file reloaded"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

// pki is a test CA with a server certificate and client certificates.
type pki struct {
	ca                   string // the CA's PEM file
	serverCert, srvKey   string
	anaCert, anaKey      string // a client certificate for user ana
	strangerCert, strKey string // signed by another CA
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(der)
		return cert, key, der
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
		return p
	}
	issue := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return write(cn+".pem", "CERTIFICATE", der), write(cn+".key", "EC PRIVATE KEY", kder)
	}
	ca, caKey, caDER := newCA("plumb test CA")
	other, otherKey, _ := newCA("another CA")
	var p pki
	p.ca = write("ca.pem", "CERTIFICATE", caDER)
	p.serverCert, p.srvKey = issue(ca, caKey, "plumb-server", 2, x509.ExtKeyUsageServerAuth)
	p.anaCert, p.anaKey = issue(ca, caKey, "ana", 3, x509.ExtKeyUsageClientAuth)
	p.strangerCert, p.strKey = issue(other, otherKey, "ops", 4, x509.ExtKeyUsageClientAuth)
	return p
}

// TestTLSAndMutualTLS: the server's certificate is verified by default; a
// server that wants client certificates refuses a client without one or
// with one from another CA, and takes the certificate's name as the user.
func TestTLSAndMutualTLS(t *testing.T) {
	p := newPKI(t)
	file, secrets := usersFile(t)
	ctx := context.Background()

	tlsOnly := runServer(t, Config{Users: file, TLSCert: p.serverCert, TLSKey: p.srvKey})
	if _, err := dialAs(t, tlsOnly, client.Security{TLS: true}).Queues(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client trusting only the system roots accepted the test CA's server: %v", err)
	}
	if _, err := dialAs(t, tlsOnly, client.Security{}).Queues(ctx); err == nil {
		t.Fatal("a plain-TCP client reached a TLS server")
	}
	ana := dialAs(t, tlsOnly, client.Security{CAFile: p.ca, User: "ana", Secret: secrets["ana"]})
	if qs, err := ana.Queues(ctx); err != nil || len(qs) != 0 {
		t.Fatalf("ana over TLS: %+v %v", qs, err)
	}

	mtls := runServer(t, Config{Users: file, TLSCert: p.serverCert, TLSKey: p.srvKey, ClientCA: p.ca})
	if _, err := client.DialSecure(mtls, client.Security{CAFile: p.ca, User: "ana", Secret: secrets["ana"]}); err == nil {
		t.Fatal("mutual TLS let in a client without a certificate")
	}
	if _, err := client.DialSecure(mtls, client.Security{CAFile: p.ca, CertFile: p.strangerCert, KeyFile: p.strKey, User: "ops", Secret: secrets["ops"]}); err == nil {
		t.Fatal("mutual TLS let in a client certificate of another CA")
	}
	byCert := dialAs(t, mtls, client.Security{CAFile: p.ca, CertFile: p.anaCert, KeyFile: p.anaKey})
	if _, err := byCert.Put(ctx, bytesSource("20250505-151105-00000001.lax.dns.arrow", []byte("x"))); codeOf(err) != codes.PermissionDenied ||
		!strings.Contains(err.Error(), "user ana has no write permission") {
		t.Fatalf("the certificate's user is not ana: %v", err)
	}
}

// TestNoAuthServesLoopbackOnly: without a users file the server says so
// in its first log line and refuses a non-loopback address unless told
// something else authenticates.
func TestNoAuthServesLoopbackOnly(t *testing.T) {
	for _, cfg := range []Config{{Listen: "0.0.0.0:0"}, {Listen: "127.0.0.1:0", HTTP: "0.0.0.0:0"}, {Listen: "[::]:0"}} {
		cfg.Data = t.TempDir()
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "without authentication: pass --users FILE") || !strings.Contains(err.Error(), "--insecure-no-auth") {
			t.Errorf("listen %s http %s without auth: %v", cfg.Listen, cfg.HTTP, err)
		}
	}
	logs := &testenv.Log{}
	runServer(t, Config{Listen: "0.0.0.0:0", InsecureNoAuth: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	first, _, _ := strings.Cut(logs.String(), "\n")
	if !strings.Contains(first, "authentication is off") {
		t.Errorf("first log line: %s", first)
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, "0.0.0.0:1": false, ":1": false, "10.0.0.1:1": false, "example.com:1": false} {
		if IsLoopback(addr) != want {
			t.Errorf("IsLoopback(%s) = %v", addr, !want)
		}
	}
}

// FuzzTicketAccess: whatever ticket an analyst who may read dns.* only
// sends, nothing of pcap.sz comes back.
func FuzzTicketAccess(f *testing.F) {
	file, secrets := usersFile(f)
	addr := runServer(f, Config{Users: file})
	ctx := context.Background()
	keyFile := filepath.Join(f.TempDir(), "key")
	os.WriteFile(keyFile, []byte(secrets["key"]), 0o600)
	agent := dialAs(f, addr, client.Security{TokenFile: keyFile})
	for _, n := range []string{"20250505-151105-00000001.lax.pcap.sz", "20250505-151105-00000001.lax.dns.arrow"} {
		q := n[strings.Index(n, ".lax.")+5:]
		if _, err := agent.Put(ctx, bytesSource(n, []byte("MARK-"+q))); err != nil {
			f.Fatal(err)
		}
	}
	ana := dialAs(f, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	for _, seed := range []string{
		`{"block":"20250505-151105-00000001.lax.pcap.sz"}`, `{"queue":"pcap.sz"}`, `{"queue":"dns.arrow"}`,
		`{"records":"dns.arrow","stream":"pcap.sz","instance":"lax","consumer":"c"}`, `{"stream":"pcap.sz","instance":"lax","consumer":"c"}`,
		`{"window":"pcap.sz","group":"g","spec":{"size":"1h"}}`, `{"queue":"dns.arrow/../pcap.sz"}`, `{"queue":"pcap%2esz"}`,
		`{"block":"20250505-151105-00000001.lax.dns.arrow/../../pcap.sz"}`, `{"queue":"dns.*"}`, `{"queue":"pcap.sz","group":"g","follow":false}`,
		`{"Queue":"pcap.sz"}`, `{"queue":"dns.arrow","queue":"pcap.sz"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, ticket []byte) {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // follow tickets wait for more
		defer cancel()
		stream, err := ana.Flight().DoGet(cctx, &aflight.Ticket{Ticket: ticket})
		if err != nil {
			return
		}
		for {
			msg, err := stream.Recv()
			if err != nil {
				return
			}
			if bytes.Contains(msg.DataBody, []byte("MARK-pcap")) || bytes.Contains(msg.AppMetadata, []byte("pcap.sz")) {
				t.Fatalf("ticket %q read pcap.sz as ana", ticket)
			}
		}
	})
}

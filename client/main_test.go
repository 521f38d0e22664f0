package client_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/server"
)

var (
	addr, tlsAddr, caFile, anaSecret string
)

// TestMain starts the servers the examples use: real Plumb servers in
// this process, with a few blocks already uploaded.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plumb-client-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	code := 1
	if err := setUp(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "setting up the example servers:", err)
	} else {
		code = m.Run()
	}
	cancel()
	time.Sleep(100 * time.Millisecond) // let the servers close their files
	os.RemoveAll(dir)
	os.Exit(code)
}

func setUp(ctx context.Context, dir string) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var err error
	if addr, err = start(ctx, server.Config{Data: filepath.Join(dir, "plain"), Listen: "127.0.0.1:0", Logger: quiet}); err != nil {
		return err
	}
	c, err := client.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	names, err := namesFile()
	if err != nil {
		return err
	}
	for _, b := range []client.Source{
		client.BytesSource("20250505-151105-00000001.lax.pcap.sz", []byte("lax block one")),
		client.BytesSource("20250505-151605-00000002.lax.pcap.sz", []byte("lax block two")),
		client.BytesSource("20250505-151105-00000001.ams.pcap.sz", []byte("ams block one")),
		client.BytesSource("20250505-151105-00000001.lax.names.arrow", names),
	} {
		if _, err := c.Put(ctx, b); err != nil {
			return err
		}
	}

	// The TLS server: a CA, a certificate for 127.0.0.1, and a users file
	// in which ana may read dns.* only.
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	caFile = filepath.Join(dir, "ca.pem")
	if err := writeCerts(caFile, certFile, keyFile); err != nil {
		return err
	}
	users := filepath.Join(dir, "users.yaml")
	f, err := auth.LoadOrNew(users)
	if err != nil {
		return err
	}
	if anaSecret, err = f.AddUser("ana", []string{"analysts"}); err != nil {
		return err
	}
	f.Rules = []auth.Rule{{Queues: "dns.*", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read}}}
	if err := f.Save(users); err != nil {
		return err
	}
	tlsAddr, err = start(ctx, server.Config{Data: filepath.Join(dir, "tls"), Listen: "127.0.0.1:0", Logger: quiet,
		Users: users, TLSCert: certFile, TLSKey: keyFile})
	return err
}

func start(ctx context.Context, cfg server.Config) (string, error) {
	ready := make(chan string, 1)
	cfg.Ready = func(a net.Addr) { ready <- a.String() }
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, cfg) }()
	select {
	case a := <-ready:
		return a, nil
	case err := <-done:
		return "", fmt.Errorf("server did not start: %v", err)
	}
}

// namesFile is an Arrow IPC file of two DNS names and their rcodes.
func namesFile() ([]byte, error) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "time", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
		{Name: "qname", Type: arrow.BinaryTypes.String},
		{Name: "rcode", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	t0 := time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC)
	b.Field(0).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{arrow.Timestamp(t0.UnixNano()), arrow.Timestamp(t0.Add(time.Second).UnixNano())}, nil)
	b.Field(1).(*array.StringBuilder).AppendValues([]string{"www.example.", "nope.example."}, nil)
	b.Field(2).(*array.Int64Builder).AppendValues([]int64{0, 3}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(schema))
	if err != nil {
		return nil, err
	}
	if err := w.Write(rec); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeCerts(caFile, certFile, keyFile string) error {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "example CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "plumb"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for file, blk := range map[string]*pem.Block{
		caFile:   {Type: "CERTIFICATE", Bytes: caDER},
		certFile: {Type: "CERTIFICATE", Bytes: der},
		keyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(blk), 0o600); err != nil {
			return err
		}
	}
	return nil
}

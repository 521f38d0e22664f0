package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestMetadataInPostgres runs a server with --meta on a real PostgreSQL:
// blocks put before a restart are there after it, from the database, no
// DATA/meta.db is made, and a second server on the database is refused
// while the first runs (several servers on one database come later).
func TestMetadataInPostgres(t *testing.T) {
	url := testenv.StartPostgres(t)
	data := t.TempDir()
	blocks := map[string][]byte{name(1): randBytes(5000, 1), name(2): randBytes(70000, 2), name(3): nil}
	for round := 1; round <= 2; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		ready, done := make(chan string, 1), make(chan error, 1)
		cfg := Config{Data: data, Meta: url, Listen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Ready: func(a net.Addr) { ready <- a.String() }}
		go func() { done <- Run(ctx, cfg) }()
		var addr string
		select {
		case addr = <-ready:
		case err := <-done:
			cancel()
			t.Fatalf("server on PostgreSQL did not start: %v", err)
		}
		c, err := client.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		// A second server on the same database is refused, by name.
		second := cfg
		second.Data, second.Ready = t.TempDir(), nil
		if err := Run(ctx, second); err == nil || !strings.Contains(err.Error(), "another plumb serve runs on this metadata database") {
			t.Fatalf("a second server on the database: %v", err)
		}
		if round == 1 {
			var srcs []client.Source
			for n, b := range blocks {
				srcs = append(srcs, bytesSource(n, b))
			}
			res, err := c.Put(ctx, srcs...)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Status != "stored" {
					t.Fatalf("put %s: %s", r.Name, r.Status)
				}
			}
		}
		for n, want := range blocks {
			got, err := getBlock(t, c, n)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("round %d: %s: %d bytes, %v; want %d bytes", round, n, len(got), err, len(want))
			}
		}
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("server: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "meta.db")); !os.IsNotExist(err) {
		t.Errorf("DATA/meta.db made though the metadata is in PostgreSQL (%v)", err)
	}
}

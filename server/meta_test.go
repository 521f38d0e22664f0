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
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/metakv"
	"github.com/plumb-dev/plumb/state"
)

// runPGServer starts a server on the PostgreSQL metadata url and the
// shared store, and returns its address and a function that stops it.
func runPGServer(t *testing.T, url, store, data string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	cfg := Config{Data: data, Meta: url, Store: store, Listen: "127.0.0.1:0", DutyTTL: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ready: func(a net.Addr) { ready <- a.String() }}
	go func() { done <- Run(ctx, cfg) }()
	select {
	case addr := <-ready:
		stopped := false
		stop := func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server %s: %v", addr, err)
			}
		}
		t.Cleanup(stop)
		return addr, stop
	case err := <-done:
		cancel()
		t.Fatalf("server on PostgreSQL did not start: %v", err)
	}
	return "", nil
}

// TestMetadataInPostgres runs two servers on one PostgreSQL database and
// one store: a block put through one is read through the other, a client
// given both addresses reads on when the one it used stops, the duties
// (retention and the like) are held by one server and pass to the other
// when it stops, and what was put survives both stopping. No DATA/meta.db
// is made.
func TestMetadataInPostgres(t *testing.T) {
	url := testenv.StartPostgres(t)
	store := "file://" + t.TempDir()
	ctx := context.Background()
	blocks := map[string][]byte{name(1): randBytes(5000, 1), name(2): randBytes(70000, 2), name(3): nil}

	datas := []string{t.TempDir(), t.TempDir()}
	a, stopA := runPGServer(t, url, store, datas[0])
	b, stopB := runPGServer(t, url, store, datas[1])
	ca, err := client.Dial(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	var srcs []client.Source
	for n, data := range blocks {
		srcs = append(srcs, bytesSource(n, data))
	}
	res, err := ca.Put(ctx, srcs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != "stored" {
			t.Fatalf("put %s through %s: %s", r.Name, a, r.Status)
		}
	}
	cb, err := client.Dial(b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	readAll := func(c *client.Client, how string) {
		t.Helper()
		for n, want := range blocks {
			got, err := getBlock(t, c, n)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %s: %d bytes, %v; want %d bytes", how, n, len(got), err, len(want))
			}
		}
	}
	readAll(cb, "through the other server")
	// Sent again through the other server, a block is a duplicate.
	if res, err := cb.Put(ctx, bytesSource(name(1), blocks[name(1)])); err != nil || res[0].Status != "duplicate" {
		t.Fatalf("a block put again through the other server: %+v, %v", res, err)
	}

	kv, err := metakv.OpenPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.OpenKV(ctx, kv, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	holder := func(duty string) string {
		t.Helper()
		ds, err := db.Duties()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Name == duty && time.Now().Before(d.Until) {
				return d.Holder
			}
		}
		return ""
	}
	waitHolder := func(duty, addr string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for h := holder(duty); !strings.Contains(h, " "+addr+" "); h = holder(duty) {
			if time.Now().After(deadline) {
				t.Fatalf("duty %s is held by %q; want the server at %s", duty, h, addr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	first := holder("retention")
	if !strings.Contains(first, " "+a+" ") && !strings.Contains(first, " "+b+" ") {
		waitHolder("retention", a) // not yet taken: the first server started first
		first = holder("retention")
	}
	// Both servers named: when the one the client talks to stops, it
	// talks to the other.
	both, err := client.Dial(a + "," + b)
	if err != nil {
		t.Fatal(err)
	}
	defer both.Close()
	readAll(both, "with both addresses")
	stop, other := stopA, b
	if strings.Contains(first, " "+b+" ") {
		stop, other = stopB, a
	}
	stop()
	waitHolder("retention", other)
	waitHolder("fsck", other)
	readAll(both, "with both addresses, one server stopped")
	stopA()
	stopB()

	// Both stopped: a new server finds everything.
	c, _ := runPGServer(t, url, store, datas[0])
	cc, err := client.Dial(c)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	readAll(cc, "after a restart")
	for _, data := range datas {
		if _, err := os.Stat(filepath.Join(data, "meta.db")); !os.IsNotExist(err) {
			t.Errorf("%s/meta.db made though the metadata is in PostgreSQL (%v)", data, err)
		}
	}
}

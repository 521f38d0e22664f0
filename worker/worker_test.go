package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/engine/builtin"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/worker"
)

// TestWorkerReadsAndWritesS3Directly: with the server's store on a real
// MinIO, a worker given the same store reads its inputs from MinIO and
// writes its outputs there, and only commits through the server; the
// outputs are right and readable through the server.
func TestWorkerReadsAndWritesS3Directly(t *testing.T) {
	m := testenv.StartMinIO(t)
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	url := "s3://plumb?endpoint=" + m.Endpoint
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := engine.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- flight.Run(ctx, flight.Config{Data: t.TempDir(), Store: url, Listen: "127.0.0.1:0", Logger: log, Registry: reg,
			Engine: engine.Config{RemoteOnly: true, Tick: 50 * time.Millisecond}, Ready: func(a net.Addr) { ready <- a.String() }})
	}()
	defer func() { cancel(); <-done }()
	addr := <-ready
	c, err := flight.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	put := func(seq int, text string) {
		data := []byte(text)
		sum := sha256.Sum256(data)
		name := "20250505-151105-0000000" + string(rune('0'+seq)) + ".lax.raw"
		if _, err := c.Put(ctx, flight.Source{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}); err != nil {
			t.Fatal(err)
		}
	}
	put(1, "first block")
	if res, err := c.SubmitJob(ctx, "up.yaml", []byte("job: up\nfrom: earliest\nstages:\n  - {name: up, inputs: [raw], program: [tr, a-z, A-Z], outputs: [raw.up], retention: forever}\n")); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	put(2, "second block")
	store, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sb, err := sandbox.New(ctx, sandbox.Config{Limits: sandbox.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() {
		wdone <- worker.New(worker.Config{Client: c, ID: "w", Host: "h", Slots: 2, Runner: &engine.Runner{Registry: reg, Sandbox: sb}, Scratch: t.TempDir(), Store: store, Log: log}).Run(wctx)
	}()
	defer func() { stop(); <-wdone }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		bs, _ := c.Blocks(ctx, "raw.up")
		if len(bs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outputs: %+v", bs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for seq, want := range map[int]string{1: "FIRST BLOCK", 2: "SECOND BLOCK"} {
		s, err := c.Get(ctx, "20250505-151105-0000000"+string(rune('0'+seq))+".lax.raw.up")
		if err != nil || !s.Next() {
			t.Fatalf("get output %d: %v", seq, err)
		}
		got, _ := io.ReadAll(s)
		s.Close()
		if strings.TrimSpace(string(got)) != want {
			t.Errorf("output %d = %q, want %q", seq, got, want)
		}
	}
	ws, _ := c.Workers(ctx)
	if len(ws) != 1 || ws[0].Done != 2 {
		t.Errorf("workers: %+v", ws)
	}
	// The runs count in the stage's statistics, CPU measured on the worker.
	if st, err := c.Stats(ctx); err != nil || len(st) != 1 || st[0].Runs != 2 || st[0].CPUSeconds <= 0 || st[0].BytesIn == 0 {
		t.Errorf("stats of remote runs: %+v %v", st, err)
	}
}

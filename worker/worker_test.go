package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/server"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
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
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{Data: t.TempDir(), Store: url, Listen: "127.0.0.1:0", Logger: log, Registry: reg,
			Engine: engine.Config{RemoteOnly: true, Tick: 50 * time.Millisecond}, Ready: func(a net.Addr) { ready <- a.String() }})
	}()
	defer func() { cancel(); <-done }()
	addr := <-ready
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	put := func(seq int, text string) {
		data := []byte(text)
		sum := sha256.Sum256(data)
		name := "20250505-151105-0000000" + string(rune('0'+seq)) + ".lax.raw"
		if _, err := c.Put(ctx, client.Source{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
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
		wdone <- worker.New(worker.Config{Client: c, ID: "w", Host: "h", Slots: 2, Runner: &worker.Runner{Registry: reg, Sandbox: sb}, Scratch: t.TempDir(), Store: store, Log: log}).Run(wctx)
	}()
	defer func() { stop(); <-wdone }()
	testenv.Eventually(t, time.Minute, "two outputs", func() (string, bool) {
		bs, _ := c.Blocks(ctx, "raw.up")
		return fmt.Sprintf("%+v", bs), len(bs) == 2
	})
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

// TestWorkerRunsConfined is issue 17's attack through `plumb worker`: a
// non-admin's job runs an admin-registered program on a worker; the
// program cannot read the worker's credentials, the server's data, other
// runs' scratch, reach the network (the server included) or kill the
// worker; a fork bomb's runs fail and its blocks end FAULTY while the
// worker goes on.
func TestWorkerRunsConfined(t *testing.T) {
	dir := t.TempDir()
	usersFile := filepath.Join(dir, "users.yaml")
	f, _ := auth.LoadOrNew(usersFile)
	opsSecret, _ := f.AddUser("ops", []string{"operators"})
	anaSecret, _ := f.AddUser("ana", []string{"analysts"})
	f.Rules = []auth.Rule{
		{Queues: "*", Groups: []string{"operators"}, Allow: []auth.Perm{auth.Admin}},
		{Queues: "ana.*", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read, auth.Write}},
	}
	if err := f.Save(usersFile); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{Data: data, Users: usersFile, Listen: "127.0.0.1:0", Logger: log, Registry: stage.NewRegistry(),
			Engine:    engine.Config{RemoteOnly: true, Tick: 50 * time.Millisecond, MaxAttempts: 2, Backoff: 10 * time.Millisecond},
			RunShared: []string{os.Args[0]}, Ready: func(a net.Addr) { ready <- a.String() }})
	}()
	defer func() { cancel(); <-done }()
	addr := <-ready
	ops, err := client.DialSecure(addr, client.Security{User: "ops", Secret: opsSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	ana, err := client.DialSecure(addr, client.Security{User: "ana", Secret: anaSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer ana.Close()
	// The worker's own credential, as `plumb worker --token-file` keeps it.
	tokenFile := filepath.Join(dir, "worker.token")
	os.WriteFile(tokenFile, []byte("WORKER-CREDENTIAL"), 0o600)
	scratch := filepath.Join(dir, "worker-scratch")
	other := filepath.Join(scratch, "run-other")
	os.MkdirAll(other, 0o700)
	os.WriteFile(filepath.Join(other, "left"), []byte("ANOTHER-RUN"), 0o600)
	host, port, _ := net.SplitHostPort(addr)
	spy := filepath.Join(dir, "spy.sh")
	os.WriteFile(spy, []byte(fmt.Sprintf(`#!/bin/sh
cat %[1]s %[2]s/auth.key %[3]s/left 2>&1
python3 -c 'import socket; socket.create_connection(("%[4]s", %[5]s), timeout=2); print("NETWORK-REACHED")' 2>&1 | tail -1
kill -9 %[6]d 2>&1 && echo KILLED-THE-WORKER
echo "uid $(id -u)"
echo "input: $(cat)"
`, tokenFile, data, other, host, port, os.Getpid())), 0o755)
	bomb := filepath.Join(dir, "bomb.sh")
	os.WriteFile(bomb, []byte("#!/bin/sh\nbomb() { bomb | bomb & }; bomb; sleep 60\n"), 0o755)
	programs := map[string]string{}
	for name, p := range map[string]string{"spy": spy, "bomb": bomb} {
		prog, err := ops.AddProgram(ctx, flight.AddProgramRequest{Name: name, Path: p})
		if err != nil {
			t.Fatal(err)
		}
		programs[name] = prog.SHA256
	}
	// The admin installs the registered programs on the worker's machine.
	progDir := filepath.Join(dir, "worker-programs")
	os.MkdirAll(progDir, 0o755)
	for name, sum := range programs {
		b, _ := os.ReadFile(map[string]string{"spy": spy, "bomb": bomb}[name])
		os.WriteFile(filepath.Join(progDir, sum), b, 0o755)
	}
	text := []byte("my own block")
	sum := sha256.Sum256(text)
	if _, err := ana.Put(ctx, client.Source{Name: "20250505-151105-00000001.lax.ana.in", Size: int64(len(text)), SHA256: hex.EncodeToString(sum[:]),
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(text)), nil }}); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{
		"job: spy\nfrom: earliest\nstages:\n  - {name: spy, inputs: [ana.in], program: [spy], outputs: [ana.spy], retention: forever}\n",
		"job: bomb\nfrom: earliest\nstages:\n  - {name: bomb, inputs: [ana.in], program: [bomb], outputs: [ana.bomb], timeout: 2s}\n",
	} {
		if res, err := ana.SubmitJob(ctx, "job.yaml", []byte(job)); err != nil || res.State != "accepted" {
			t.Fatalf("submit: %+v %v", res, err)
		}
	}
	lim := sandbox.DefaultLimits()
	lim.Procs = 64
	sb, err := sandbox.New(ctx, sandbox.Config{Limits: lim, Shared: []string{os.Args[0]}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() {
		wdone <- worker.New(worker.Config{Client: ops, ID: "w", Host: "h", Slots: 2, Scratch: scratch, Log: log,
			Runner: &worker.Runner{Registry: stage.NewRegistry(), Sandbox: sb, Programs: progDir}}).Run(wctx)
	}()
	defer func() { stop(); <-wdone }()
	testenv.Eventually(t, time.Minute, "one spy output and one faulty block", func() (string, bool) {
		bs, _ := ops.Blocks(ctx, "ana.spy")
		fb, _ := ops.Faulty(ctx, "ana.in")
		return fmt.Sprintf("spy outputs %+v, faulty %+v", bs, fb), len(bs) == 1 && len(fb) == 1
	})
	s, err := ops.Get(ctx, "20250505-151105-00000001.lax.ana.spy")
	if err != nil || !s.Next() {
		t.Fatalf("get the spy's output: %v", err)
	}
	out, _ := io.ReadAll(s)
	s.Close()
	t.Logf("what the spy saw:\n%s", out)
	for _, leak := range []string{"WORKER-CREDENTIAL", "ANOTHER-RUN", "NETWORK-REACHED", "KILLED", "uid 0\n"} {
		if strings.Contains(string(out), leak) {
			t.Errorf("the confined program got %q:\n%s", leak, out)
		}
	}
	if !strings.Contains(string(out), "input: my own block") {
		t.Errorf("the program did not get its input:\n%s", out)
	}
	if ws, err := ops.Workers(ctx); err != nil || len(ws) != 1 {
		t.Errorf("the worker is gone after the hostile runs: %+v %v", ws, err)
	}
}

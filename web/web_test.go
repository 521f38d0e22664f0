package web_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/jobs"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
	"github.com/plumb-dev/plumb/state"
	"github.com/plumb-dev/plumb/web"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rig is a server's data path without Flight: metadata, a blob directory
// and an engine running two teams' jobs that share a stage, one of whose
// blocks a picky program refuses.
type rig struct {
	db    *state.DB
	store blob.Store
	eng   *engine.Engine
	ctl   *jobs.Control
	reg   *prometheus.Registry
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	db, err := state.Open(filepath.Join(dir, "meta.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := blob.OpenDir(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	builtins := stage.NewRegistry()
	builtin.Register(builtins, builtin.FindXZ())
	sb, err := sandbox.New(context.Background(), sandbox.Config{Limits: sandbox.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(db, store, builtins, engine.Config{Slots: 2, Scratch: filepath.Join(dir, "tmp"),
		Tick: 20 * time.Millisecond, Backoff: time.Millisecond, Registerer: reg, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := jobs.New(db, eng, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); eng.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; db.Close() })
	return &rig{db: db, store: store, eng: eng, ctl: ctl, reg: reg}
}

// withUsers makes a users file of analysts (who may read the queues
// matching readable) and ops, an operator (admin of every queue): each
// user named goes into the group its name says, "ops" into operators and
// any other into analysts. It returns the file, its authority and the
// users' secrets.
func withUsers(t *testing.T, readable string, users ...string) (string, *auth.Authority, map[string]string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "users.yaml")
	f, _ := auth.LoadOrNew(file)
	secrets := map[string]string{}
	for _, u := range users {
		group := "analysts"
		if u == "ops" {
			group = "operators"
		}
		secrets[u], _ = f.AddUser(u, []string{group})
	}
	f.Rules = []auth.Rule{
		{Queues: readable, Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read}},
		{Queues: "*", Groups: []string{"operators"}, Allow: []auth.Perm{auth.Admin}},
	}
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	authz, err := auth.NewAuthority(file, []byte(strings.Repeat("k", 32)), time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	return file, authz, secrets
}

func (r *rig) put(t *testing.T, seq uint64, data string) {
	t.Helper()
	n := block.Name{Time: time.Date(2025, 5, 5, 15, 0, int(seq), 0, time.UTC), Seq: seq, Instance: "lax", Queue: "raw"}
	sum := blob.Sum(sha256.Sum256([]byte(data)))
	key := blob.BlockKey(n, sum)
	if err := r.store.Put(context.Background(), key, strings.NewReader(data), int64(len(data)), sum); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.db.CommitBlock(state.Block{Name: n.String(), Queue: n.Queue, Instance: n.Instance, Seq: seq, Time: n.Time,
		Size: int64(len(data)), SHA256: sum.String(), Key: key}); err != nil {
		t.Fatal(err)
	}
}

func getJSON[T any](t *testing.T, url string) T {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	var v T
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}

func getText(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

func TestDashboardAPI(t *testing.T) {
	r := newRig(t)
	script := filepath.Join(t.TempDir(), "picky.sh")
	os.WriteFile(script, []byte("#!/bin/sh\ndata=$(cat)\ncase \"$data\" in *poison*) echo picky: poison >&2; exit 3;; esac\nprintf '%s' \"$data\"\n"), 0o755)
	r.put(t, 1, "block 1") // a job may only read a queue that exists
	for i, job := range []string{"alice", "bob"} {
		src := fmt.Sprintf("job: %s\nowner: %s\nfrom: earliest\nstages:\n  - {name: clean, inputs: [raw], program: [%s], outputs: [raw.clean]}\n"+
			"  - {name: mine, inputs: [raw.clean], program: [cat], outputs: [raw.%d]}\n", job, job, script, i)
		if res, err := r.ctl.Submit(job+".yaml", []byte(src), ""); err != nil || res.State != "accepted" {
			t.Fatalf("submit %s: %+v %v", job, res, err)
		}
	}
	for seq := uint64(2); seq <= 4; seq++ {
		data := fmt.Sprintf("block %d", seq)
		if seq == 3 {
			data = "poison"
		}
		r.put(t, seq, data)
	}
	srv := httptest.NewServer(web.New(r.eng, r.ctl, r.db, r.reg, slog.Default()).Handler())
	defer srv.Close()

	var g web.Graph
	testenv.Eventually(t, time.Minute, "a faulty block shown", func() (string, bool) {
		g = getJSON[web.Graph](t, srv.URL+"/api/graph")
		var faulty int64
		for _, st := range g.Stages {
			faulty += st.Faulty
		}
		return fmt.Sprintf("%+v", g), faulty == 1
	})
	if len(g.Stages) != 3 || strings.Join(g.Queues, " ") != "raw raw.0 raw.1 raw.clean" {
		t.Fatalf("graph: %d stages, queues %v; want the shared clean stage and two of mine", len(g.Stages), g.Queues)
	}
	for _, st := range g.Stages {
		if st.Name == "alice/clean" && (!st.Merged || len(st.Owners) != 2 || st.Faulty != 1) {
			t.Errorf("shared stage = %+v; want merged, two owners, one faulty block", st)
		}
	}

	// The faulty block may be set aside before the last good block's run
	// ends: wait for every block to settle.
	var page web.QueuePage
	testenv.Eventually(t, time.Minute, "the blocks to settle", func() (string, bool) {
		page = getJSON[web.QueuePage](t, srv.URL+"/api/queue/raw")
		settled := true
		for _, b := range page.Blocks {
			for _, d := range b.States {
				settled = settled && d.State != state.Reserved && d.State != state.Unreserved
			}
		}
		return fmt.Sprintf("%+v", page.Blocks), settled
	})
	if page.Queue.Blocks != 4 || len(page.Blocks) != 4 || page.Blocks[0].Seq != 4 || page.Producer != "" ||
		strings.Join(page.Readers, ",") != "alice/clean" {
		t.Fatalf("queue page: %+v", page)
	}
	for _, b := range page.Blocks {
		want := state.Done
		if b.Seq == 3 {
			want = state.Faulty
		}
		if len(b.States) != 1 {
			t.Fatalf("block %s states %v; want one subscriber", b.Name, b.States)
		}
		for group, d := range b.States {
			if d.State != want {
				t.Errorf("block %s in %s: %s; want %s", b.Name, group, d.State, want)
			}
		}
	}
	if code, _, body := getText(t, srv.URL+"/api/queue/nosuch"); code != 404 || !strings.Contains(body, "nosuch") {
		t.Errorf("unknown queue: %d %s", code, body)
	}
	if code, _, body := getText(t, srv.URL+"/metrics"); code != 200 || !strings.Contains(body, `plumb_stage_runs_total{result="faulty",stage="alice/clean"} 1`) {
		t.Errorf("/metrics: %d, no faulty run counted:\n%.2000s", code, body)
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/": `<script src="app.js"`, "/app.js": "function drawGraph"} {
		if code, _, body := getText(t, srv.URL+path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want %q in:\n%.300s", path, code, want, body)
		}
	}
	if _, ct, _ := getText(t, srv.URL+"/app.js"); !strings.Contains(ct, "javascript") {
		t.Errorf("app.js served as %q", ct)
	}
	if ws := getJSON[[]flight.WorkerInfo](t, srv.URL+"/api/workers"); len(ws) != 0 {
		t.Errorf("workers without any: %+v", ws)
	}
	if l, ok, err := r.eng.Lease(context.Background(), flight.Hello{Worker: "w1", Host: "far", Slots: 2}); err != nil {
		t.Fatal(err)
	} else if ws := getJSON[[]flight.WorkerInfo](t, srv.URL+"/api/workers"); len(ws) != 1 || ws[0].Host != "far" || ws[0].Slots != 2 || ok != (len(ws[0].Runs) == 1) {
		t.Errorf("workers: %+v (leased %v: %+v)", ws, ok, l)
	}
	if st := getJSON[[]engine.StatusRow](t, srv.URL+"/api/status"); len(st) != 3 {
		t.Errorf("status rows: %+v", st)
	}
}

type sample struct {
	At   time.Time          `json:"at"`
	Rows []engine.StatusRow `json:"rows"`
}

// TestServeSamplesLatency: the chart's history starts with a sample at
// once and grows each interval; Serve returns when its context ends.
func TestServeSamplesLatency(t *testing.T) {
	r := newRig(t)
	r.put(t, 1, "x")
	if res, err := r.ctl.Submit("j.yaml", []byte("job: j\nfrom: earliest\nstages:\n  - {name: c, inputs: [raw], program: [cat], outputs: [raw.c]}\n"), ""); err != nil || res.State != "accepted" {
		t.Fatal(res, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- web.New(r.eng, r.ctl, r.db, nil, slog.Default()).Serve(ctx, lis, 10*time.Millisecond) }()
	url := "http://" + lis.Addr().String() + "/api/latency"
	deadline := time.Now().Add(60 * time.Second)
	var first time.Time
	for {
		h := getJSON[[]sample](t, url)
		if n := len(h); n >= 3 && h[n-1].Rows[0].ArrivalTo.Samples == 1 && h[n-1].At.After(h[0].At) {
			first = h[0].At
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("latency history never showed the block's run; %d samples, the last: %+v", len(h), h[len(h)-1])
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
	kept, err := r.db.Samples(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	before := len(kept)
	// A restarted dashboard shows the history it had, from the metadata.
	lis, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer func() { cancel(); <-done }()
	go func() { done <- web.New(r.eng, r.ctl, r.db, nil, slog.Default()).Serve(ctx, lis, time.Hour) }()
	h := getJSON[[]sample](t, "http://"+lis.Addr().String()+"/api/latency")
	if len(h) < before || !h[0].At.Equal(first) {
		t.Errorf("after a restart the history has %d samples from %v; it had %d from %v", len(h), h[0].At, before, first)
	}
}

// TestDashboardLogin: with auth on, every page needs a login, probes do
// not, and each user sees only what the users file lets it read.
func TestDashboardLogin(t *testing.T) {
	r := newRig(t)
	r.put(t, 1, "block 1")
	for i, job := range []string{"alice", "bob"} {
		src := fmt.Sprintf("job: %s\nfrom: earliest\nstages:\n  - {name: clean, inputs: [raw], program: [cat], outputs: [raw.clean]}\n"+
			"  - {name: mine, inputs: [raw.clean], program: [cat], outputs: [raw.%d]}\n", job, i)
		if res, err := r.ctl.Submit(job+".yaml", []byte(src), ""); err != nil || res.State != "accepted" {
			t.Fatalf("submit %s: %+v %v", job, res, err)
		}
	}
	file, authz, secrets := withUsers(t, "raw.*", "ana", "ops")
	anaSecret, opsSecret := secrets["ana"], secrets["ops"]
	srv := httptest.NewServer(web.New(r.eng, r.ctl, r.db, r.reg, slog.Default()).WithAuth(authz).Handler())
	defer srv.Close()
	get := func(path, user, secret string) (int, string, http.Header) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if user != "" {
			req.SetBasicAuth(user, secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header
	}
	for _, path := range []string{"/", "/api/graph", "/api/queues", "/metrics"} {
		if code, _, h := get(path, "", ""); code != 401 || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("GET %s without login: %d %v", path, code, h)
		}
	}
	if code, _, _ := get("/api/graph", "ana", opsSecret); code != 401 {
		t.Errorf("wrong secret: %d", code)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _, _ := get(path, "", ""); code != 200 {
			t.Errorf("probe %s needs a login: %d", path, code)
		}
	}
	code, body, _ := get("/api/graph", "ana", anaSecret)
	var g web.Graph
	json.Unmarshal([]byte(body), &g)
	var names []string
	for _, st := range g.Stages {
		names = append(names, st.Name)
	}
	if code != 200 || strings.Join(names, ",") != "alice/mine,bob/mine" || slices.Contains(g.Queues, "raw") {
		t.Errorf("ana's graph: %d %v %v; want only the stages over raw.clean", code, names, g.Queues)
	}
	if code, _, _ := get("/api/queue/raw", "ana", anaSecret); code != 403 {
		t.Errorf("ana reads queue raw: %d", code)
	}
	if code, _, _ := get("/metrics", "ana", anaSecret); code != 403 {
		t.Errorf("ana reads metrics: %d", code)
	}
	if code, body, _ := get("/api/queue/raw", "ops", opsSecret); code != 200 || !strings.Contains(body, `"name":"raw"`) {
		t.Errorf("ops reads queue raw: %d", code)
	}
	if code, _, _ := get("/metrics", "ops", opsSecret); code != 200 {
		t.Errorf("ops reads metrics: %d", code)
	}

	// Revocation reaches the dashboard's login cache at once (it used to
	// accept an old secret for 5 minutes): an old secret after a reset, a
	// revoked token and a removed user are each refused on the next
	// request.
	edit := func(fn func(f *auth.File)) { t.Helper(); testenv.EditUsers(t, file, fn) }
	var newSecret string
	edit(func(f *auth.File) { newSecret, _ = f.AddUser("ana", []string{"analysts"}) })
	if code, _, _ := get("/api/graph", "ana", anaSecret); code != 401 {
		t.Errorf("ana's old secret after a reset: %d", code)
	}
	if code, _, _ := get("/api/graph", "ana", newSecret); code != 200 {
		t.Errorf("ana's new secret: %d", code)
	}
	tok, _, err := authz.Login("ana", newSecret)
	if err != nil {
		t.Fatal(err)
	}
	bearer := func() int {
		req, _ := http.NewRequest("GET", srv.URL+"/api/graph", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := bearer(); code != 200 {
		t.Errorf("ana's token: %d", code)
	}
	// user revoke ends sessions (tokens); the secret itself still logs in.
	edit(func(f *auth.File) { f.Revoke("ana") })
	if code := bearer(); code != 401 {
		t.Errorf("ana's token after user revoke: %d", code)
	}
	edit(func(f *auth.File) { delete(f.Users, "ops") })
	if code, _, _ := get("/api/queue/raw", "ops", opsSecret); code != 401 {
		t.Errorf("a removed user's cached login: %d", code)
	}
}

// TestServeSamplesRates: the rates between samples show what went along
// each edge of a stage that ran, in and out, and a range the page does
// not offer is refused.
func TestServeSamplesRates(t *testing.T) {
	r := newRig(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- web.New(r.eng, r.ctl, r.db, nil, slog.Default()).Serve(ctx, lis, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	base := "http://" + lis.Addr().String()
	r.put(t, 1, "0123456789")
	if res, err := r.ctl.Submit("j.yaml", []byte("job: j\nfrom: earliest\nstages:\n  - {name: c, inputs: [raw], program: [cat], outputs: [raw.c]}\n"), ""); err != nil || res.State != "accepted" {
		t.Fatal(res, err)
	}
	seen := map[string]web.Rate{} // the busiest point of each series
	for deadline := time.Now().Add(60 * time.Second); len(seen) < 3; time.Sleep(10 * time.Millisecond) {
		for _, rs := range getJSON[[]web.RateSeries](t, base+"/api/rates?range=15m") {
			key := rs.Kind + " " + rs.Stage + rs.From + ">" + rs.To
			for _, p := range rs.Points {
				if p.BlocksPerSec > 0 || p.RunsPerSec > 0 {
					seen[key] = p
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rates never showed the run; saw %+v", seen)
		}
	}
	in, out, st := seen["edge raw>j/c"], seen["edge j/c>raw.c"], seen["stage j/c>"]
	// One 10-byte block in and out within one sampling interval: the
	// rates stand in that ratio, whatever the interval.
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }
	if in.BlocksPerSec <= 0 || !near(in.BytesPerSec, 10*in.BlocksPerSec) || !near(out.BytesPerSec, 10*out.BlocksPerSec) ||
		!near(st.BytesPerSec, in.BytesPerSec) || !near(st.OutBytesPerSec, out.BytesPerSec) || !near(st.RunsPerSec, in.BlocksPerSec) {
		t.Errorf("rates: in %+v, out %+v, stage %+v", in, out, st)
	}
	if code, _, body := getText(t, base+"/api/rates?range=1y"); code != 400 || !strings.Contains(body, "15m, 1h, 6h or 24h") {
		t.Errorf("range=1y: %d %s", code, body)
	}
}

// TestRatesOfAStageNewSinceTheLastSample: a job submitted and done
// between two samples (decode in a second) still shows its rates: its
// stage counted from zero, not from a sample it was not in.
func TestRatesOfAStageNewSinceTheLastSample(t *testing.T) {
	r := newRig(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	const every = 2 * time.Second
	go func() { done <- web.New(r.eng, r.ctl, r.db, nil, slog.Default()).Serve(ctx, lis, every) }()
	defer func() { cancel(); <-done }()
	base := "http://" + lis.Addr().String()
	// The first sample is taken as the dashboard starts, before the job.
	getJSON[[]web.RateSeries](t, base+"/api/rates?range=15m")
	time.Sleep(200 * time.Millisecond)
	started := time.Now()
	r.put(t, 1, "0123456789")
	if res, err := r.ctl.Submit("j.yaml", []byte("job: j\nfrom: earliest\nstages:\n  - {name: c, inputs: [raw], program: [cat], outputs: [raw.c]}\n"), ""); err != nil || res.State != "accepted" {
		t.Fatal(res, err)
	}
	testenv.WaitFor(t, 30*time.Second, "the run to finish", func() bool {
		st := r.eng.Stats()
		return len(st) == 1 && st[0].Runs == 1
	})
	time.Sleep(time.Until(started.Add(every + every/2)))
	var blocks float64
	for _, rs := range getJSON[[]web.RateSeries](t, base+"/api/rates?range=15m") {
		for _, p := range rs.Points {
			if rs.Kind == "edge" && rs.From == "raw" && rs.To == "j/c" {
				blocks += p.BlocksPerSec
			}
		}
	}
	if blocks <= 0 {
		t.Errorf("the edge raw → j/c shows no blocks/s for a run between two samples")
	}
}

// TestRebindingHostRefused: without --users, a web page on a name its
// owner points at 127.0.0.1 (DNS rebinding) read /api/* and could retract
// jobs, as the browser took it for that name's own origin. The dashboard
// now answers only to IP addresses, localhost, this machine's name and
// names it is given; others get 421 before anything is read or done.
func TestRebindingHostRefused(t *testing.T) {
	r := newRig(t)
	srv := httptest.NewServer(web.New(r.eng, r.ctl, r.db, r.reg, slog.Default()).WithHosts("Dash.Example.org").Handler())
	defer srv.Close()
	do := func(method, host, path string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"job":"alice"}`))
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:8080", "127.0.0.1.nip.io"} {
		for _, path := range []string{"/api/queues", "/api/jobs", "/healthz"} {
			if code, body := do("GET", host, path); code != http.StatusMisdirectedRequest || !strings.Contains(body, "--http-host") {
				t.Errorf("GET %s with Host %s: %d %s", path, host, code, body)
			}
		}
		if code, _ := do("POST", host, "/api/retract"); code != http.StatusMisdirectedRequest {
			t.Errorf("POST /api/retract with Host %s: %d", host, code)
		}
	}
	me, _ := os.Hostname()
	for _, host := range []string{srv.Listener.Addr().String(), "127.0.0.1", "[::1]:80", "localhost:8080", "dash.example.org", "DASH.example.org.:443", me} {
		if code, body := do("GET", host, "/api/queues"); code != http.StatusOK {
			t.Errorf("GET /api/queues with Host %s: %d %s", host, code, body)
		}
	}
}

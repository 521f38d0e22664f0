package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// snappyBlock is a source block: random-ish bytes, snappy-compressed, and
// the SHA-256 of the bytes a decode stage must produce from it.
func snappyBlock(t *testing.T, seq int) (client.Source, string) {
	r := rand.New(rand.NewPCG(uint64(seq), 3))
	raw := make([]byte, 32<<10+r.IntN(128<<10))
	for i := range raw {
		raw[i] = "abcdefgh"[r.IntN(8)] // compressible, like captures
	}
	var z bytes.Buffer
	w, _ := codecs.Snappy.NewWriter(&z)
	w.Write(raw)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := z.Bytes()
	sum := sha256.Sum256(data)
	want := sha256.Sum256(raw)
	return client.Source{
		Name: fmt.Sprintf("20250505-151105-%08d.site1.pcap.sz", seq), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
	}, hex.EncodeToString(want[:])
}

// TestPipelineSurvivesServerKill SIGKILLs the server while stage runs are
// in flight, several times, then lets the pipeline drain: every input
// block has exactly one output in each derived queue, each with the
// checksum the stage must produce, and none is faulty.
func TestPipelineSurvivesServerKill(t *testing.T) {
	const blocks = 60
	data := t.TempDir()
	addr := testenv.FreeAddr(t)
	ctx := context.Background()
	job := filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(job, []byte(`
job: crashy
from: earliest
stages:
  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap], retention: forever}
  - {name: slow-copy, inputs: [pcap], program: [sh, -c, "sleep 0.05; cat"], outputs: [pcap.copy], retention: forever}
`), 0o644)

	serve := func() (*plumbProc, *client.Client) {
		// Four kills may all land on one block's runs, which would make it
		// FAULTY after its 4 attempts (as it should: TestPoisonBlockEndsFaulty);
		// here nothing may be lost, so it gets more.
		p := startPlumb(t, "serve", "--data", data, "--listen", addr, "--slots", "4", "--log-level", "warn", "--max-attempts", "8")
		waitListening(t, addr)
		c, err := client.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return p, c
	}
	p, c := serve()
	want := map[string]string{} // output name → SHA-256 it must have
	for seq := 1; seq <= blocks; seq++ {
		src, sum := snappyBlock(t, seq)
		if _, err := c.Put(ctx, src); err != nil {
			t.Fatal(err)
		}
		want[strings.TrimSuffix(src.Name, ".sz")] = sum
		want[strings.TrimSuffix(src.Name, ".sz")+".copy"] = sum
	}
	if res, err := c.SubmitJob(ctx, "job.yaml", mustRead(t, job)); err != nil || res.State != "accepted" {
		t.Fatalf("submit = %+v, %v", res, err)
	}
	rng := rand.New(rand.NewPCG(11, 11))
	for kill := 1; kill <= 4; kill++ {
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		p.cmd.Process.Signal(os.Kill)
		p.cmd.Wait()
		p, c = serve()
	}
	testenv.Eventually(t, 2*time.Minute, "the pipeline to drain", func() (string, bool) {
		pc, _ := c.Blocks(ctx, "pcap.copy")
		if len(pc) >= blocks {
			return "", true
		}
		st, _ := c.Stats(ctx)
		return fmt.Sprintf("%d of %d outputs; stats %+v\n%s", len(pc), blocks, st, p.log), false
	})
	for _, q := range []string{"pcap", "pcap.copy"} {
		got, err := c.Blocks(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != blocks {
			t.Errorf("queue %s holds %d blocks, want exactly %d", q, len(got), blocks)
		}
		for _, b := range got {
			if want[b.Name] != b.SHA256 {
				t.Errorf("%s: sha256 %s, want %s", b.Name, b.SHA256, want[b.Name])
			}
		}
	}
	// Each published output reads back whole and matches its checksum.
	s, err := c.Get(ctx, "20250505-151105-00000007.site1.pcap.copy")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatalf("read output: %v", s.Err())
	}
	if n, err := io.Copy(io.Discard, s); err != nil || n == 0 {
		t.Fatalf("read output: %d bytes, %v", n, err)
	}
	s.Close()
	if fb, err := c.Faulty(ctx, ""); err != nil || len(fb) != 0 {
		t.Errorf("faulty after crashes = %+v, %v (a server crash must not count as a failed attempt)", fb, err)
	}
}

// plumbExec runs plumb as a separate process, as from a shell, and
// returns its stdout, stderr and exit code.
func plumbExec(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := testenv.Command(t, 5*time.Minute, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestJobCommands drives the job verbs as a user would.
func TestJobCommands(t *testing.T) {
	data := t.TempDir()
	addr := servePlumb(t, data)
	c := dialPlumb(t, addr)
	src, _ := snappyBlock(t, 1)
	if _, err := c.Put(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := plumbExec(t, "job", "submit", "--server", addr, "../../examples/jobs/alice-archive.yaml", "../../examples/jobs/bob-summary.yaml")
	if code != 0 || !strings.Contains(out, "job bob-summary accepted; its stages: alice-archive/decode, bob-summary/summary") {
		t.Fatalf("submit: %d\n%s\n%s", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("job: bad\nstages:\n  - name: s\n    inputs: [pcap.sz]\n    program: builtin:nope\n    outputs: [pcap.xz]\n"), 0o644)
	_, errOut, code = plumbExec(t, "job", "submit", "--server", addr, bad)
	if code == 0 || !strings.Contains(errOut, "job bad rejected") || !strings.Contains(errOut, "5:14: stage \"s\".program: built-in \"nope\" is not known") {
		t.Fatalf("bad job: exit %d, stderr:\n%s", code, errOut)
	}
	out, _, _ = plumbExec(t, "job", "list", "--server", addr)
	if !strings.Contains(out, "alice-archive  alice") {
		t.Errorf("job list lacks alice-archive:\n%s", out)
	}
	if strings.Contains(out, "bad") { // refused jobs are not stored
		t.Errorf("job list shows the refused job:\n%s", out)
	}
	out, _, code = plumbExec(t, "graph", "--dot", "--server", addr)
	if code != 0 || !strings.Contains(out, "merged: 2 owners") || !strings.Contains(out, "digraph plumb") {
		t.Errorf("graph --dot:\n%s", out)
	}
	out, _, code = plumbExec(t, "graph", "--short", "--server", addr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 || !regexp.MustCompile(`^alice-archive/decode +pcap\.sz → pcap +builtin:decode +alice-archive, bob-summary$`).MatchString(lines[1]) {
		t.Errorf("graph --short: want a header and a line per stage, the decode stage shared by both jobs:\n%s", out)
	}
	out, _, code = plumbExec(t, "stats", "--wait", "--server", addr)
	if code != 0 || !strings.Contains(out, "alice-archive/decode") || !strings.Contains(out, "xz encoder") {
		t.Errorf("stats:\n%s", out)
	}
	out, _, code = plumbExec(t, "status", "--server", addr)
	if code != 0 || !strings.Contains(out, "alice-archive/decode") || !strings.Contains(out, "OLDEST OWED") {
		t.Errorf("status:\n%s", out)
	}
	if _, errOut, code := plumbExec(t, "job", "retract", "--server", addr, "nosuch"); code == 0 || !strings.Contains(errOut, "plumb job list") {
		t.Errorf("retract of an unknown job: %d %s", code, errOut)
	}
	if out, _, code := plumbExec(t, "job", "retract", "--server", addr, "alice-archive"); code != 0 || !strings.Contains(out, "retracted") {
		t.Errorf("retract: %d %s", code, out)
	}
}

// TestDailyRSSACWindowThroughServer: generated DNS traffic of three sites
// shipped to a real server, a daily RSSAC window stage, one block withheld:
// the site's day waits, fires after max_wait with that block missing, and
// fires again as revision 2 when the block comes.
func TestDailyRSSACWindowThroughServer(t *testing.T) {
	addr := servePlumb(t, t.TempDir(), "--tick", "100ms")
	c := dialPlumb(t, addr)
	ctx := context.Background()
	day := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	put := func(site string, seq uint64, tm time.Time) {
		t.Helper()
		var b bytes.Buffer
		w, _ := pcap.NewWriter(&b, layers.LinkTypeEthernet, 65535, false)
		if _, err := synth.Generate(ctx, w, synth.Config{Seed: seq*31 + uint64(len(site)), Start: tm, Duration: time.Minute, Rate: 30}); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		data := b.Bytes()
		sum := sha256.Sum256(data)
		n := block.Name{Time: tm, Seq: seq, Instance: site, Queue: "pcap"}
		if _, err := c.Put(ctx, client.Source{Name: n.String(), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}); err != nil {
			t.Fatal(err)
		}
	}
	put("ams", 1, day.Add(time.Hour))
	res, err := c.SubmitJob(ctx, "rssac.yaml", []byte(`
job: rssac
from: earliest
stages:
  - name: daily
    abstraction: window
    window: {size: 24h, max_wait: 2s, late: refire}
    inputs: [pcap]
    program: builtin:rssac?service=x.root-servers.net
    outputs: [rssac.yaml]
    retention: forever
`))
	if err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	for _, site := range []string{"ams", "lax", "nrt"} {
		for seq := uint64(1); seq <= 4; seq++ {
			if site == "ams" && seq == 1 || site == "lax" && seq == 3 {
				continue
			}
			put(site, seq, day.Add(time.Duration(seq)*5*time.Hour))
		}
		put(site, 5, day.Add(25*time.Hour)) // the next day brackets this one
	}
	fired := func() map[string]client.WindowView {
		ws, err := c.Windows(ctx, "rssac/daily")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]client.WindowView{}
		for _, w := range ws {
			if w.State == "fired" {
				out[fmt.Sprintf("%s rev %d", w.ID, w.Revision)] = w
			}
		}
		return out
	}
	waitFor := func(what string, cond func(map[string]client.WindowView) bool) map[string]client.WindowView {
		t.Helper()
		var ws map[string]client.WindowView
		testenv.Eventually(t, time.Minute, what, func() (string, bool) {
			ws = fired()
			return fmt.Sprintf("fired: %v", ws), cond(ws)
		})
		return ws
	}
	ws := waitFor("three days", func(ws map[string]client.WindowView) bool { return len(ws) == 3 })
	if w := ws["lax/20213 rev 1"]; w.Reason != "max_wait" || fmt.Sprint(w.Missing) != "[lax:3]" {
		t.Fatalf("lax's day = %+v", w)
	}
	if w := ws["ams/20213 rev 1"]; w.Reason != "complete" || w.Blocks != 4 {
		t.Fatalf("ams's day = %+v", w)
	}
	put("lax", 3, day.Add(15*time.Hour))
	ws = waitFor("revision 2", func(ws map[string]client.WindowView) bool { return len(ws) == 4 })
	if w := ws["lax/20213 rev 2"]; len(w.Missing) != 0 || fmt.Sprint(w.Late) != "[lax:3]" || w.Blocks != 4 {
		t.Fatalf("revision 2 = %+v", w)
	}
	bs, err := c.Blocks(ctx, "rssac.yaml")
	if err != nil || len(bs) != 4 {
		t.Fatalf("rssac.yaml holds %d blocks: %v", len(bs), err)
	}
	s, err := c.Get(ctx, "20250505-000000-02021302.lax.rssac.yaml")
	if err != nil || !s.Next() {
		t.Fatalf("get revision 2: %v", err)
	}
	doc, _ := io.ReadAll(s)
	s.Close()
	if !strings.Contains(string(doc), "service: x.root-servers.net") || !strings.Contains(string(doc), "metric: unique-sources") {
		t.Errorf("revision 2:\n%s", doc)
	}
	// The listing narrows, and says when it stopped at its limit.
	if ws, err := c.WindowsMatching(ctx, client.WindowsRequest{Stage: "rssac/daily", Site: "lax", State: "fired"}); err != nil || len(ws) != 2 {
		t.Errorf("lax's fired windows: %+v %v", ws, err)
	}
	out, errOut, code := plumbExec(t, "windows", "rssac/daily", "--server", addr, "--state", "fired", "--limit", "1")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "more windows match than the 1 shown") {
		t.Errorf("plumb windows --limit 1: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := plumbExec(t, "windows", "--server", addr, "--state", "gone"); code != 1 || !strings.Contains(errOut, "want waiting, fired or faulty") {
		t.Errorf("plumb windows --state gone: exit %d %s", code, errOut)
	}
}

// TestExampleJobsOnAFreshServer: the README's first pipeline command,
// `plumb job submit examples/jobs/*.yaml`, rejected all three jobs on a
// fresh server (their input queue held no block yet); the demo hid it by
// importing first. The example jobs now declare the queue agents ship to.
func TestExampleJobsOnAFreshServer(t *testing.T) {
	t.Parallel()
	_, addr, _ := serveBuilt(t)
	files, err := filepath.Glob("../../examples/jobs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("example jobs: %v %v", files, err)
	}
	out, errOut, code := plumbExec(t, append([]string{"job", "submit", "--server", addr}, files...)...)
	if code != 0 || strings.Count(out, " accepted") != len(files) {
		t.Fatalf("plumb job submit examples/jobs/*.yaml: exit %d\n%s%s", code, out, errOut)
	}
}

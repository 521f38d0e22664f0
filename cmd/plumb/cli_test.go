package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
)

func plumbCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestCLI drives the client verbs against a real server process as a user
// would from a shell.
func TestCLI(t *testing.T) {
	addr := testenv.FreeAddr(t)
	p := startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr)
	waitListening(t, addr)
	t.Setenv("PLUMB_SERVER", addr)

	in := t.TempDir()
	capture, err := os.ReadFile("../../testdata/pcaps/dnscap__dns.pcap")
	if err != nil {
		t.Fatal(err)
	}
	name := "20250505-151105-00000001.lax.pcap"
	os.WriteFile(filepath.Join(in, name), capture, 0o644)
	os.WriteFile(filepath.Join(in, "capture.pcap"), capture, 0o644)

	// put prints a line per block; stdout is captured by the process, so
	// check the effect through the other verbs.
	if _, stderr, code := plumbCLI(t, "put", filepath.Join(in, name)); code != 0 {
		t.Fatalf("put: %d %s", code, stderr)
	}
	if _, stderr, code := plumbCLI(t, "put", filepath.Join(in, "capture.pcap")); code != 1 || !strings.Contains(stderr, "--name") {
		t.Fatalf("put of a badly named file = %d %q; want an error suggesting --name", code, stderr)
	}
	if _, stderr, code := plumbCLI(t, "put", "--name", "20250505-151106-00000002.lax.pcap", filepath.Join(in, "capture.pcap")); code != 0 {
		t.Fatalf("put --name: %d %s", code, stderr)
	}
	out := filepath.Join(t.TempDir(), "got.pcap")
	if _, stderr, code := plumbCLI(t, "get", "-o", out, name); code != 0 {
		t.Fatalf("get: %d %s", code, stderr)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, capture) {
		t.Fatal("get wrote different bytes")
	}
	// Into a FIFO (as into /dev/null): written through, never replaced by
	// a file (issue 26: get -o /dev/null replaced the device node).
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	drained := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			drained <- nil
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		drained <- b
	}()
	if _, stderr, code := plumbCLI(t, "get", "-o", fifo, name); code != 0 {
		t.Fatalf("get -o FIFO: %d %s", code, stderr)
	}
	if got := <-drained; !bytes.Equal(got, capture) {
		t.Errorf("the FIFO's reader got %d bytes, want %d", len(got), len(capture))
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("get -o replaced the FIFO: %v %v", fi.Mode(), err)
	}
	if _, stderr, code := plumbCLI(t, "get", "20250505-151105-00000009.lax.pcap"); code != 1 || !strings.Contains(stderr, "not stored") {
		t.Fatalf("get of a missing block = %d %q", code, stderr)
	}
	dir := t.TempDir()
	if _, stderr, code := plumbCLI(t, "follow", "pcap", "--group", "g", "--out", dir, "--from", "earliest", "--once"); code != 0 {
		t.Fatalf("follow: %d %s", code, stderr)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("follow wrote %d files, want 2", len(ents))
	}
	// follow --once without --group leaves no group behind; group list
	// and delete work on named groups and name what they cannot find.
	if _, stderr, code := plumbCLI(t, "follow", "pcap", "--out", t.TempDir(), "--from", "earliest", "--once"); code != 0 {
		t.Fatalf("follow --once without a group: %d %s", code, stderr)
	}
	if out, stderr, code := plumbExec(t, "group", "list", "pcap", "--server", addr); code != 0 || !strings.Contains(out, "\ng ") || strings.Contains(out, "tmp-") {
		t.Errorf("group list after follow --once: %d %q %s", code, out, stderr)
	}
	if _, stderr, code := plumbCLI(t, "group", "delete", "pcap", "nosuch"); code != 1 || !strings.Contains(stderr, "nosuch") {
		t.Errorf("group delete of an unknown group: %d %s", code, stderr)
	}
	if _, stderr, code := plumbCLI(t, "group", "delete", "pcap", "g"); code != 0 {
		t.Errorf("group delete: %d %s", code, stderr)
	}
	if out, _, _ := plumbExec(t, "group", "list", "pcap", "--server", addr); strings.Contains(out, "\ng ") || !strings.HasPrefix(out, "GROUP") {
		t.Errorf("group g still listed: %q", out)
	}
	if _, stderr, code := plumbCLI(t, "follow", "pcap"); code != 2 || !strings.Contains(stderr, "usage") {
		t.Fatalf("follow without --group = %d %q; want usage", code, stderr)
	}
	if _, stderr, code := plumbCLI(t, "frob"); code != 2 || !strings.Contains(stderr, "unknown command") {
		t.Fatalf("unknown command = %d %q", code, stderr)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("server exit on SIGTERM: %v\n%s", err, p.log)
	}
	if !strings.Contains(p.log.String(), "shutting down") {
		t.Fatalf("server log does not report the shutdown:\n%s", p.log)
	}
}

// TestCLIConventions: every verb's -h prints its usage on stdout and
// exits 0; plumb --help and --version too; a queue that does not exist is
// an error naming it (exit 1), in words rather than gRPC framing.
func TestCLIConventions(t *testing.T) {
	for _, c := range commands() {
		out, errOut, code := plumbExec(t, c.name, "-h")
		if code != 0 || !strings.HasPrefix(out, "usage: plumb "+c.name) || errOut != "" {
			t.Errorf("plumb %s -h: exit %d, stdout %.60q, stderr %.60q", c.name, code, out, errOut)
		}
	}
	for _, args := range [][]string{{"--help"}, {"help"}} {
		if out, _, code := plumbExec(t, args...); code != 0 || !strings.Contains(out, "commands:") {
			t.Errorf("plumb %v: exit %d %.60q", args, code, out)
		}
	}
	if out, _, code := plumbExec(t, "--version"); code != 0 || !strings.HasPrefix(out, "plumb ") || !strings.Contains(out, "go1.") {
		t.Errorf("plumb --version: exit %d %q", code, out)
	}
	if _, _, code := plumbExec(t); code != 2 {
		t.Errorf("plumb without a command: exit %d, want 2", code)
	}
	if _, errOut, code := plumbExec(t, "serve", "--data", t.TempDir(), "--stage-nice", "20"); code == 0 || !strings.Contains(errOut, "--stage-nice 20: give a nice value from 0") {
		t.Errorf("plumb serve --stage-nice 20: exit %d %q", code, errOut)
	}
	addr, web := testenv.FreeAddr(t), testenv.FreeAddr(t)
	var metricsBefore string
	startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr, "--http", web)
	waitListening(t, addr)
	waitListening(t, web)
	if resp, err := http.Get("http://" + web + "/metrics"); err != nil {
		t.Error(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "plumb_build_info{goversion=\"go1.") {
			t.Errorf("/metrics has no plumb_build_info")
		}
		metricsBefore = string(body)
	}
	// Progress into a pipe is whole lines, never a redrawn \r line.
	out, errOut, code := plumbExec(t, "import", "--server", addr, "--site", "lax", "--new-instance", "--spool", filepath.Join(t.TempDir(), "spool"),
		"../../testdata/pcaps/dnscap__dns.pcap")
	if code != 0 || strings.ContainsRune(out+errOut, '\r') || !strings.Contains(errOut, "read") {
		t.Errorf("import with progress into a pipe: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if out, errOut, code := plumbExec(t, "stats", "--wait", "--server", addr); code != 0 || strings.ContainsRune(out+errOut, '\r') {
		t.Errorf("stats --wait into a pipe: exit %d %q %q", code, out, errOut)
	}
	// After the import, the queue and its site are in the metrics.
	if resp, err := http.Get("http://" + web + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{"plumb_read_estimate_ratio_bucket", `plumb_uploads_total{result="stored"} 1`, `plumb_queue_blocks{queue="pcap.sz"} 1`, `plumb_site_last_seq{queue="pcap.sz",site="lax"} 1`, `plumb_site_last_arrival_timestamp_seconds{queue="pcap.sz",site="lax"}`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if strings.Contains(metricsBefore, "plumb_site_last_seq") {
			t.Errorf("a site before any block")
		}
	}
	_, errOut, code = plumbExec(t, "blocks", "nosuchqueue", "--server", addr)
	if code != 1 || !strings.Contains(errOut, "nosuchqueue") || strings.Contains(errOut, "rpc error") || !strings.Contains(errOut, "not found: ") {
		t.Errorf("plumb blocks nosuchqueue: exit %d %q", code, errOut)
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "-", 850 * time.Millisecond: "850ms", 12300 * time.Millisecond: "12.3s", 245 * time.Second: "4m05s",
		5*time.Hour + 12*time.Minute: "5h12m", 100 * time.Hour: "4d", 498913 * time.Hour: "56.9y",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
	// plumb status: the event-time latency of a backfill is its age.
	for d, want := range map[time.Duration]string{0: "-", 100 * time.Hour: "4d", 31 * 24 * time.Hour: "backfill", 498913 * time.Hour: "backfill"} {
		if got := eventLatency(d); got != want {
			t.Errorf("eventLatency(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestStagesByName: plumb faulty, queues and status show stages by their
// job and stage names, a merged stage with every job that owns it, never
// by internal group ids (issue 22: "for stage-07dbb1f0f865").
func TestStagesByName(t *testing.T) {
	addr := testenv.FreeAddr(t)
	picky := filepath.Join(t.TempDir(), "picky.sh")
	os.WriteFile(picky, []byte("#!/bin/sh\ndata=$(cat)\ncase \"$data\" in *poison*) echo poison >&2; exit 3;; esac\nprintf '%s' \"$data\"\n"), 0o755)
	startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr, "--run-ro", picky)
	waitListening(t, addr)
	c := dialPlumb(t, addr)
	ctx := context.Background()
	if _, err := c.Put(ctx, source("20250505-151105-00000001.lax.raw", []byte("poison"))); err != nil {
		t.Fatal(err)
	}
	for i, job := range []string{"alice-archive", "bob-summary"} {
		src := fmt.Sprintf("job: %s\nfrom: earliest\nstages:\n  - {name: clean, inputs: [raw], program: [%s], outputs: [raw.clean]}\n"+
			"  - {name: mine, inputs: [raw.clean], program: [cat], outputs: [raw.%d]}\n", job, picky, i)
		if res, err := c.SubmitJob(ctx, job+".yaml", []byte(src)); err != nil || res.State != "accepted" {
			t.Fatalf("%+v %v", res, err)
		}
	}
	testenv.WaitFor(t, time.Minute, "the poison block set aside", func() bool {
		fb, err := c.Faulty(ctx, "raw")
		return err == nil && len(fb) == 1
	})
	// A good block makes the mine stages' outputs, which nothing reads.
	if _, err := c.Put(ctx, source("20250505-151106-00000002.lax.raw", []byte("fine"))); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "raw.0 and raw.1", func() bool {
		qs, err := c.Queues(ctx)
		n := 0
		for _, q := range qs {
			if (q.Queue == "raw.0" || q.Queue == "raw.1") && q.Blocks == 1 {
				n++
			}
		}
		return err == nil && n == 2
	})
	// A read, so that status has the read admission's figures to show.
	if _, errOut, code := plumbExec(t, "get", "20250505-151106-00000002.lax.raw", "-o", t.TempDir(), "--server", addr); code != 0 {
		t.Fatalf("plumb get: %s", errOut)
	}
	for _, verb := range []string{"faulty", "queues", "status"} {
		out, errOut, code := plumbExec(t, verb, "--server", addr)
		if verb == "status" && !regexp.MustCompile(`reads: [1-9]\d* transfers, \d+ longer than estimated \(.*%\), \d+ refused as hopeless; actual÷estimate p50 [0-9.]+, p99 [0-9.]+`).MatchString(out) {
			t.Errorf("plumb status does not say how the read estimates fare:\n%s", out)
		}
		if code != 0 || strings.Contains(out, "stage-") {
			t.Errorf("plumb %s: exit %d, shows an internal id:\n%s%s", verb, code, out, errOut)
		}
		if verb != "status" && !strings.Contains(out, "clean (alice-archive, bob-summary)") {
			t.Errorf("plumb %s does not name the merged stage with its jobs:\n%s", verb, out)
		}
		// Nothing reads the mine stages' outputs: the operator is told
		// what becomes of them.
		if verb == "queues" && !strings.Contains(out, "warning: queue raw.0: nothing reads it and stage alice-archive/mine gives it no retention: its blocks stay until a consumer group takes them, at most 30d") {
			t.Errorf("plumb queues does not warn of the unread queue raw.0:\n%s", out)
		}
	}
}

// TestVersionFromMakefile: `plumb version` said "(devel) commit unknown"
// for a `make build` where Go stamps no version control information
// (GOFLAGS=-buildvcs=false); the Makefile now passes the version and the
// commit.
func TestVersionFromMakefile(t *testing.T) {
	t.Parallel()
	head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "plumb")
	if out, err := testenv.Command(t, 5*time.Minute, "make", "-s", "-C", "../..", "build", "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.Contains(string(out), "commit "+strings.TrimSpace(string(head))) || strings.Contains(string(out), "(devel)") {
		t.Fatalf("plumb version after make build: %q %v", out, err)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 47923: "46.8 KiB", 3 << 30: "3.0 GiB", 1<<62 + 1<<61: "6.0 EiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestExitCodes: every verb exits 0 on -h, 2 on a usage mistake (a flag it
// does not have), and 1 naming what it did not find. A misspelt flag
// exited 1 like a failure, and retry, lost, faulty, site owners, follow
// --once and stream of a misspelt queue (or stream of a misspelt site)
// answered nothing and exited 0.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		if _, _, code := plumbExec(t, c.name, "-h"); code != 0 {
			t.Errorf("plumb %s -h: exit %d, want 0", c.name, code)
		}
		if _, errOut, code := plumbExec(t, c.name, "--no-such-flag"); code != 2 || !strings.Contains(errOut, "no-such-flag") {
			t.Errorf("plumb %s --no-such-flag: exit %d, want 2 naming the flag: %s", c.name, code, errOut)
		}
	}
	addr := servePlumb(t, t.TempDir())
	if out, errOut, code := plumbExec(t, "put", "--server", addr, "--name", "20250505-151105-00000001.lax.pcap.sz", "../../testdata/pcaps/dnscap__dns.pcap"); code != 0 {
		t.Fatalf("put: %s %s", out, errOut)
	}
	for _, tc := range []struct {
		args []string
		name string // what the error must name
	}{
		{[]string{"blocks", "nosuchq"}, "nosuchq"},
		{[]string{"get", "20250505-151105-00000001.lax.nosuchq", "-o", t.TempDir()}, "20250505-151105-00000001.lax.nosuchq"},
		{[]string{"group", "list", "nosuchq"}, "nosuchq"},
		{[]string{"group", "delete", "nosuchq", "nosuchg"}, "nosuchg"},
		{[]string{"windows", "nosuchstage"}, "nosuchstage"},
		{[]string{"windows", "fire", "nosuchstage", "lax/1"}, "nosuchstage"},
		{[]string{"job", "retract", "nosuchjob"}, "nosuchjob"},
		{[]string{"retry", "nosuchq"}, "nosuchq"},
		{[]string{"lost", "nosuchq"}, "nosuchq"},
		{[]string{"faulty", "nosuchq"}, "nosuchq"},
		{[]string{"site", "owners", "nosuchq"}, "nosuchq"},
		{[]string{"store", "remove", "nosuchstore"}, "nosuchstore"},
		{[]string{"program", "remove", "nosuchprog"}, "nosuchprog"},
		{[]string{"follow", "nosuchq", "--once", "--out", t.TempDir()}, "nosuchq"},
		{[]string{"stream", "nosuchq", "--instance", "lax"}, "nosuchq"},
		{[]string{"stream", "pcap.sz", "--instance", "nosuchsite"}, "nosuchsite"},
	} {
		_, errOut, code := plumbExec(t, append(tc.args, "--server", addr)...)
		if code != 1 || !strings.Contains(errOut, tc.name) || strings.Contains(errOut, "rpc error") {
			t.Errorf("plumb %s: exit %d, want 1 naming %s in words: %s", strings.Join(tc.args, " "), code, tc.name, errOut)
		}
	}
	// A queue a stage writes is known before its first block: empty,
	// not misspelt.
	job := filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(job, []byte("job: j\nqueues: [other.sz]\nstages:\n  - {name: d, inputs: [other.sz], program: builtin:decode, outputs: [other.raw]}\n"), 0o644)
	if out, errOut, code := plumbExec(t, "job", "submit", "--server", addr, job); code != 0 {
		t.Fatalf("submit: %s %s", out, errOut)
	}
	for _, args := range [][]string{{"blocks", "other.sz"}, {"blocks", "other.raw"}, {"follow", "other.raw", "--once", "--out", t.TempDir()}} {
		if _, errOut, code := plumbExec(t, append(args, "--server", addr)...); code != 0 {
			t.Errorf("plumb %s of a stage's output before its first block: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
}

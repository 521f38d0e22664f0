package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// agentForbidden are what the agent build (go build -tags agent) must
// not link: the server and what only it needs — scheduler, metadata and
// its stores, dashboard, lake, blob stores, sandbox, SQL drivers.
var agentForbidden = []string{
	"github.com/plumb-dev/plumb/server", "github.com/plumb-dev/plumb/engine", "github.com/plumb-dev/plumb/state",
	"github.com/plumb-dev/plumb/metakv", "github.com/plumb-dev/plumb/web", "github.com/plumb-dev/plumb/laketable",
	"github.com/plumb-dev/plumb/worker", "github.com/plumb-dev/plumb/sandbox", "github.com/plumb-dev/plumb/blob",
	"github.com/plumb-dev/plumb/fsck", "github.com/plumb-dev/plumb/retention", "github.com/plumb-dev/plumb/admission",
	"github.com/apache/iceberg-go", "github.com/jackc/", "modernc.org/sqlite", "github.com/mattn/go-sqlite3",
	"go.etcd.io/bbolt", "github.com/minio/", "github.com/apache/arrow-go/v18/parquet", "github.com/apache/arrow-go/v18/arrow/compute",
}

// buildPlumb builds ./cmd/plumb stripped of its symbol tables, as `make
// build-agent` does, with the build tags given, and returns its path.
func buildPlumb(t *testing.T, gobin, tags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "plumb")
	args := []string{"build", "-ldflags", "-s -w", "-o", bin}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	if out, err := testenv.Command(t, 10*time.Minute, gobin, append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	return bin
}

// vmRSS reads a process's resident memory in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for process %d", pid)
	return 0
}

// TestAgentBuild: the agent build of plumb (a capture site's binary)
// links none of the server's packages, is at most 35 MB, follows a file
// idle in at most 40 MB of RSS, and its agent, import and dns verbs do
// what the full binary's do.
func TestAgentBuild(t *testing.T) {
	gobin := testenv.Tool(t, "go")
	out, err := testenv.Command(t, 2*time.Minute, gobin, "list", "-tags", "agent", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range agentForbidden {
			if dep == bad || strings.HasPrefix(dep, strings.TrimSuffix(bad, "/")+"/") || strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad) {
				t.Errorf("the agent build links %s", dep)
			}
		}
	}
	agentBin, fullBin := buildPlumb(t, gobin, "agent"), buildPlumb(t, gobin, "")
	sizeOf := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	as, fs := sizeOf(agentBin), sizeOf(fullBin)
	t.Logf("agent build %.1f MB, full %.1f MB (both -s -w)", float64(as)/1e6, float64(fs)/1e6)
	if as > 35e6 {
		t.Errorf("the agent build is %.1f MB, want ≤ 35 MB", float64(as)/1e6)
	}

	// The verbs a capture site runs answer; the server's are not there.
	if o, err := exec.Command(agentBin, "serve", "--help").CombinedOutput(); err == nil || !strings.Contains(string(o), "usage: plumb COMMAND") {
		t.Errorf("the agent build runs serve: %v\n%s", err, o)
	}

	// plumb dns writes the bytes the full binary writes.
	capture := "../../testdata/pcaps/dnscap__dns.pcap"
	dir := t.TempDir()
	for _, bin := range []string{agentBin, fullBin} {
		if o, err := exec.Command(bin, "dns", "--instance", "x", "-o", filepath.Join(dir, filepath.Base(filepath.Dir(bin))+".arrow"), capture).CombinedOutput(); err != nil {
			t.Fatalf("%s dns: %v\n%s", bin, err, o)
		}
	}
	a, _ := os.ReadFile(filepath.Join(dir, filepath.Base(filepath.Dir(agentBin))+".arrow"))
	f, _ := os.ReadFile(filepath.Join(dir, filepath.Base(filepath.Dir(fullBin))+".arrow"))
	if len(a) == 0 || !bytes.Equal(a, f) {
		t.Errorf("plumb dns: the agent build wrote %d bytes, the full binary %d, not the same", len(a), len(f))
	}
	if o, err := exec.Command(agentBin, "dns", "-o", filepath.Join(dir, "x.parquet"), capture).CombinedOutput(); err == nil || !strings.Contains(string(o), "full plumb binary for Parquet") {
		t.Errorf("agent build's dns -o x.parquet: %v, %s; want it refused saying where Parquet is", err, o)
	}

	// agent --follow and import ship to a real server; an idle follower
	// holds at most 40 MB.
	addr := servePlumb(t, t.TempDir())
	c := dialPlumb(t, addr)
	src := filepath.Join(dir, "site.pcap")
	pkts := makeCapture(t, src, 3000, 5)
	follow := exec.Command(agentBin, "agent", "--server", addr, "--site", "follow", "--new-instance", "--spool", filepath.Join(dir, "spool-f"),
		"--settle", "200ms", "--follow", src)
	var flog procLog
	follow.Stdout, follow.Stderr = &flog, &flog
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follow.Process.Kill(); follow.Wait() })
	testenv.Eventually(t, time.Minute, "the agent build's follower to ship the file", func() (string, bool) {
		n, _ := fetchCount(t, c, "pcap.sz", "follow")
		return fmt.Sprintf("%d of %d packets; log:\n%s", n, len(pkts), flog.String()), n >= len(pkts)
	})
	got, _ := fetchInstance(t, c, "pcap.sz", "follow")
	samePackets(t, "agent build --follow", got, pkts)
	time.Sleep(2 * time.Second) // idle: nothing more to cut or ship
	idle := vmRSS(t, follow.Process.Pid)

	busy := map[string]int64{}
	big := filepath.Join(dir, "big.pcap")
	makeCapture(t, big, 200_000, 6)
	for _, bin := range []string{agentBin, fullBin} {
		site := "import-" + filepath.Base(filepath.Dir(bin))
		cmd := exec.Command(bin, "import", "--server", addr, "--site", site, "--spool", filepath.Join(dir, "spool-"+site), big)
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s import: %v\n%s", bin, err, o)
		}
		busy[bin] = cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
		if n, _ := fetchCount(t, c, "pcap.sz", site); n != 200_000 {
			t.Errorf("%s import shipped %d packets, want 200000", bin, n)
		}
	}
	t.Logf("RSS: agent build idle following a file %.1f MB; importing %s: agent build peak %.1f MB, full binary peak %.1f MB",
		float64(idle)/1e6, big, float64(busy[agentBin])/1e6, float64(busy[fullBin])/1e6)
	if idle > 40e6 {
		t.Errorf("the agent build following a file idles at %.1f MB RSS, want ≤ 40 MB", float64(idle)/1e6)
	}
}

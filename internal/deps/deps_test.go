package deps_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/internal/testenv"
)

const module = "github.com/plumb-dev/plumb/"

// The server's own packages, and what only it needs.
var serverSide = []string{"server", "engine", "jobs", "state", "metakv", "web", "laketable", "fsck", "retention", "admission"}

// rules: packages matching a pattern (path.Match on the path inside the
// module, "..." for a subtree) must not link anything named in never,
// directly or through another package. Names without a dot are this
// module's packages (and their subtrees); others are import path
// prefixes.
var rules = []struct {
	pkgs  []string
	never []string
	why   string
}{
	{[]string{"client", "examples/...", "flight"},
		append([]string{"agent", "worker", "stage", "pcap", "blob", "sandbox", "auth", "go.etcd.io/bbolt", "github.com/minio/", "github.com/prometheus/", "github.com/gopacket/"}, serverSide...),
		"a Go consumer links Flight and grpc only: the protocol sits below client and server, defined once"},
	{[]string{"worker"}, serverSide,
		"a worker leases runs over Flight; it runs them with stage/program as the server does, without the scheduler or the metadata"},
	{[]string{"agent", "pcap/...", "dns/...", "synth", "rssac", "codecs", "block"}, append([]string{"worker", "sandbox", "blob", "github.com/apache/iceberg-go", "github.com/jackc/"}, serverSide...),
		"a capture site runs the agent without the server's packages (the agent build, docs/agent.md)"},
	{[]string{"pcap/...", "dns/...", "ipcguard", "codecs", "block", "windowing", "pipeline", "admission"}, append([]string{"flight", "client", "stage", "blob", "google.golang.org/grpc"}, serverSide...),
		"parsers and pure rules do not speak the protocol: what reads outside bytes can be fuzzed and reused alone"},
	{[]string{"kafkapub"}, append([]string{"stage", "blob", "flight", "client", "worker", "sandbox", "pcap", "dns"}, serverSide...),
		"an output knows its broker and the rows it is given, not where the rows came from: built-ins and tools use it alike"},
	{[]string{"stage", "stage/..."}, append([]string{"worker", "client"}, serverSide...),
		"the stage contract, the program runner and the built-ins run on the server and on workers alike"},
	{[]string{"state", "metakv", "blob"}, []string{"server", "engine", "web", "stage", "worker", "client"},
		"the metadata and the stores know nothing of who uses them"},
	{[]string{"engine"}, []string{"server", "jobs", "web", "client", "worker"},
		"the scheduler is given a merged graph; it does not call back into the control plane or the server"},
	{[]string{"jobs"}, []string{"server", "web", "client", "worker"},
		"the control plane of jobs is composed by the server and given its checks of rights; it does not call back into it"},
	{[]string{"web"}, []string{"server", "client"},
		"the dashboard is given the engine and the metadata by the server"},
	{[]string{"fsck", "retention", "laketable"}, []string{"server", "engine", "web", "stage", "worker", "client"},
		"the server's sweeps are given the metadata and the stores; they never call up into the server or the scheduler"},
	{[]string{"rowfilter", "sandbox", "internal/..."}, append([]string{"worker", "stage", "client"}, serverSide...),
		"small tools below everything: what uses them may be anything, so they use none of it"},
}

// TestImportRules checks every rule on what `go list -deps` says each
// package links.
func TestImportRules(t *testing.T) {
	out, err := exec.Command(testenv.Tool(t, "go"), "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		deps[strings.TrimPrefix(f[0], module)] = f[1:]
	}
	if len(deps) < 40 {
		t.Fatalf("go list named %d packages", len(deps))
	}
	for _, r := range rules {
		matched := 0
		for pkg, ds := range deps {
			if !matches(r.pkgs, pkg) {
				continue
			}
			matched++
			for _, d := range ds {
				if bad := forbidden(r.never, d); bad != "" {
					t.Errorf("%s links %s (never %s): %s", pkg, d, bad, r.why)
				}
			}
		}
		if matched == 0 {
			t.Errorf("no package matches %v: a rule about packages that no longer exist keeps nothing", r.pkgs)
		}
	}
}

// TestServerImportedOnlyByTheBinary: the server composes the process;
// nothing but cmd/plumb builds on it.
func TestServerImportedOnlyByTheBinary(t *testing.T) {
	out, err := exec.Command(testenv.Tool(t, "go"), "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if slices.Contains(f[1:], module+"server") && f[0] != module+"cmd/plumb" {
			t.Errorf("%s imports the server; only cmd/plumb composes it", f[0])
		}
	}
}

func matches(patterns []string, pkg string) bool {
	for _, p := range patterns {
		if sub, ok := strings.CutSuffix(p, "/..."); ok && (pkg == sub || strings.HasPrefix(pkg, sub+"/")) {
			return true
		}
		if ok, _ := path.Match(p, pkg); ok {
			return true
		}
	}
	return false
}

// forbidden returns the entry of never that dep falls under, or "".
func forbidden(never []string, dep string) string {
	for _, n := range never {
		if !strings.Contains(n, ".") {
			if inside, ok := strings.CutPrefix(dep, module); ok && (inside == n || strings.HasPrefix(inside, n+"/")) {
				return n
			}
			continue
		}
		if strings.HasPrefix(dep, n) {
			return n
		}
	}
	return ""
}

package pipeline

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func job(t *testing.T, src string) *Job {
	t.Helper()
	j, err := ParseJobBytes("test", []byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return j
}

// userJob is the thesis's shape: decode, a DNS-ish stage, then the user's
// own statistics.
func userJob(t *testing.T, user string) *Job {
	return job(t, fmt.Sprintf(`
job: %[1]s-stats
owner: %[1]s
stages:
  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap]}
  - {name: dns, inputs: [pcap], program: [./dns, --all], outputs: [dns.arrow]}
  - {name: stats, inputs: [dns.arrow], program: ./stats-%[1]s, outputs: [stats.%[1]s]}
`, user))
}

func TestMergeSharesIdenticalStages(t *testing.T) {
	for _, users := range []int{3, 5} {
		var jobs []*Job
		for i := range users {
			jobs = append(jobs, userJob(t, fmt.Sprintf("user%d", i)))
		}
		g, warns, err := Merge(jobs, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(warns) != 0 {
			t.Errorf("warnings: %v", warns)
		}
		if want := 2 + users; len(g.Stages) != want {
			t.Fatalf("%d users: %d stages, want %d", users, len(g.Stages), want)
		}
		for _, name := range []string{"user0-stats/decode", "user0-stats/dns"} {
			n := g.Node(name)
			if n == nil || len(n.Owners) != users || !n.Merged {
				t.Errorf("%d users: stage %s = %+v, want %d owners, merged", users, name, n, users)
			}
		}
		if n := g.Node("user1-stats/stats"); n == nil || n.Merged || len(n.Owners) != 1 {
			t.Errorf("own stage = %+v", n)
		}
		// Without merging, every user runs every stage.
		g, _, err = Merge(jobs, Options{NoDedup: true})
		if err != nil {
			t.Fatal(err)
		}
		if want := 3 * users; len(g.Stages) != want {
			t.Errorf("no-dedup: %d stages, want %d", len(g.Stages), want)
		}
		if n := g.Node("user1-stats/dns"); n == nil || n.Inputs[0] != "user1-stats.pcap" || n.Outputs[0] != "user1-stats.dns.arrow" {
			t.Errorf("no-dedup stage = %+v", n)
		}
	}
}

func TestMergeRefusesConflictsAndCycles(t *testing.T) {
	a := job(t, `
job: a
stages:
  - {name: to-xz, inputs: [pcap.sz], program: "builtin:transcode?to=xz", outputs: [pcap.xz]}
`)
	producer := job(t, `
job: b
stages:
  - {name: mine, inputs: [pcap], program: "builtin:encode?codec=xz", outputs: [pcap.xz]}
`)
	_, _, err := Merge([]*Job{a, producer}, Options{})
	for _, want := range []string{`job b:4:1: stage "mine"`, "queue pcap.xz is already produced by stage a/to-xz"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("conflicting producer: error %v, want %q", err, want)
		}
	}
	cyc := job(t, `
job: c
stages:
  - {name: one, inputs: [pcap.sz, y], program: ./one, outputs: [x]}
  - {name: two, inputs: [x], program: ./two, outputs: [y]}
`)
	_, _, err = Merge([]*Job{a, cyc}, Options{})
	if err == nil || !strings.Contains(err.Error(), "cycle: stage c/") || !strings.Contains(err.Error(), "→ x →") {
		t.Errorf("cycle: error %v", err)
	}
	win := job(t, `
job: d
stages:
  - {name: daily, abstraction: window, window: {size: 24h}, inputs: [pcap.sz], program: "builtin:transcode?to=xz", outputs: [pcap.xz]}
`)
	_, _, err = Merge([]*Job{a, win}, Options{})
	if err == nil || !strings.Contains(err.Error(), "different abstraction (window, not block)") || !strings.Contains(err.Error(), "rename its outputs") {
		t.Errorf("abstraction clash: error %v", err)
	}
	missing := job(t, `
job: e
stages:
  - {name: s, inputs: [pcap.typo], program: ./s, outputs: [z]}
`)
	_, _, err = Merge([]*Job{a, missing}, Options{Exists: func(q string) bool { return q == "pcap.sz" }})
	if err == nil || !strings.Contains(err.Error(), "input queue pcap.typo holds no blocks and no stage produces it") {
		t.Errorf("missing input: error %v", err)
	}
}

func TestMergeWarnsLaterSubmitterOfOtherProgram(t *testing.T) {
	a := job(t, "job: a\nstages:\n  - {name: s, inputs: [pcap.sz], program: \"builtin:transcode?to=xz\", outputs: [pcap.xz]}\n")
	b := job(t, "job: b\nstages:\n  - {name: t, inputs: [pcap.sz], program: [xz, -9], outputs: [pcap.xz]}\n")
	g, warns, err := Merge([]*Job{a, b}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Stages) != 1 || g.Stages[0].Program.String() != "builtin:transcode?to=xz" {
		t.Errorf("graph = %s", g.YAML())
	}
	if len(warns) != 1 || warns[0].Job != "b" || !strings.Contains(warns[0].What, `your program "xz -9" will not run`) {
		t.Errorf("warnings = %+v", warns)
	}
	// Sinks with different programs are different consumers.
	s1 := job(t, "job: s1\nstages:\n  - {name: s, inputs: [pcap.xz], program: ./one}\n")
	s2 := job(t, "job: s2\nstages:\n  - {name: s, inputs: [pcap.xz], program: ./two}\n")
	if g, _, _ := Merge([]*Job{a, s1, s2}, Options{}); len(g.Stages) != 3 {
		t.Errorf("sinks merged: %s", g.YAML())
	}
}

// TestGraphGolden renders two users' jobs that share their first stage.
// Run with -update to rewrite the golden files.
func TestGraphGolden(t *testing.T) {
	jobs := []*Job{mustJob(t, "testdata/jobs/archive.yaml"), mustJob(t, "testdata/jobs/chain.yaml"), job(t, `
job: bob-archive
owner: bob
stages:
  - {name: xz, inputs: [pcap.sz], program: "builtin:transcode?to=xz", outputs: [pcap.xz], retention: 30d}
`)}
	g, _, err := Merge(jobs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for ext, got := range map[string][]byte{".yaml": g.YAML(), ".dot": g.DOT(nil)} {
		path := "testdata/merge/graph.golden" + ext
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs; got:\n%s", path, got)
		}
	}
}

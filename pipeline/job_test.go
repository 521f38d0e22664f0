package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/block"
)

// TestBadJobs runs every testdata/jobs/*.bad.yaml: each must be refused
// with every problem its "# want:" lines name, all in one error.
func TestBadJobs(t *testing.T) {
	files, _ := filepath.Glob("testdata/jobs/*.bad.yaml")
	if len(files) == 0 {
		t.Fatal("no bad job files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseJobBytes(filepath.Base(f), src)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalidJob) {
				t.Errorf("error %v does not match ErrInvalidJob", err)
			}
			var wants []string
			for _, line := range strings.Split(string(src), "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					wants = append(wants, w)
				}
			}
			if len(wants) == 0 {
				t.Fatal("no # want: lines")
			}
			for _, w := range wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q; got:\n%v", w, err)
				}
			}
			if n := len(err.(Problems)); n < len(wants) {
				t.Errorf("%d problems, want at least %d", n, len(wants))
			}
		})
	}
}

func TestGoodJobs(t *testing.T) {
	j := mustJob(t, "testdata/jobs/chain.yaml")
	if j.Name != "dnsanon" || j.Owner != "carol" || j.From != FromEarliest || len(j.Stages) != 3 {
		t.Fatalf("job = %+v", j)
	}
	anon := j.Stages[0]
	if len(anon.Program.Steps) != 2 || anon.Program.Steps[0].Builtin != "decode" || anon.Program.Steps[1].Argv[0] != "./dnsanon" {
		t.Errorf("chain program = %+v", anon.Program)
	}
	if got := anon.Program.String(); got != `builtin:decode | ./dnsanon -o -` {
		t.Errorf("program text = %q", got)
	}
	if anon.Timeout.String() != "10m0s" || anon.Abstraction != Block {
		t.Errorf("timeout %v abstraction %q", anon.Timeout, anon.Abstraction)
	}
	if st := j.Stages[1]; len(st.Outputs) != 0 || len(st.Program.Steps[0].Argv) != 2 {
		t.Errorf("stats stage = %+v", st)
	}
	if w := j.Stages[2].Window; w == nil || w.Size != "24h" || w.MaxWait.String() != "2h0m0s" || w.MaxMissing != "1%" {
		t.Errorf("window = %+v", w)
	}
	a := mustJob(t, "testdata/jobs/archive.yaml")
	if a.Stages[0].Retention != "30d" || a.Stages[0].Program.Steps[0].Args.Get("to") != "xz" {
		t.Errorf("archive = %+v", a.Stages[0])
	}
	// A rendered job reads back the same.
	again, err := ParseJobBytes("again", j.Marshal())
	if err != nil {
		t.Fatalf("re-read rendered job: %v\n%s", err, j.Marshal())
	}
	if again.Stages[0].Program.String() != anon.Program.String() || again.Stages[2].Window.MaxWait != j.Stages[2].Window.MaxWait {
		t.Errorf("round trip changed the job:\n%s", again.Marshal())
	}
}

func mustJob(t *testing.T, path string) *Job {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	j, err := ParseJob(filepath.Base(path), f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return j
}

func FuzzParseJob(f *testing.F) {
	files, _ := filepath.Glob("testdata/jobs/*.yaml")
	for _, p := range files {
		src, _ := os.ReadFile(p)
		f.Add(src)
	}
	for _, trick := range []string{"../pcap.sz", "/etc/passwd", "dns.%2e%2e", "pcap.sz/../x", "..", "a\\b"} {
		f.Add([]byte(fmt.Sprintf("job: %q\nstages:\n  - {name: %q, inputs: [%q], program: [cat], outputs: [%q]}\n", trick, trick, trick, trick)))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		j, err := ParseJobBytes("fuzz", src)
		if err != nil {
			if !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("error is not a job problem: %v", err)
			}
			return
		}
		// Nothing an accepted job names can address a path: queue names
		// are valid block-name parts, job and stage names plain words.
		for _, st := range j.Stages {
			for _, q := range append(slices.Clone(st.Inputs), st.Outputs...) {
				if err := block.ValidateQueue(q); err != nil {
					t.Fatalf("accepted queue %q: %v", q, err)
				}
			}
			for _, n := range []string{j.Name, st.Name} {
				if n == "" || strings.ContainsAny(n, "/\\\x00%") || strings.Contains(n, "..") {
					t.Fatalf("accepted name %q", n)
				}
			}
		}
		// An accepted job renders to YAML that is accepted again.
		if _, err := ParseJobBytes("again", j.Marshal()); err != nil {
			t.Fatalf("rendered job refused: %v\n%s", err, j.Marshal())
		}
	})
}

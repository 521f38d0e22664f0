package windowing

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the expected output of the timelines")

// base is the day timelines run on; times are written HH:MM from it (and
// may pass 24:00).
var base = time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)

func at(t *testing.T, s string) time.Time {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("time %q: want HH:MM", s)
	}
	return base.Add(time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute)
}

func clock(tm time.Time) string {
	d := tm.Sub(base)
	return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60)
}

// TestTimelines runs each testdata/*.txt: commands, each followed by the
// output it must give, then a blank line. Run with -update to rewrite the
// outputs (and read the diff).
//
//	spec size=1h|blocks=N [cutoff=start|next|both] [max_wait=30m] [max_missing=N|P%] [idle=2h]
//	     [ordering=strict] [late=refire] [all] [instances=a,b] [from=HH:MM] [to=HH:MM]
//	arrive WALL SITE SEQ EVENT     a block arrives at wall time WALL; prints its kind
//	due WALL                       prints the windows that fire
//	open WALL                      prints the windows waiting
//	force WALL SITE START          fires the site's window holding START at once
func TestTimelines(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no timelines")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runTimeline(t, f) })
	}
}

func runTimeline(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		tr       *Tracker
		rewrite  strings.Builder
		sc       = bufio.NewScanner(strings.NewReader(string(raw)))
		lines    []string
		failures int
	)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); i++ {
		cmd := lines[i]
		if cmd == "" || strings.HasPrefix(cmd, "#") {
			rewrite.WriteString(cmd + "\n")
			continue
		}
		var want []string
		j := i + 1
		for ; j < len(lines) && lines[j] != ""; j++ {
			want = append(want, lines[j])
		}
		got := run(t, &tr, cmd)
		rewrite.WriteString(cmd + "\n")
		for _, g := range got {
			rewrite.WriteString(g + "\n")
		}
		rewrite.WriteString("\n")
		if strings.Join(got, "\n") != strings.Join(want, "\n") && !*update {
			failures++
			t.Errorf("%s:%d: %s\ngot:\n  %s\nwant:\n  %s", path, i+1, cmd, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		i = j
	}
	if *update {
		os.WriteFile(path, []byte(strings.TrimRight(rewrite.String(), "\n")+"\n"), 0o644)
	}
}

func run(t *testing.T, tr **Tracker, cmd string) []string {
	f := strings.Fields(cmd)
	switch f[0] {
	case "spec":
		var s Spec
		s.MaxMissing, s.MaxMissingPct = -1, -1
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "size":
				d, _ := time.ParseDuration(v)
				s.Size = d
			case "blocks":
				n, _ := strconv.ParseUint(v, 10, 64)
				s.SizeBlocks = n
			case "cutoff":
				s.Cutoff = Cutoff(v)
			case "max_wait":
				s.MaxWait, _ = time.ParseDuration(v)
			case "max_missing":
				s.MaxMissing, s.MaxMissingPct, _ = ParseMissing(v)
			case "idle":
				s.IdleTimeout, _ = time.ParseDuration(v)
			case "ordering":
				s.Ordering = Ordering(v)
			case "late":
				s.Late = Late(v)
			case "all":
				s.AllInstances = true
			case "instances":
				s.Instances = strings.Split(v, ",")
			case "from":
				s.From = at(t, v)
			case "to":
				s.To = at(t, v)
			default:
				t.Fatalf("spec: unknown %q", k)
			}
		}
		var err error
		if *tr, err = New(s); err != nil {
			return []string{"error: " + err.Error()}
		}
		return []string{"ok"}
	case "arrive":
		seq, _ := strconv.ParseUint(f[3], 10, 64)
		k := (*tr).Add(Block{Instance: f[2], Seq: seq, Time: at(t, f[4]), Arrived: at(t, f[1])})
		return []string{string(k)}
	case "due":
		var out []string
		for _, fr := range (*tr).Due(at(t, f[1])) {
			out = append(out, firing(fr))
		}
		if out == nil {
			out = []string{"none"}
		}
		return out
	case "force":
		fr, err := (*tr).Force((*tr).WindowAt(f[2], at(t, f[3]), 0), at(t, f[1]))
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		return []string{firing(fr)}
	case "open":
		var out []string
		for _, st := range (*tr).Open(at(t, f[1])) {
			line := fmt.Sprintf("%s present=%s missing=%s bracketed=%t", st.ID, seqs(st.Present), seqs(st.Missing), st.Bracketed)
			if !st.WaitUntil.IsZero() {
				line += " wait_until=" + clock(st.WaitUntil)
			}
			if st.Blocked != nil {
				line += " blocked_by=" + st.Blocked.String()
			}
			out = append(out, line)
		}
		if out == nil {
			out = []string{"none"}
		}
		return out
	}
	t.Fatalf("unknown command %q", cmd)
	return nil
}

func firing(f Firing) string {
	var blocks []SeqRef
	for _, b := range f.Blocks {
		blocks = append(blocks, SeqRef{b.Instance, b.Seq})
	}
	span := fmt.Sprintf("%s-%s", clock(f.From), clock(f.To))
	if f.From.IsZero() {
		span = fmt.Sprintf("seq %d-%d", f.FirstSeq, f.LastSeq)
	}
	s := fmt.Sprintf("fire %s %s rev=%d %s blocks=%s", f.ID, span, f.Revision, f.Reason, seqs(blocks))
	if len(f.Missing) > 0 {
		s += " missing=" + seqs(f.Missing)
	}
	if len(f.Late) > 0 {
		s += " late=" + seqs(f.Late)
	}
	return s
}

func seqs(rs []SeqRef) string {
	if len(rs) == 0 {
		return "-"
	}
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s:%d", r.Instance, r.Seq))
	}
	return strings.Join(parts, ",")
}

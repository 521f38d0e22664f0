package engine_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/internal/hostile"
	"golang.org/x/sys/unix"
)

// dirSize is the bytes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// TestBombsAreSetAside: issue 18's decompression bombs through
// builtin:decode (a 1 GiB zstd bomb, a gzip one, an xz block asking for a
// 4 GiB dictionary) end FAULTY at once with the limit named, using
// neither the disk nor the memory they ask for, while a good block of
// the same queue goes through.
func TestBombsAreSetAside(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2, MaxOutput: 32 << 20})
	xzBomb, err := hostile.XZBigDict([]byte(strings.Repeat("dns ", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	r.put("in.zst", 1, hostile.ZstdBomb(1<<30))
	r.put("in.gz", 1, hostile.GzipBomb(256<<20))
	r.put("in.xz", 1, xzBomb)
	r.put("in.zst", 2, hostile.ZstdBomb(1<<20))
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, c := range []string{"zst", "gz", "xz"} {
		r.mustAccept("job: " + c + "\nfrom: earliest\nstages:\n  - {name: d, inputs: [in." + c + "], program: builtin:decode, outputs: [out." + c + "], retention: forever}\n")
	}
	r.wait("the bombs set aside", func() bool {
		n := 0
		for _, c := range []string{"zst", "gz", "xz"} {
			fb, _ := r.db.Faulty("in." + c)
			n += len(fb)
		}
		return n == 3
	})
	r.wait("the good block decoded", func() bool { return r.count("out.zst") == 1 })
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	for _, c := range []string{"zst", "gz", "xz"} {
		fb, _ := r.db.Faulty("in." + c)
		if len(fb) != 1 || fb[0].Attempts != 1 {
			t.Fatalf("%s: %+v", c, fb)
		}
		t.Logf("%s: %s", c, fb[0].Error)
		want := "output over its limit"
		if c == "xz" {
			want = "4095 MiB LZMA2 dictionary"
		}
		if !strings.Contains(fb[0].Error, want) {
			t.Errorf("%s: the reason %q does not name the limit", c, fb[0].Error)
		}
	}
	if got := after.HeapSys; got > before.HeapSys+512<<20 {
		t.Errorf("heap grew from %d to %d MiB", before.HeapSys>>20, got>>20)
	}
	if n := dirSize(filepath.Join(r.dir, "blobs")); n > 64<<20 {
		t.Errorf("the store holds %d MiB after the bombs", n>>20)
	}
}

// TestNoChainAdviceForSharedStages: plumb stats advised chaining a stage
// three jobs share; a shared stage feeds each job, so it is never a
// candidate, while an unshared one still is.
func TestNoChainAdviceForSharedStages(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2, ChainAbove: 1e-12})
	r.put("raw", 1, []byte("bytes"))
	for i, job := range []string{"a", "b"} {
		r.mustAccept("job: " + job + "\nfrom: earliest\nstages:\n  - {name: up, inputs: [raw], program: [tr, a-z, A-Z], outputs: [raw.up]}\n" +
			"  - {name: mine, inputs: [raw.up], program: [cat], outputs: [raw." + string(rune('0'+i)) + "]}\n")
	}
	// A run is counted just after its outputs are committed: wait for the
	// counts, not only the outputs.
	r.wait("both jobs' runs counted", func() bool {
		stats := r.eng.Stats()
		for _, s := range stats {
			if s.Runs == 0 {
				return false
			}
		}
		return len(stats) == 3
	})
	for _, s := range r.eng.Stats() {
		shared := len(s.Owners) > 1
		if s.ChainCandidate == shared {
			t.Errorf("stage %s (owners %v): chain candidate %v", s.Stage, s.Owners, s.ChainCandidate)
		}
	}
}

// TestJobBeforeItsQueue: a pipeline could not be set up before the
// agents started (its input queue held no block). A job that declares
// the queue under queues: is accepted, and runs once blocks arrive.
func TestJobBeforeItsQueue(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1})
	if res := r.submit("job: early\nstages:\n  - {name: up, inputs: [site.pcap], program: [tr, a-z, A-Z], outputs: [site.up]}\n"); res.State != "rejected" ||
		!strings.Contains(res.Reason, "declare it under the job's `queues:`") {
		t.Errorf("an undeclared empty input: %+v", res)
	}
	r.mustAccept("job: early\nqueues: [site.pcap]\nstages:\n  - {name: up, inputs: [site.pcap], program: [tr, a-z, A-Z], outputs: [site.up], retention: forever}\n")
	r.put("site.pcap", 1, []byte("first"))
	r.wait("the first block's output", func() bool { return r.count("site.up") == 1 })
	if got := string(r.read("site.up", 1)); got != "FIRST" {
		t.Errorf("output %q", got)
	}
}

// TestAllProblemsAtOnce: a job's second round of problems used to show
// only on the next submit. An unregistered program and an input no one
// makes are both reported by the first.
func TestAllProblemsAtOnce(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1})
	res := r.untrusted("job: two\nstages:\n  - {name: s, inputs: [nowhere], program: [/bin/sh], outputs: [x]}\n")
	if res.State != "rejected" || !strings.Contains(res.Reason, `program "/bin/sh" is not registered`) || !strings.Contains(res.Reason, "input queue nowhere holds no blocks") {
		t.Errorf("one submit, both problems: %+v", res)
	}
}

// TestStagesRunBelowServing: the deadline replay's CPU-heavy stage made
// the server's goroutines wait 5–30 ms to run. Stage programs now run at
// the nice value the engine is given (plumb serve's --stage-nice, 10 by
// default), and at the server's own priority when given 0.
func TestStagesRunBelowServing(t *testing.T) {
	// Never above the server's own priority: a test run under nice 5
	// sees its programs at 5 where the engine is given 0.
	own, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	own = 20 - own // the raw system call answers 20 - nice
	for _, c := range []struct {
		nice int
		want string
	}{{engine.StageNice, strconv.Itoa(max(own, engine.StageNice))}, {0, strconv.Itoa(own)}, {15, strconv.Itoa(max(own, 15))}} {
		r := newRig(t, engine.Config{Slots: 1, Nice: c.nice})
		r.put("raw", 1, []byte("x"))
		r.mustAccept("job: n\nfrom: earliest\nstages:\n  - {name: nice, inputs: [raw], program: [nice], outputs: [raw.nice]}\n")
		r.wait("the stage's output", func() bool { return r.count("raw.nice") == 1 })
		if got := strings.TrimSpace(string(r.read("raw.nice", 1))); got != c.want {
			t.Errorf("Config.Nice %d: the program ran at nice %s, want %s", c.nice, got, c.want)
		}
	}
}

// TestHalfOpenStreamsAreBounded is issue 37's attack: TCP streams that
// never finish a message, each holding 64,000 bytes in order and
// 256,000 more beyond a hole. Carried from block to block of a site, the
// old state grew with every block, was checked against its cap only
// after it was spent, and lived in the metadata (twelve small blocks
// grew the metadata file to 749 MB). Now what a site holds is bounded
// by the stage's budget while it grows, lives in a blob, and every
// block goes through, followed by a block of real DNS.
func TestHalfOpenStreamsAreBounded(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	const budget = 1 << 20
	attack := hostile.HalfOpenStreams(32, 64000, 256000) // 10 MB held, ten times the budget
	for seq := uint64(1); seq <= 12; seq++ {
		r.put("pcap", seq, attack)
	}
	good, err := os.ReadFile("../testdata/pcaps/dnscap__dns.pcap")
	if err != nil {
		t.Fatal(err)
	}
	r.put("pcap", 13, good)
	meta := filepath.Join(r.dir, "meta.db")
	before, _ := os.Stat(meta)
	r.mustAccept("job: dns\nfrom: earliest\nstages:\n  - {name: d, inputs: [pcap], program: \"builtin:dns?budget=1MiB\", outputs: [dns.arrow], retention: forever}\n")
	r.wait("every block's records", func() bool { return r.count("dns.arrow") == 13 })
	want := 0
	link, cis, frames := captureFrames(t, "dnscap__dns.pcap")
	x := dnsrec.NewExtractor(link, nil, func(*dnsrec.Record) { want++ })
	for i := range frames {
		x.Packet(cis[i].Timestamp, frames[i])
	}
	if n := len(dnsRows(t, r.read("dns.arrow", 13))); n != want || want == 0 {
		t.Errorf("the real block after the attack has %d rows; alone it has %d", n, want)
	}
	after, _ := os.Stat(meta)
	if grew := after.Size() - before.Size(); grew >= 1<<20 {
		t.Errorf("the metadata file grew by %d bytes over twelve state-heavy blocks; want < 1 MiB", grew)
	}
	st := r.eng.Stats()[0]
	c, ok, err := r.db.GetCarry(st.ID, "lax")
	if err != nil || !ok {
		t.Fatalf("carry: %v %v", ok, err)
	}
	if len(c.State) != 0 || c.StateKey == "" {
		t.Errorf("the carried state is in the metadata (%d bytes), not a blob (%q)", len(c.State), c.StateKey)
	}
	info, err := r.store.Stat(t.Context(), c.StateKey)
	if err != nil {
		t.Fatal(err)
	}
	// TCP streams and fragments are each bounded by the budget.
	if info.Size > 2*budget+64<<10 {
		t.Errorf("the carried state is %d bytes; the budget is %d", info.Size, budget)
	}
	if fb, _ := r.db.Faulty("pcap"); len(fb) != 0 {
		t.Errorf("faulty: %+v", fb)
	}
	// What the budget cost shows in the stage's stats, by reason.
	if st.Dropped["tcp_evicted"] == 0 && st.Dropped["edge_budget"] == 0 {
		t.Errorf("the stage's stats count nothing let go for the budget: %v", st.Dropped)
	}
	t.Logf("let go of for the budget: %v", st.Dropped)
	t.Logf("12 blocks of %d bytes, each holding 10 MB past holes: metadata grew %d bytes, carried state %d bytes, %d of %d runs in parallel",
		len(attack), after.Size()-before.Size(), info.Size, st.Parted, st.Runs)
}

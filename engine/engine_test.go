package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/internal/testprog"
	"github.com/plumb-dev/plumb/jobs"
	"github.com/plumb-dev/plumb/retention"
	"github.com/plumb-dev/plumb/sandbox"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
	"github.com/plumb-dev/plumb/state"
)

func TestMain(m *testing.M) {
	if os.Getenv(testprog.CounterEnv) == "1" {
		testprog.CounterMain()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// rig is a server's data path without Flight: metadata, a blob
// directory and an engine running the jobs submitted to it.
type rig struct {
	t *testing.T
	// register adds a test's own built-ins to the real ones.
	register func(*stage.Registry)
	db       *state.DB
	store    blob.Store
	eng      *engine.Engine
	ctl      *jobs.Control
	jobsCfg  jobs.Config // the admission of the next start
	dir      string
	stop     func()
}

// testSandbox confines the tests' executables as a server does; it fails
// (never skips) where bubblewrap is missing: CI installs it.
func testSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sharedSandbox()
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

var sharedSandbox = sync.OnceValues(func() (*sandbox.Sandbox, error) {
	// Helper programs re-run the test binary, which the runs must see.
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return sandbox.New(context.Background(), sandbox.Config{Limits: sandbox.DefaultLimits(), Shared: []string{self}})
})

func newRig(t *testing.T, cfg engine.Config) *rig {
	t.Helper()
	return newRigWith(t, cfg, nil)
}

// newRigWith is newRig with a test's own built-ins beside the real ones.
func newRigWith(t *testing.T, cfg engine.Config, register func(*stage.Registry)) *rig {
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
	r := &rig{t: t, db: db, store: store, dir: dir, register: register}
	r.start(cfg)
	t.Cleanup(func() {
		r.stop()
		if err := db.Check(); err != nil {
			t.Errorf("metadata integrity: %v", err)
		}
		db.Close()
	})
	return r
}

func (r *rig) start(cfg engine.Config) {
	r.t.Helper()
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	if r.register != nil {
		r.register(reg)
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 10 * time.Millisecond
	}
	cfg.Scratch = filepath.Join(r.dir, "tmp")
	cfg.Programs = filepath.Join(r.dir, "programs")
	cfg.Tick = 50 * time.Millisecond
	if cfg.Sandbox == nil && !cfg.Unconfined {
		cfg.Sandbox = testSandbox(r.t)
	}
	eng, err := engine.New(r.db, r.store, reg, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	ctl, err := jobs.New(r.db, eng, r.jobsCfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.ctl = ctl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { eng.Run(ctx); close(done) }()
	r.eng = eng
	r.stop = func() { cancel(); <-done }
}

// put stores a source block as an agent would.
func (r *rig) put(queue string, seq uint64, data []byte) {
	r.t.Helper()
	r.putName(block.Name{Time: time.Date(2025, 5, 5, 15, 0, int(seq), 0, time.UTC), Seq: seq, Instance: "lax", Queue: queue}, data)
}

func (r *rig) putName(n block.Name, data []byte) {
	r.t.Helper()
	seq := n.Seq
	sum := blob.Sum(sha256.Sum256(data))
	key := blob.BlockKey(n, sum)
	if err := r.store.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), sum); err != nil {
		r.t.Fatal(err)
	}
	if _, _, err := r.db.CommitBlock(state.Block{Name: n.String(), Queue: n.Queue, Instance: n.Instance, Seq: seq, Time: n.Time,
		Size: int64(len(data)), SHA256: sum.String(), Key: key}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) submit(src string) jobs.SubmitResult {
	r.t.Helper()
	res, err := r.ctl.Submit("test.yaml", []byte(src), "")
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

func (r *rig) mustAccept(src string) jobs.SubmitResult {
	r.t.Helper()
	res := r.submit(src)
	if res.State != "accepted" {
		r.t.Fatalf("job rejected: %s", res.Reason)
	}
	return res
}

// wait polls until cond holds, failing after a generous deadline.
func (r *rig) wait(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s; stats: %+v", what, r.eng.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *rig) count(queue string) int64 {
	q, err := r.db.Queue(queue)
	if err != nil {
		return 0
	}
	return q.Blocks
}

// readName returns a stored block's bytes by name.
func (r *rig) readName(t *testing.T, name string) []byte {
	t.Helper()
	n, err := block.Parse(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.db.Lookup(n.ID())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	rc, err := r.store.Open(context.Background(), b.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, _ := io.ReadAll(rc)
	return data
}

// read returns a stored block's bytes.
func (r *rig) read(queue string, seq uint64) []byte {
	r.t.Helper()
	b, err := r.db.Lookup(block.ID{Queue: queue, Instance: "lax", Seq: seq})
	if err != nil {
		r.t.Fatal(err)
	}
	rc, err := r.store.Open(context.Background(), b.Key)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		r.t.Fatal(err)
	}
	return data
}

func snappy(t *testing.T, data []byte) []byte {
	var b bytes.Buffer
	w, _ := codecs.Snappy.NewWriter(&b)
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func decode(t *testing.T, data []byte) []byte {
	t.Helper()
	head := data[:min(len(data), codecs.SniffLen)]
	rc, err := codecs.Sniff(head).NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func payload(seq int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("block %d of DNS-ish data; ", seq)), 2000+seq)
}

// TestSharedStageRunsOnce: two users' archive jobs share their stage;
// each block is transcoded once, stored once, and decodes to the input.
func TestSharedStageRunsOnce(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 4})
	r.put("pcap.sz", 1, snappy(t, payload(1))) // the queue exists before jobs name it
	for _, user := range []string{"alice", "bob"} {
		res := r.mustAccept(fmt.Sprintf(`
job: %s-archive
owner: %s
from: earliest
stages:
  - {name: xz, inputs: [pcap.sz], program: "builtin:transcode?to=xz", outputs: [pcap.xz], retention: forever}
`, user, user))
		if len(res.Stages) != 1 || res.Stages[0] != "alice-archive/xz" {
			t.Errorf("%s owns %v, want the shared alice-archive/xz", user, res.Stages)
		}
	}
	for seq := 2; seq <= 8; seq++ {
		r.put("pcap.sz", uint64(seq), snappy(t, payload(seq)))
	}
	r.wait("8 xz blocks", func() bool { return r.count("pcap.xz") == 8 })
	for seq := 1; seq <= 8; seq++ {
		if got := decode(t, r.read("pcap.xz", uint64(seq))); !bytes.Equal(got, payload(seq)) {
			t.Fatalf("block %d: xz output decodes to %d bytes, want the %d input bytes", seq, len(got), len(payload(seq)))
		}
	}
	st := r.eng.Stats()
	if len(st) != 1 || st[0].Runs != 8 || len(st[0].Owners) != 2 || !strings.Contains(st[0].Detail, "xz") {
		t.Fatalf("stats = %+v; want one stage, 8 runs, 2 owners, the xz encoder named", st)
	}
	if st[0].BytesIn == 0 || st[0].BytesOut == 0 || st[0].Intensity <= 0 {
		t.Errorf("measurements missing: %+v", st[0])
	}
}

// TestCrashingProgramEndsFaulty: one block makes the program fail every
// time; it is set aside after 4 attempts with its stderr, and every other
// block flows on.
func TestCrashingProgramEndsFaulty(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	script := filepath.Join(t.TempDir(), "picky.sh")
	os.WriteFile(script, []byte(`#!/bin/sh
data=$(cat)
case "$data" in *poison*) echo "picky: found poison at byte 7" >&2; exit 3;; esac
printf '%s' "$data" | tr a-z A-Z
`), 0o755)
	r.put("raw", 1, []byte("warm-up"))
	r.mustAccept(fmt.Sprintf(`
job: upper
stages:
  - {name: up, inputs: [raw], program: [%s], outputs: [raw.upper]}
`, script))
	for seq := 2; seq <= 10; seq++ {
		data := fmt.Sprintf("block %d", seq)
		if seq == 6 {
			data = "a poison block"
		}
		r.put("raw", uint64(seq), []byte(data))
	}
	r.wait("8 outputs and a faulty block", func() bool {
		fb, _ := r.db.Faulty("raw")
		return r.count("raw.upper") == 8 && len(fb) == 1
	})
	fb, _ := r.db.Faulty("")
	if fb[0].Attempts != 4 || !strings.Contains(fb[0].Error, "exit status 3") || !strings.Contains(fb[0].Error, "picky: found poison at byte 7") {
		t.Errorf("faulty block = %+v; want 4 attempts, exit status and stderr", fb[0])
	}
	if got := string(r.read("raw.upper", 7)); got != "BLOCK 7" {
		t.Errorf("block 7 = %q", got)
	}
	// Fixed program, requeued block: it flows.
	os.WriteFile(script, []byte("#!/bin/sh\ntr a-z A-Z\n"), 0o755)
	if n, err := r.db.Retry("", ""); err != nil || n != 1 {
		t.Fatalf("retry = %d, %v", n, err)
	}
	r.wait("the retried block", func() bool { return r.count("raw.upper") == 9 })
	if got := string(r.read("raw.upper", 6)); got != "A POISON BLOCK" {
		t.Errorf("retried block = %q", got)
	}
}

func TestTimeoutCountsAsFailure(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1, MaxAttempts: 2})
	r.put("raw", 1, []byte("x"))
	r.mustAccept(`
job: slow
from: earliest
stages:
  - {name: nap, inputs: [raw], program: [sleep, "30"], outputs: [raw.slept], timeout: 200ms}
`)
	r.wait("the block to go faulty", func() bool { fb, _ := r.db.Faulty(""); return len(fb) == 1 })
	fb, _ := r.db.Faulty("")
	if !strings.Contains(fb[0].Error, "killed after its timeout") {
		t.Errorf("faulty = %+v", fb[0])
	}
}

// TestChainAndFIFOs runs a chain of a built-in and an executable as one
// stage, and an executable that joins two inputs into two outputs over
// named FIFOs.
func TestChainAndFIFOs(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 4})
	r.put("pcap.sz", 1, snappy(t, payload(1)))
	join := filepath.Join(t.TempDir(), "join.sh")
	os.WriteFile(join, []byte(`#!/bin/sh
# Called as join.sh --in pcap.rev=PATH --in pcap.up=PATH --out both=PATH --out sizes=PATH.
while [ $# -gt 1 ]; do
  case "${2%%=*}" in
    pcap.up) up=${2#*=};; pcap.rev) rev=${2#*=};; both) both=${2#*=};; sizes) sizes=${2#*=};;
  esac
  shift 2
done
cat "$rev" "$up" > "$both"
echo done > "$sizes"
`), 0o755)
	r.mustAccept(fmt.Sprintf(`
job: chains
from: earliest
stages:
  - {name: up, inputs: [pcap.sz], program: [builtin:decode, [tr, a-z, A-Z]], outputs: [pcap.up], retention: forever}
  - {name: rev, inputs: [pcap.sz], program: [builtin:decode, [rev]], outputs: [pcap.rev]}
  - {name: join, inputs: [pcap.up, pcap.rev], program: [%s], outputs: [both, sizes]}
`, join))
	r.wait("the joined block", func() bool { return r.count("both") == 1 && r.count("sizes") == 1 })
	if got, want := r.read("pcap.up", 1), bytes.ToUpper(payload(1)); !bytes.Equal(got, want) {
		t.Fatalf("chained output: %d bytes, want %d", len(got), len(want))
	}
	rev := payload(1)
	slices.Reverse(rev)
	want := append(rev, bytes.ToUpper(payload(1))...)
	if got := r.read("both", 1); !bytes.Equal(got, want) {
		t.Errorf("joined output has %d bytes, want the reversed and the upper-cased block (%d bytes)", len(got), len(want))
	}
	if got := string(r.read("sizes", 1)); got != "done\n" {
		t.Errorf("second output = %q", got)
	}
}

func TestShare(t *testing.T) {
	for _, c := range []struct {
		slots  int
		demand []int64
		want   []int
	}{
		{8, []int64{0, 0}, []int{0, 0}},
		{8, []int64{100, 0}, []int{8, 0}},
		{8, []int64{3, 0}, []int{3, 0}},
		{8, []int64{60, 20}, []int{6, 2}},
		{4, []int64{1000, 1}, []int{3, 1}},
		{2, []int64{5, 5, 5}, []int{1, 1, 1}},
		{10, []int64{10, 10, 10}, []int{4, 3, 3}},
	} {
		got := engine.Share(c.slots, c.demand)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Share(%d, %v) = %v, want %v", c.slots, c.demand, got, c.want)
		}
	}
}

func TestRetractKeepsSharedStageAndFromChoosesStart(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	for seq := 1; seq <= 3; seq++ {
		r.put("raw", uint64(seq), []byte(fmt.Sprintf("old %d", seq)))
	}
	share := "  - {name: up, inputs: [raw], program: [tr, a-z, A-Z], outputs: [raw.up], retention: forever}\n"
	r.mustAccept("job: alice\nstages:\n" + share)                // from latest: old blocks are not hers
	r.mustAccept("job: bob\nfrom: earliest\nstages:\n" + share + // merged: the stage keeps alice's start
		"  - {name: rev, inputs: [raw], program: [rev], outputs: [raw.rev], retention: forever}\n") // new: replays
	r.wait("bob's replay of the 3 old blocks", func() bool { return r.count("raw.rev") == 3 })
	if n := r.count("raw.up"); n != 0 {
		t.Errorf("the shared stage, started from latest, processed %d old blocks", n)
	}
	r.put("raw", 4, []byte("new 4"))
	r.wait("block 4 through both stages", func() bool { return r.count("raw.up") == 1 && r.count("raw.rev") == 4 })

	if err := r.ctl.Retract("alice"); err != nil {
		t.Fatal(err)
	}
	if len(r.eng.Graph().Stages) != 2 {
		t.Fatalf("retracting one owner removed a shared stage:\n%s", r.eng.Graph().YAML())
	}
	r.put("raw", 5, []byte("new 5"))
	r.wait("block 5 through the shared stage", func() bool { return r.count("raw.up") == 2 })

	if err := r.ctl.Retract("bob"); err != nil {
		t.Fatal(err)
	}
	if n := len(r.eng.Graph().Stages); n != 0 {
		t.Fatalf("%d stages left after every owner retracted", n)
	}
	if gs, _ := r.db.Groups("raw"); len(gs) != 0 {
		t.Errorf("stages that left still subscribe: %+v", gs)
	}
	jobs, _ := r.ctl.Jobs()
	for _, j := range jobs {
		if j.State != state.JobRetracted {
			t.Errorf("job %s is %s", j.Name, j.State)
		}
	}
}

func TestRejectedJobsSayWhy(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1})
	r.put("pcap.sz", 1, snappy(t, payload(1)))
	for _, c := range []struct{ src, want string }{
		{"job: a\nstages:\n  - {name: s, inputs: [pcap.sz], program: builtin:nope, outputs: [x]}\n", `built-in "nope" is not known (known: cpuwork, decode, dns, `},
		{"job: b\nstages:\n  - {name: s, inputs: [pcap.sz], program: [/no/such/prog], outputs: [x]}\n", `program "/no/such/prog" is not found`},
		{"job: c\nstages:\n  - {name: s, inputs: [pcap.typo], program: builtin:decode, outputs: [x]}\n", "input queue pcap.typo holds no blocks"},
		{"job: d\nstages:\n  - {name: s, inputs: [pcap.sz], program: \"builtin:encode?level=9\", outputs: [x]}\n", `unknown argument "level" (known: codec)`},
	} {
		res := r.submit(c.src)
		if res.State != "rejected" || !strings.Contains(res.Reason, c.want) {
			t.Errorf("%q: %+v; want rejected with %q", c.src, res, c.want)
		}
	}
	// A job replaced by a bad version keeps running as it was.
	r.mustAccept("job: keep\nstages:\n  - {name: s, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap]}\n")
	if res := r.submit("job: keep\nstages:\n  - {name: s, inputs: [pcap.sz], program: builtin:nope, outputs: [pcap]}\n"); res.State != "rejected" {
		t.Fatalf("bad new version: %+v", res)
	}
	if j, _ := r.db.GetJob("keep"); j.State != state.JobAccepted || len(r.eng.Graph().Stages) != 1 {
		t.Errorf("accepted job lost to a rejected new version: %+v", j)
	}
}

// TestConsumedBlocksAreDeleted: a derived queue without a retention keeps
// a block until every stage reading it is done; source queues and queues
// with a retention keep theirs.
func TestConsumedBlocksAreDeleted(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	r.put("pcap.sz", 1, snappy(t, payload(1)))
	r.mustAccept(`
job: two-readers
from: earliest
stages:
  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap]}
  - {name: a, inputs: [pcap], program: builtin:cpuwork, outputs: [pcap.a], retention: forever}
  - {name: b, inputs: [pcap], program: [cat], outputs: [pcap.b], retention: forever}
`)
	for seq := 2; seq <= 5; seq++ {
		r.put("pcap.sz", uint64(seq), snappy(t, payload(seq)))
	}
	r.wait("both readers", func() bool { return r.count("pcap.a") == 5 && r.count("pcap.b") == 5 })
	// The metadata goes first, then the bytes: both must go.
	var left []string
	r.wait("the intermediate blocks and their bytes to go", func() bool {
		left = left[:0]
		r.store.List(context.Background(), func(i blob.Info) error {
			if strings.HasPrefix(i.Key, "pcap/") {
				left = append(left, i.Key)
			}
			return nil
		})
		return r.count("pcap") == 0 && len(left) == 0
	})
	if r.count("pcap.sz") != 5 {
		t.Errorf("source queue holds %d blocks, want all 5 kept", r.count("pcap.sz"))
	}
	if got := decode(t, snappy(t, r.read("pcap.b", 3))); !bytes.Equal(got, payload(3)) {
		t.Error("output b differs from its input")
	}
}

func TestFlowHashStage(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	raw, err := os.ReadFile("../testdata/pcaps/dnscap__dnso1tcp.pcap")
	if err != nil {
		t.Fatal(err)
	}
	r.put("pcap", 1, raw)
	if res := r.submit("job: bad\nstages:\n  - {name: s, inputs: [pcap], program: \"builtin:flowhash?n=2\", outputs: [pcap.h0, pcap.x]}\n"); res.State != "rejected" ||
		!strings.Contains(res.Reason, "flowhash?n=2 writes outputs named QUEUE.h0 … QUEUE.h1") {
		t.Errorf("bad outputs: %+v", res)
	}
	if res := r.submit("job: bad2\nstages:\n  - {name: s, inputs: [pcap], program: builtin:decode, outputs: [a, b]}\n"); res.State != "rejected" ||
		!strings.Contains(res.Reason, "builtin:decode writes one output; 2 are listed") {
		t.Errorf("two outputs of decode: %+v", res)
	}
	r.mustAccept(`
job: split
from: earliest
stages:
  - {name: s, inputs: [pcap], program: "builtin:flowhash?n=3", outputs: [pcap.h0, pcap.h1, pcap.h2], retention: forever}
`)
	r.wait("three outputs", func() bool { return r.count("pcap.h0")+r.count("pcap.h1")+r.count("pcap.h2") == 3 })
	var total int
	for _, q := range []string{"pcap.h0", "pcap.h1", "pcap.h2"} {
		total += len(r.read(q, 1))
	}
	// One TCP connection: all of it in one output, the others empty
	// captures (a header each).
	if total != len(raw)+2*24 {
		t.Errorf("outputs hold %d bytes, want the %d of the capture plus two empty headers", total, len(raw))
	}
}

// TestStatusReportsBacklogAndLatency: after a known workload the status
// shows the right backlog and the age of the oldest block owed, and
// plausible latencies for what was done.
func TestStatusReportsBacklogAndLatency(t *testing.T) {
	reg := prometheus.NewRegistry()
	gates := t.TempDir()
	gate := filepath.Join(gates, "gate")
	// The confined program sees the gate's directory, as an admin's
	// shared tool directory.
	sb, err := sandbox.New(context.Background(), sandbox.Config{Limits: sandbox.DefaultLimits(), Shared: []string{gates}})
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, engine.Config{Slots: 1, Registerer: reg, Sandbox: sb})
	prog := filepath.Join(t.TempDir(), "gated.sh")
	// The program passes blocks through, but waits while the gate file is
	// missing: blocks pile up behind it.
	os.WriteFile(prog, []byte("#!/bin/sh\nwhile [ ! -e "+gate+" ]; do sleep 0.01; done\ncat\n"), 0o755)
	r.put("raw", 1, []byte("one"))
	r.mustAccept("job: gated\nfrom: earliest\nstages:\n  - {name: g, inputs: [raw], program: [" + prog + "], outputs: [raw.out], retention: forever}\n")
	for seq := uint64(2); seq <= 6; seq++ {
		r.put("raw", seq, []byte(fmt.Sprint("block ", seq)))
	}
	var rows []engine.StatusRow
	r.wait("five blocks waiting behind one run", func() bool {
		var err error
		rows, err = r.eng.Status(context.Background())
		return err == nil && len(rows) == 1 && rows[0].Backlog == 5 && rows[0].Workers == 1
	})
	if rows[0].OldestAge <= 0 || rows[0].ArrivalTo.Samples != 0 {
		t.Fatalf("status before any output = %+v", rows[0])
	}
	if got := gaugeValue(t, reg, "plumb_stage_backlog_blocks"); got != 5 {
		t.Errorf("plumb_stage_backlog_blocks = %v, want 5", got)
	}
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(gate, nil, 0o644)
	r.wait("the six outputs", func() bool { return r.count("raw.out") == 6 })
	r.wait("an idle stage", func() bool {
		rows, _ = r.eng.Status(context.Background())
		return rows[0].Backlog == 0 && rows[0].Workers == 0
	})
	lat := rows[0].ArrivalTo
	// Every block waited at least the 50 ms the gate was shut; none
	// should take minutes.
	if lat.Samples != 6 || lat.P50 < 50*time.Millisecond || lat.P99 > time.Minute || rows[0].OldestAge != 0 {
		t.Fatalf("status after the workload = %+v", rows[0])
	}
	if ev := rows[0].EventTo; ev.P50 < 24*time.Hour { // the blocks' event time is in 2025
		t.Errorf("event-to-output = %+v", ev)
	}
	if n := histogramCount(t, reg, "plumb_stage_arrival_to_output_seconds"); n != 6 {
		t.Errorf("plumb_stage_arrival_to_output_seconds counted %d, want 6", n)
	}
}

// gaugeValue reads a gauge family's single series.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestProgramsGetCleanEnvironment: an executable sees none of the
// server's environment (where secrets live) and starts in a directory of
// its own that is gone after the run.
func TestProgramsGetCleanEnvironment(t *testing.T) {
	t.Setenv("PLUMB_SECRET", "hunter2")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "hunter3")
	r := newRig(t, engine.Config{Slots: 1})
	r.put("raw", 1, []byte("x"))
	r.mustAccept(`
job: env
from: earliest
stages:
  - {name: e, inputs: [raw], program: [sh, -c, 'echo "dir=$PWD home=$HOME"; env | sort'], outputs: [raw.env]}
`)
	r.put("raw", 2, []byte("y"))
	r.wait("two runs", func() bool { return r.count("raw.env") == 2 })
	one, two := string(r.read("raw.env", 1)), string(r.read("raw.env", 2))
	for _, out := range []string{one, two} {
		if strings.Contains(out, "hunter") || strings.Contains(out, "PLUMB_SECRET") {
			t.Errorf("a program saw the server's environment:\n%s", out)
		}
		dir, _, _ := strings.Cut(strings.TrimPrefix(out, "dir="), " ")
		if !strings.HasPrefix(dir, filepath.Join(r.dir, "tmp")) || !strings.Contains(out, "home="+dir) {
			t.Errorf("a program ran outside a directory of its own:\n%s", out)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the run's directory %s outlived the run", dir)
		}
	}
	if strings.SplitN(one, " ", 2)[0] == strings.SplitN(two, " ", 2)[0] {
		t.Errorf("two runs shared a directory: %s", strings.SplitN(one, " ", 2)[0])
	}
}

// TestDerivedRetention: an output no stage reads, of a stage that gives
// no retention, is called out at submit and kept at most the server's
// --derived-retention (it grew for ever); a stage saying forever keeps
// its output, and an operator's retention on such a queue stands.
func TestDerivedRetention(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2, DerivedRetention: time.Millisecond})
	r.put("raw", 1, []byte("x"))
	res := r.mustAccept("job: j\nfrom: earliest\nstages:\n" +
		"  - {name: a, inputs: [raw], program: [cat], outputs: [raw.a]}\n" +
		"  - {name: b, inputs: [raw], program: [cat], outputs: [raw.b], retention: forever}\n" +
		"  - {name: c, inputs: [raw], program: [cat], outputs: [raw.c]}\n")
	if len(res.Warnings) != 2 || !strings.Contains(res.Warnings[0], "queue raw.a: no stage reads it and stage a gives it no retention; its blocks stay until a consumer group takes them, at most 1ms") {
		t.Errorf("warnings at submit: %q; want raw.a's and raw.c's", res.Warnings)
	}
	if err := r.db.SetPolicy("raw.c", state.Policy{Retention: "forever", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	r.wait("the three outputs", func() bool { return r.count("raw.a") == 1 && r.count("raw.b") == 1 && r.count("raw.c") == 1 })
	if w := r.eng.QueueWarning("raw.a", false); !strings.Contains(w, "nothing reads it") {
		t.Errorf("queue warning of raw.a: %q", w)
	}
	if w := r.eng.QueueWarning("raw.b", false); w != "" {
		t.Errorf("queue warning of raw.b, kept for ever as its stage says: %q", w)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := retention.Sweep(context.Background(), r.db, r.store, slog.Default()); err != nil {
		t.Fatal(err)
	}
	if a, b, c := r.count("raw.a"), r.count("raw.b"), r.count("raw.c"); a != 0 || b != 1 || c != 1 {
		t.Errorf("after the sweep raw.a, raw.b, raw.c hold %d, %d, %d blocks; want 0 (unread, past 1ms), 1 (forever), 1 (the operator's)", a, b, c)
	}
}

// TestResubmittedJobKeepsItsPlace is issue 62's renamed stage: a shared
// stage is named for its first owner, and submitting a job again merged
// it last, so resubmitting the example jobs renamed carol-dns/decode to
// alice-archive/decode, and with it the metrics' stage label. A job
// submitted again now keeps its place: the names stay.
func TestResubmittedJobKeepsItsPlace(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1})
	jobs := map[string]string{
		"carol-dns":     "job: carol-dns\nqueues: [pcap.sz]\nstages:\n  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap]}\n  - {name: dns, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow]}\n",
		"alice-archive": "job: alice-archive\nqueues: [pcap.sz]\nstages:\n  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap]}\n  - {name: xz, inputs: [pcap], program: \"builtin:encode?codec=xz\", outputs: [pcap.xz], retention: forever}\n",
	}
	names := func() []string {
		var out []string
		for _, st := range r.eng.Stats() {
			out = append(out, st.Stage)
		}
		slices.Sort(out)
		return out
	}
	r.mustAccept(jobs["carol-dns"])
	r.mustAccept(jobs["alice-archive"])
	want := []string{"alice-archive/xz", "carol-dns/decode", "carol-dns/dns"}
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("stages %v, want %v", got, want)
	}
	for _, job := range []string{"alice-archive", "carol-dns", "alice-archive"} {
		res := r.mustAccept(jobs[job])
		if got := names(); !slices.Equal(got, want) {
			t.Fatalf("after submitting %s again: stages %v, want %v", job, got, want)
		}
		if job == "alice-archive" && !slices.Contains(res.Stages, "carol-dns/decode") {
			t.Errorf("%s's answer names its stages %v; want the shared carol-dns/decode among them", job, res.Stages)
		}
	}
	// Across a restart too: the order is the metadata's.
	r.stop()
	r.start(engine.Config{Slots: 1})
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("after a restart: stages %v, want %v", got, want)
	}
}

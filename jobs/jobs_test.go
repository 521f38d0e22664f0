package jobs_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/jobs"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
	"github.com/plumb-dev/plumb/state"
)

// open returns an engine over a fresh metadata file and blob directory
// in dir, and the control plane of its jobs. The engine does not run:
// admission alone changes its graph.
func open(dir string, cfg jobs.Config) (*state.DB, *engine.Engine, *jobs.Control, error) {
	db, err := state.Open(filepath.Join(dir, "meta.db"), state.Options{})
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := blob.OpenDir(filepath.Join(dir, "blobs"))
	if err != nil {
		return nil, nil, nil, err
	}
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	quiet := slog.New(slog.DiscardHandler)
	eng, err := engine.New(db, store, reg, engine.Config{Scratch: filepath.Join(dir, "tmp"), Logger: quiet})
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.Logger = quiet
	ctl, err := jobs.New(db, eng, cfg)
	return db, eng, ctl, err
}

func Example() {
	dir, _ := os.MkdirTemp("", "jobs")
	defer os.RemoveAll(dir)
	db, eng, ctl, err := open(dir, jobs.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	res, _ := ctl.Submit("archive.yaml", []byte(`job: archive
queues: [raw]   # agents will ship into it
stages:
  - name: xz
    inputs: [raw]
    program: builtin:transcode?to=xz
    outputs: [raw.xz]
    retention: 30d
`), "")
	fmt.Println(res.Job, res.State, res.Stages)
	fmt.Println(len(eng.Graph().Stages), "stage in the engine's graph")

	res, _ = ctl.Submit("bad.yaml", []byte("job: bad\nstages:\n  - {name: s, inputs: [raw], program: builtin:nosuch, outputs: [o]}\n"), "")
	fmt.Println(res.Job, res.State)

	if err := ctl.Retract("archive"); err != nil {
		fmt.Println(err)
	}
	fmt.Println(len(eng.Graph().Stages), "stages after the retraction")
	// Output:
	// archive accepted [archive/xz]
	// 1 stage in the engine's graph
	// bad rejected
	// 0 stages after the retraction
}

// TestSubmitsAtOnceMergeInTurn: admission reads the jobs, merges, stores
// and applies under one lock, so an owner's cap holds however many of
// its submissions arrive at once, and the engine's graph is that of the
// jobs stored.
func TestSubmitsAtOnceMergeInTurn(t *testing.T) {
	db, eng, ctl, err := open(t.TempDir(), jobs.Config{MaxPerOwner: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var wg sync.WaitGroup
	results := make([]jobs.SubmitResult, 12)
	for i := range results {
		wg.Go(func() {
			src := fmt.Sprintf("job: j%d\nqueues: [raw]\nstages:\n  - {name: s%d, inputs: [raw], program: builtin:transcode, outputs: [o%d]}\n", i, i, i)
			res, err := ctl.SubmitChecked("j.yaml", []byte(src), "bob", false, nil)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		})
	}
	wg.Wait()
	accepted := 0
	for _, res := range results {
		switch {
		case res.State == "accepted":
			accepted++
		case !strings.Contains(res.Reason, "user bob has 3 accepted jobs"):
			t.Errorf("%s: %s", res.Job, res.Reason)
		}
	}
	stored, err := ctl.Jobs()
	if err != nil {
		t.Fatal(err)
	}
	if accepted != 3 || len(stored) != 3 || len(eng.Graph().Stages) != 3 {
		t.Errorf("accepted %d, stored %d, stages in the graph %d; want 3 of each", accepted, len(stored), len(eng.Graph().Stages))
	}
}

// TestStoredJobThatNoLongerFits: a job accepted before whose built-in
// the server no longer has is marked rejected with the reason when the
// server starts, and the others still run.
func TestStoredJobThatNoLongerFits(t *testing.T) {
	dir := t.TempDir()
	db, _, ctl, err := open(dir, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{
		"job: keep\nqueues: [raw]\nstages:\n  - {name: c, inputs: [raw], program: builtin:transcode, outputs: [raw.c]}\n",
		"job: gone\nqueues: [raw]\nstages:\n  - {name: x, inputs: [raw], program: builtin:pcapinfo, outputs: [raw.x]}\n",
	} {
		if res, err := ctl.Submit("j.yaml", []byte(src), ""); err != nil || res.State != "accepted" {
			t.Fatalf("%+v %v", res, err)
		}
	}
	// The next start no longer has builtin:pcapinfo.
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	reg2 := stage.NewRegistry()
	for _, f := range reg.Docs() {
		if f.Name != "pcapinfo" {
			reg2.Add(f)
		}
	}
	store, err := blob.OpenDir(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	eng, err := engine.New(db, store, reg2, engine.Config{Scratch: filepath.Join(dir, "tmp"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.New(db, eng, jobs.Config{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if g := eng.Graph(); len(g.Stages) != 1 || g.Stages[0].Name != "keep/c" {
		t.Errorf("graph after the restart: %s", g.YAML())
	}
	gone, err := db.GetJob("gone")
	if err != nil || gone.State != state.JobRejected || !strings.Contains(gone.Reason, "on restart") {
		t.Errorf("the job whose built-in left: %+v %v", gone, err)
	}
}

// TestRecheckSuspends: a job whose owner lost a right is suspended with
// the reason, its stage starts nothing, and it resumes when the right
// returns.
func TestRecheckSuspends(t *testing.T) {
	db, eng, ctl, err := open(t.TempDir(), jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if res, _ := ctl.SubmitChecked("j.yaml", []byte("job: j\nqueues: [raw]\nstages:\n  - {name: c, inputs: [raw], program: builtin:transcode, outputs: [raw.c]}\n"), "ana", false, nil); res.State != "accepted" {
		t.Fatalf("%+v", res)
	}
	lost := func(owner string, _ *pipeline.Job) (bool, error) {
		return false, fmt.Errorf("user %s may not read queue raw", owner)
	}
	if err := ctl.Recheck(lost); err != nil {
		t.Fatal(err)
	}
	if why := ctl.Suspended()["j"]; !strings.Contains(why, "may not read queue raw") {
		t.Errorf("suspended: %q", why)
	}
	if st := eng.Stats(); len(st) != 1 || !strings.Contains(st[0].Suspended, "may not read queue raw") {
		t.Errorf("the stage's stats: %+v", st)
	}
	if err := ctl.Recheck(func(string, *pipeline.Job) (bool, error) { return false, nil }); err != nil {
		t.Fatal(err)
	}
	if len(ctl.Suspended()) != 0 || eng.Stats()[0].Suspended != "" {
		t.Errorf("after the right returned: %v %+v", ctl.Suspended(), eng.Stats())
	}
}

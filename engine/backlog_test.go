package engine

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

// TestBacklogCountsAreReusedWhenCostly: a count that took long is reused
// for a while instead of walking a million owed blocks at every put; one
// that was quick is made again.
func TestBacklogCountsAreReusedWhenCostly(t *testing.T) {
	db, err := state.Open(filepath.Join(t.TempDir(), "meta.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := &Engine{db: db}
	st := &graphStage{node: &pipeline.Node{Name: "s", Inputs: []string{"q"}}, group: "g"}
	// The metadata owes nothing: a fresh count is 0.
	st.counted = backlogCount{n: 7, at: time.Now(), took: time.Second}
	if n, err := e.countBacklog(st); err != nil || n != 7 {
		t.Fatalf("a count that took 1 s, made just now: %d %v, want it reused (7)", n, err)
	}
	st.counted = backlogCount{n: 7, at: time.Now().Add(-time.Minute), took: time.Millisecond}
	if n, err := e.countBacklog(st); err != nil || n != 0 {
		t.Fatalf("a count that took 1 ms, made a minute ago: %d %v, want a fresh one (0)", n, err)
	}
	if st.counted.at.IsZero() || st.counted.n != 0 {
		t.Fatalf("the fresh count was not kept: %+v", st.counted)
	}
}

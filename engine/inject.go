package engine

import "fmt"

// Step is a step of a stage run at which a test can make the run fail
// (Config.Inject), as pebble's errorfs and CockroachDB's testing knobs
// do: each has a test that the failure there is one attempt, that the
// process goes on, and that nothing is left behind.
type Step string

// The steps of a block run (scratch, open, start, store, commit) and of
// a parted one (scratch, open, start, first half; then join, store,
// edge store, commit).
const (
	StepScratch   Step = "scratch"    // make the run's scratch directory
	StepOpen      Step = "open"       // open an input block's bytes
	StepStart     Step = "start"      // start the program on the block
	StepFirstHalf Step = "first-half" // record a part run's first half
	StepJoin      Step = "join"       // finish a part from its site's carry
	StepStore     Step = "store"      // store an output block's bytes
	StepEdgeStore Step = "edge-store" // store the state carried to the next block
	StepCommit    Step = "commit"     // commit the outputs and the release of the input
)

// inject asks the test's knob whether step fails for the named block.
func (e *Engine) inject(step Step, name string) error {
	if e.cfg.Inject == nil {
		return nil
	}
	return e.cfg.Inject(step, name)
}

// makeScratch makes a run's scratch directory, for the named block.
func (e *Engine) makeScratch(name string) (string, error) {
	err := e.inject(StepScratch, name)
	var dir string
	if err == nil {
		dir, err = e.scratch.make(e.cfg.Scratch, "run-")
	}
	if err != nil {
		return "", fmt.Errorf("scratch space for a run on block %s: %w (is %s writable, with room?)", name, err, e.cfg.Scratch)
	}
	return dir, nil
}

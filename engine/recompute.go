package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/plumb-dev/plumb/stage/program"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
)

// ErrInputsExpired says a lost derived block cannot be made again: the
// blocks its stage read are gone.
var ErrInputsExpired = errors.New("data unavailable: inputs expired")

// Recompute makes a derived block's bytes again after they were lost
// (a store drained too late or gone, a blob deleted or corrupt): it re-runs
// the block stage that produced it on the same inputs, if they are still
// kept. A deterministic stage writes the same bytes under the same key; a
// stage whose output differs gets the block's metadata pointed at the new
// bytes. Concurrent requests for one block share one run.
func (e *Engine) Recompute(ctx context.Context, b state.Block) error {
	_, err, _ := e.recomputes.Do(b.Name, func() (any, error) { return nil, e.recompute(ctx, b) })
	return err
}

func (e *Engine) recompute(ctx context.Context, b state.Block) error {
	e.mu.Lock()
	var node *pipeline.Node
	var steps []program.Step
	for _, st := range e.stages {
		if slices.Contains(st.node.Outputs, b.Queue) {
			node, steps = st.node, st.steps
		}
	}
	e.mu.Unlock()
	if node == nil || node.Abstraction != pipeline.Block && node.Abstraction != "" {
		return fmt.Errorf("block %s: %w (no block stage produces queue %s, so nothing can make it again)", b.Name, ErrInputsExpired, b.Queue)
	}
	var inputs []state.Block
	for _, q := range node.Inputs {
		in, err := e.db.Lookup(block.ID{Queue: q, Instance: b.Instance, Seq: b.Seq})
		if errors.Is(err, state.ErrNotFound) {
			return fmt.Errorf("block %s: %w: stage %s read %s/%s seq %d, which is no longer kept (retention); keep inputs longer to allow recomputing",
				b.Name, ErrInputsExpired, node.Name, q, b.Instance, b.Seq)
		}
		if err != nil {
			return err
		}
		if _, err := e.store.Stat(ctx, in.Key); errors.Is(err, blob.ErrNotFound) {
			if err := e.Recompute(ctx, in); err != nil { // lost too: make it first
				return err
			}
		}
		inputs = append(inputs, in)
	}
	var m runMeasure
	outputs, out, err := e.process(ctx, runSpec{node: node, steps: steps}, stage.Input{}, inputs, &m)
	if err != nil {
		return fmt.Errorf("recompute %s with stage %s: %w (stderr: %s)", b.Name, node.Name, err, lastLine(out.Stderr))
	}
	for _, o := range outputs {
		if o.Queue != b.Queue || o.SHA256 == b.SHA256 {
			continue // restored under the same key
		}
		if err := e.db.Rekey(b.ID(), b.Key, o.Key, o.SHA256, o.Size); err != nil {
			return err
		}
		e.log.Warn("recomputed block differs from the lost one: stage not deterministic; the block now holds the new bytes",
			"block", b.Name, "stage", node.Name, "sha256", o.SHA256, "was", b.SHA256)
	}
	e.log.Info("lost block recomputed", "block", b.Name, "stage", node.Name, "inputs", len(inputs))
	return nil
}

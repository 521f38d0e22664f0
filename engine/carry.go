package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/state"
)

// A sequential stage's carried state lives in a blob, not in the
// metadata: it is up to a stage's budget, and a metadata record
// rewritten with every commit grew the metadata file by hundreds of
// megabytes. The carry record keeps its key.

// passFinal marks a run's outputs final when its one input is, so a
// stage downstream of an import's last block knows it is the last.
func passFinal(inputs, outputs []state.Block) []state.Block {
	if len(inputs) == 1 && inputs[0].Final {
		for i := range outputs {
			outputs[i].Final = true
		}
	}
	return outputs
}

// loadCarry reads the state a run goes on from into cin.State.
func (e *Engine) loadCarry(ctx context.Context, cin *state.CarryIn) error {
	if cin == nil || cin.StateKey == "" || !cin.Carried {
		return nil
	}
	rc, err := e.store.Open(ctx, cin.StateKey)
	if err != nil {
		return fmt.Errorf("the state carried for %s (%s): %w", cin.Instance, cin.StateKey, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, state.MaxCarry+1))
	if err != nil {
		return fmt.Errorf("the state carried for %s (%s): %w", cin.Instance, cin.StateKey, err)
	}
	if len(data) > state.MaxCarry {
		return fmt.Errorf("the state carried for %s (%s) is over %d bytes", cin.Instance, cin.StateKey, state.MaxCarry)
	}
	cin.State = data
	return nil
}

// storeCarry puts a run's new state in a blob, before the commit that
// names it.
func (e *Engine) storeCarry(ctx context.Context, group string, u *state.CarryUpdate) error {
	if u == nil || u.Late || len(u.State) == 0 {
		return nil
	}
	if len(u.State) > state.MaxCarry {
		return fmt.Errorf("the state a stage carries for %s is %d bytes, over %d", u.Instance, len(u.State), state.MaxCarry)
	}
	sum := blob.Sum(sha256.Sum256(u.State))
	key := blob.CarryKey(group, u.Instance, u.Seq, sum)
	if err := e.store.Put(ctx, key, bytes.NewReader(u.State), int64(len(u.State)), sum); err != nil {
		return fmt.Errorf("store the state carried for %s: %w", u.Instance, err)
	}
	u.State, u.StateKey = nil, key
	return nil
}

// carryCommitted lets go of the blob of the state a commit replaced, or
// of the one a failed commit would have named.
func (e *Engine) carryCommitted(ctx context.Context, cin *state.CarryIn, u *state.CarryUpdate, committed bool) {
	if u == nil {
		return
	}
	old := ""
	switch {
	case committed && cin != nil && cin.Carried && cin.StateKey != u.StateKey:
		old = cin.StateKey
	case !committed && (cin == nil || u.StateKey != cin.StateKey):
		old = u.StateKey
	}
	if old != "" {
		if err := e.store.Delete(ctx, old); err != nil {
			e.log.Warn("delete a carried state no longer named; fsck will remove it", "key", old, "err", err)
		}
	}
}

// Package engine runs the merged pipeline graph: it schedules stage runs
// over worker slots in proportion to each stage's backlog, runs each
// program (built-in or executable, alone or chained by pipes) over a
// block, and publishes the outputs and the release of the input in one
// metadata transaction. What a stage is, and how a built-in is called,
// is package stage's.
package engine

import (
	"errors"

	"github.com/plumb-dev/plumb/stage"
)

// isMalformed reports whether a run failed on input no retry can fix.
func isMalformed(err error) bool { return errors.Is(err, stage.ErrMalformed) }

package client

import (
	"time"

	"github.com/plumb-dev/plumb/flight"
)

// Op is how a Condition of a records read tests its column.
type Op = flight.Op

// The ops of a Condition.
const (
	OpEq      = flight.OpEq
	OpNe      = flight.OpNe
	OpLt      = flight.OpLt
	OpLe      = flight.OpLe
	OpGt      = flight.OpGt
	OpGe      = flight.OpGe
	OpIn      = flight.OpIn      // Value: a list
	OpLike    = flight.OpLike    // Value: an SQL pattern
	OpSuffix  = flight.OpSuffix  // Value: a DNS name, which keeps it and every name under it
	OpRegex   = flight.OpRegex   // Value: RE2, matching anywhere unless anchored
	OpIsNull  = flight.OpIsNull  // no Value
	OpNotNull = flight.OpNotNull // no Value
)

// Start is where a new consumer group starts reading a queue.
type Start = flight.Start

// The starts of a consumer group.
const (
	FromEarliest = flight.FromEarliest // the oldest block kept
	FromLatest   = flight.FromLatest   // the next block to arrive
)

// FromTime starts a new group at a time: the blocks kept whose event
// time is at or after t, and every block that arrives after.
func FromTime(t time.Time) Start { return flight.FromTime(t) }

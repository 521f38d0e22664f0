package flight

import (
	"time"

	"github.com/plumb-dev/plumb/pipeline"
)

// The lease action's request and answer: a worker on another machine
// asks for a stage run (Hello) and is given one (Lease), which it then
// heartbeats, commits or fails with a LeaseRequest.

// Hello is what a worker says when it asks for work.
type Hello struct {
	Worker string `json:"worker"` // a stable ID, such as host-pid
	Host   string `json:"host"`
	Slots  int    `json:"slots"`
	// Stages is a path.Match pattern of stage names it runs ("" for all).
	Stages string `json:"stages,omitempty"`
	// Missing lists executables it found it does not have: stages that
	// need them are not leased to it.
	Missing []string `json:"missing,omitempty"`
}

// Lease is one stage run given to a worker.
type Lease struct {
	ID      string           `json:"lease"`
	Stage   string           `json:"stage"`
	Program pipeline.Program `json:"program"`
	Inputs  []Block          `json:"inputs"`
	Outputs []string         `json:"outputs"`
	Timeout time.Duration    `json:"timeout_ns,omitempty"`
	TTL     time.Duration    `json:"ttl_ns"`
	// Network is the stage's wish for the host's network.
	Network bool `json:"network,omitempty"`
	// Trusted says the stage's job may name unregistered executables.
	Trusted bool `json:"trusted,omitempty"`
	// OutputLimit is the most the run may write to each output.
	OutputLimit int64 `json:"output_limit,omitempty"`
	// Sequential: the stage carries state from block to block of a site.
	// With Carry the run goes on from it (give it to the run as
	// stage.Input.Carry and send back what the run left in commit-lease); without
	// it the block runs on its own.
	Sequential bool        `json:"sequential,omitempty"`
	Carry      *LeaseCarry `json:"carry,omitempty"`
	// Programs are the registered programs the stage names, by name: a
	// worker runs the copy it holds with that checksum.
	Programs map[string]LeaseProgram `json:"programs,omitempty"`
	// Part: run only the first half of an edged stage's run (Edged.Start)
	// and hold it under this name; commit-lease with part set says it is
	// done. Held: this is the turn of a block whose first half the worker
	// may hold under this name: finish it (Part.Finish), or run the block
	// whole if it is not held.
	Part string `json:"part,omitempty"`
	Held string `json:"held,omitempty"`
}

// LeaseProgram is a registered program as a worker needs it.
type LeaseProgram struct {
	SHA256  string `json:"sha256"`
	Network bool   `json:"network,omitempty"`
}

// LeaseCarry is the state a leased run of a sequential stage goes on
// from.
type LeaseCarry struct {
	In    []byte `json:"in,omitempty"`
	Gap   bool   `json:"gap,omitempty"`
	Final bool   `json:"final,omitempty"`
}

package flight

import (
	"time"

	"github.com/plumb-dev/plumb/block"
)

// The types below are what the actions answer, as JSON. The server
// encodes its own records into the same JSON; a server test checks each
// pair field by field, so a field added on one side and not the other
// fails the build's tests instead of vanishing on the wire.

// Block is a stored block as list-blocks answers it.
type Block struct {
	Name     string    `json:"name"`
	Queue    string    `json:"queue"`
	Instance string    `json:"instance"`
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"` // event time, from the name
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	Key      string    `json:"key"` // where the store keeps it
	Arrived  time.Time `json:"arrived"`
	Serial   uint64    `json:"serial"` // arrival order within the queue, from 1
	// KernelDropped is what the capturing kernel dropped while the block
	// was cut, as its agent said.
	KernelDropped int64 `json:"kernel_dropped,omitempty"`
	// Final: the block is the last of a finite source, such as an
	// import, as its agent said.
	Final bool `json:"final,omitempty"`
	// Ended: the server made the block, an empty capture marked final,
	// to end the capture of a site whose agent went silent (site-end).
	Ended bool `json:"ended,omitempty"`
}

// ID returns the block's identity.
func (b Block) ID() block.ID { return block.ID{Queue: b.Queue, Instance: b.Instance, Seq: b.Seq} }

// GroupStats counts a consumer group's deliveries by state.
type GroupStats struct {
	Group      string    `json:"group"`
	Owner      string    `json:"owner,omitempty"`
	Unreserved int       `json:"unreserved"`
	Reserved   int       `json:"reserved"`
	Done       int       `json:"done"`
	Faulty     int       `json:"faulty"`
	Lost       int       `json:"lost,omitempty"` // dropped unconsumed by the queue's retention
	Created    time.Time `json:"created,omitzero"`
	Used       time.Time `json:"used,omitzero"`
	// Stage names the pipeline stage the group is, when it is one.
	Stage string `json:"stage,omitempty"`
}

// Percentiles summarise a latency over the last hour.
type Percentiles struct {
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	Samples int           `json:"samples"`
}

// StatusRow is one consumer's backlog and latency (the status action).
type StatusRow struct {
	Kind    string `json:"kind"` // "stage", "group" or "stream"
	Stage   string `json:"stage,omitempty"`
	Queue   string `json:"queue"`
	Group   string `json:"group,omitempty"` // the consumer group, or stream consumer
	Backlog int64  `json:"backlog"`
	Workers int    `json:"workers,omitempty"`
	// OldestAge is how long the oldest block still owed has waited.
	OldestAge time.Duration `json:"oldest_age_ns"`
	// ArrivalTo is from a block's arrival to its output, ack or cursor
	// move; EventTo from its event time.
	ArrivalTo Percentiles `json:"arrival_to"`
	EventTo   Percentiles `json:"event_to"`
}

// WindowView is a window of a window stage (the windows action).
type WindowView struct {
	Stage     string    `json:"stage"`
	ID        string    `json:"id"`
	State     string    `json:"state"` // waiting, fired, faulty
	From      time.Time `json:"from,omitzero"`
	To        time.Time `json:"to,omitzero"`
	Revision  int       `json:"revision,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Blocks    int       `json:"blocks"`
	Missing   []string  `json:"missing,omitempty"`
	Late      []string  `json:"late,omitempty"`
	Bracketed bool      `json:"bracketed,omitempty"`
	WaitUntil time.Time `json:"wait_until,omitzero"`
	BlockedBy string    `json:"blocked_by,omitempty"`
	Error     string    `json:"error,omitempty"`
	Fired     time.Time `json:"fired,omitzero"`
	// Empty, for a stretch of empty windows the stage skipped, is how
	// many it stands for, from ID on, over From to To.
	Empty int64 `json:"empty,omitempty"`
}

// SubmitResult answers submit-job.
type SubmitResult struct {
	Job      string   `json:"job"`
	State    string   `json:"state"` // accepted or rejected
	Reason   string   `json:"reason,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	Stages   []string `json:"stages,omitempty"`
}

// Job is a submitted job (list-jobs).
type Job struct {
	Name  string `json:"name"`
	Owner string `json:"owner,omitempty"`
	// OwnerID is the owner's stable id in the users file: a user removed
	// and added again under the same name has another.
	OwnerID   string    `json:"owner_id,omitempty"`
	State     string    `json:"state"` // accepted, rejected or retracted
	Reason    string    `json:"reason,omitempty"`
	Warnings  []string  `json:"warnings,omitempty"`
	Source    string    `json:"source"`
	Submitted time.Time `json:"submitted"`
	Changed   time.Time `json:"changed"`
	Order     uint64    `json:"order"`
	Trusted   bool      `json:"trusted,omitempty"`
	// Suspended says why an accepted job's stages do not run now.
	Suspended string `json:"suspended,omitempty"`
}

// StageStats measures a stage (the stats action).
type StageStats struct {
	Stage     string   `json:"stage"`
	ID        string   `json:"id"`
	Inputs    []string `json:"inputs"`
	Outputs   []string `json:"outputs"`
	Owners    []string `json:"owners"`
	Program   string   `json:"program"`
	Detail    string   `json:"detail,omitempty"`
	Suspended string   `json:"suspended,omitempty"`
	// Backlog counts blocks a run could take now; Waiting a window
	// stage's blocks held for windows not yet due.
	Backlog int64 `json:"backlog"`
	Waiting int64 `json:"waiting_for_window"`
	Workers int   `json:"workers"`
	Target  int   `json:"target"`
	Runs    int64 `json:"runs"`
	Failed  int64 `json:"failed"`
	Faulty  int64 `json:"faulty"`
	// Parted counts runs whose block was read apart from its site's
	// sequence, in parallel with its neighbours (builtin:dns).
	Parted int64 `json:"parted,omitempty"`
	// Dropped counts what the stage's runs let go of to stay within
	// their bounds, by reason.
	Dropped  map[string]int64 `json:"dropped,omitempty"`
	BytesIn  int64            `json:"bytes_in"`
	BytesOut int64            `json:"bytes_out"`
	// In and Out count the blocks and bytes of successful runs by input
	// and output queue: the graph's edges.
	In                map[string]EdgeCount `json:"in,omitempty"`
	Out               map[string]EdgeCount `json:"out,omitempty"`
	ProcessingSeconds float64              `json:"processing_seconds"`
	CPUSeconds        float64              `json:"cpu_seconds"`
	QueueWaitSeconds  float64              `json:"queue_wait_seconds"`
	Intensity         float64              `json:"intensity_mb_s"`
	ChainCandidate    bool                 `json:"chain_candidate,omitempty"`
}

// ReadAdmission answers the read-admission action: how honest the read
// admission's estimates are.
type ReadAdmission struct {
	Transfers int64   `json:"transfers"`
	Late      int64   `json:"late_against_estimate"` // took longer than estimated
	Refused   int64   `json:"refused"`               // hopeless at arrival or while waiting
	RatioP50  float64 `json:"ratio_p50"`             // actual ÷ estimated time
	RatioP99  float64 `json:"ratio_p99"`
	Rate      float64 `json:"rate_bytes_per_second"` // per transfer, assumed now
	// ExpiredWaiting: deadline passed while waiting for a slot (refused
	// too late). PastDeadline: granted, but the transfer ended after the
	// deadline. A read a client saw late that is in neither lost its time
	// before the admission or on the way back.
	ExpiredWaiting int64 `json:"expired_waiting"`
	PastDeadline   int64 `json:"past_deadline"`
	// Margin is the slack in seconds a read keeps now before its
	// deadline, for the request's way in and the bytes' way out.
	Margin float64 `json:"margin_seconds"`
}

// EdgeCount is what went along one edge of the graph.
type EdgeCount struct {
	Blocks int64 `json:"blocks"`
	Bytes  int64 `json:"bytes"`
}

// FaultyBlock is a delivery set aside after its attempts ran out.
type FaultyBlock struct {
	Queue    string    `json:"queue"`
	Group    string    `json:"group"`
	Stage    string    `json:"stage,omitempty"`
	Block    string    `json:"block"`
	Serial   uint64    `json:"serial"`
	Attempts int       `json:"attempts"`
	Error    string    `json:"error"`
	Time     time.Time `json:"time"`
}

// Program is a registered stage program.
type Program struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"` // the server's own copy
	Source  string    `json:"source"`
	SHA256  string    `json:"sha256"`
	Network bool      `json:"network,omitempty"`
	AddedBy string    `json:"added_by,omitempty"`
	Added   time.Time `json:"added"`
}

// Policy is a queue's retention.
type Policy struct {
	Retention      string        `json:"retention"`
	MaxAge         time.Duration `json:"max_age_ns,omitempty"`
	MaxBytes       int64         `json:"max_bytes,omitempty"`
	DropUnconsumed bool          `json:"drop_unconsumed,omitempty"`
	By             string        `json:"by,omitempty"`
}

// LostBlock is a delivery whose block retention dropped unconsumed.
type LostBlock struct {
	Queue string `json:"queue"`
	Group string `json:"group"`
	Block string `json:"block"`
	Why   string `json:"why"`
}

// WorkerInfo describes a remote worker (the workers action).
type WorkerInfo struct {
	Worker   string    `json:"worker"`
	Host     string    `json:"host"`
	Slots    int       `json:"slots"`
	Runs     []string  `json:"runs"`
	LastSeen time.Time `json:"last_seen"`
	Done     int64     `json:"done"`
	Lost     int64     `json:"lost"`
}

// LeaseOutput is one output a worker staged for commit-lease.
type LeaseOutput struct {
	Queue  string `json:"queue"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

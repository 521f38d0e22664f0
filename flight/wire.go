package flight

import (
	"encoding/json"
	"time"
)

// QueueStats is the answer to the queue-stats action and the app_metadata
// of a queue's FlightInfo.
type QueueStats struct {
	Queue  string       `json:"queue"`
	Blocks int64        `json:"blocks"`
	Bytes  int64        `json:"bytes"`
	Groups []GroupStats `json:"groups"`
	// Warning is what an operator should know of it, such as a stage's
	// output nothing reads.
	Warning string `json:"warning,omitempty"`
}

// ListBlocksRequest is the body of the list-blocks action.
type ListBlocksRequest struct {
	Queue string `json:"queue"`
	After uint64 `json:"after,omitempty"` // serial to start after
	Limit int    `json:"limit,omitempty"` // 1000 when zero
}

// LastSeqResult answers the last-seq action.
type LastSeqResult struct {
	Seq   uint64 `json:"seq"`
	Found bool   `json:"found"`
	// Server is the server's identity (its metadata's), which a spool
	// records so it is never shipped to another server by mistake.
	Server string `json:"server,omitempty"`
	// Ended: block Seq is the empty final block the server made to end
	// the site's capture (site-end): an agent that comes back ships its
	// blocks after it.
	Ended bool `json:"ended,omitempty"`
}

// SiteEnd answers the site-end action.
type SiteEnd struct {
	Block string `json:"block"` // the site's last block now
	Seq   uint64 `json:"seq"`
	// Ended is false when the last block was final already.
	Ended bool `json:"ended"`
}

// QueueRequest is the body of the actions that name one queue and
// nothing else (queue-stats).
type QueueRequest struct {
	Queue string `json:"queue"`
}

// GroupRequest names a consumer group (group-delete) or a queue's groups
// (group-list).
type GroupRequest struct {
	Queue string `json:"queue"`
	Group string `json:"group,omitempty"`
}

// SubmitJobRequest is the body of the submit-job action.
type SubmitJobRequest struct {
	File string `json:"file,omitempty"` // named in error positions
	YAML string `json:"yaml"`
}

// GraphRequest is the body of the graph action.
type GraphRequest struct {
	Format string `json:"format,omitempty"` // "yaml" (default) or "dot"
}

// GraphResult answers the graph action.
type GraphResult struct {
	YAML string `json:"yaml,omitempty"`
	DOT  string `json:"dot,omitempty"`
}

// RetryRequest is the body of the retry action; empty fields mean all.
type RetryRequest struct {
	Queue string `json:"queue,omitempty"`
	Block string `json:"block,omitempty"`
}

// AddProgramRequest is the body of the program-add action.
type AddProgramRequest struct {
	Name string `json:"name"`
	// Path is the executable's path on the server's machine.
	Path string `json:"path"`
	// SHA256, when given, must be the file's checksum.
	SHA256 string `json:"sha256,omitempty"`
	// Network lets stages that ask for it reach the network.
	Network bool `json:"network,omitempty"`
}

// WindowSpec is a window as a job's window stage declares it (see the
// README's window section): durations are text such as "24h" or "2d".
type WindowSpec struct {
	Size        string   `json:"size"` // a duration ("24h") or a number of blocks
	Start       string   `json:"start,omitempty"`
	End         string   `json:"end,omitempty"`
	MaxWait     string   `json:"max_wait,omitempty"`
	MaxMissing  string   `json:"max_missing,omitempty"` // a count or a percentage
	IdleTimeout string   `json:"idle_timeout,omitempty"`
	Ordering    string   `json:"ordering,omitempty"`     // "any" (default) or "strict"
	LateHorizon string   `json:"late_horizon,omitempty"` // windows, or a duration
	Cutoff      string   `json:"cutoff,omitempty"`       // "start" (default), "next" or "both"
	Late        string   `json:"late,omitempty"`         // "report" (default) or "refire"
	PerInstance string   `json:"per_instance,omitempty"` // "each" (default) or "all"
	Instances   []string `json:"instances,omitempty"`
	// Empty is "skip" (default: a stretch of windows with no block is
	// one header with Empty set, and no blocks) or "run" (a header each).
	Empty string `json:"empty,omitempty"`
}

// RecordsTicket asks for the rows of a queue of Arrow blocks (such as
// dns.arrow) as one Arrow stream, so a client reads them as a table:
// pyarrow's `client.do_get(ticket).read_pandas()`.
type RecordsTicket struct {
	Records string `json:"records"` // the queue
	// Instance keeps one site's blocks.
	Instance string `json:"instance,omitempty"`
	// From and To bound the blocks: RFC 3339 times compare with a block's
	// event time (To) and each row's "time" column (both), numbers with
	// blocks' sequence numbers; both ends included.
	From json.RawMessage `json:"from,omitempty"`
	To   json.RawMessage `json:"to,omitempty"` // the other end, as From
	// Columns to send, in this order; all when empty.
	Columns []string `json:"columns,omitempty"`
	// Filter keeps rows where every condition holds.
	Filter []Condition `json:"filter,omitempty"`
	// Limit, when positive, ends the table after that many rows.
	Limit int64 `json:"limit,omitempty"`
}

// Condition tests a column: op is one of = != < <= > >= (with a value),
// "in" (with a list of values), "like" (an SQL pattern: % any run, _ one
// character, \ escapes), "suffix" (a name: "example.com" keeps
// example.com and every name under it), "regex" (RE2 syntax, matching
// anywhere unless anchored), "is_null" or "not_null" (no value). A row
// whose column is null passes only is_null.
type Condition struct {
	Column string `json:"column"`
	Op     Op     `json:"op"`
	Value  any    `json:"value,omitempty"`
}

// Op is how a Condition tests its column.
type Op string

// The ops of a Condition.
const (
	OpEq      Op = "="
	OpNe      Op = "!="
	OpLt      Op = "<"
	OpLe      Op = "<="
	OpGt      Op = ">"
	OpGe      Op = ">="
	OpIn      Op = "in"       // Value: a list
	OpLike    Op = "like"     // Value: an SQL pattern
	OpSuffix  Op = "suffix"   // Value: a DNS name, which keeps it and every name under it
	OpRegex   Op = "regex"    // Value: RE2, matching anywhere unless anchored
	OpIsNull  Op = "is_null"  // no Value
	OpNotNull Op = "not_null" // no Value
)

// NotScheduling is in the error of a call only the server holding the
// scheduling duty can take (a lease, the open windows), made to another
// server sharing its metadata: a client given several servers asks the
// others.
const NotScheduling = "does not schedule stage runs now"

// LeaseWait is how long a lease request waits for work before answering
// that there is none.
const LeaseWait = 5 * time.Second

// LeaseRequest is the body of heartbeat, commit-lease and fail-lease.
type LeaseRequest struct {
	Lease   string        `json:"lease"`
	Outputs []LeaseOutput `json:"outputs,omitempty"` // commit-lease
	Error   string        `json:"error,omitempty"`   // fail-lease
	Release bool          `json:"release,omitempty"` // fail-lease: give it back, no attempt counted
	// CPUSeconds is what the run's programs used on the worker
	// (commit-lease), for plumb stats.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// Carry is what a sequential stage's run left for the site's next
	// block (commit-lease).
	Carry []byte `json:"carry,omitempty"`
	// Part (commit-lease of a part lease): the first half is done and
	// the worker holds it. Parted (commit-lease of a turn): the run
	// finished the first half the worker held.
	Part   bool `json:"part,omitempty"`
	Parted bool `json:"parted,omitempty"`
	// Dropped (commit-lease): what the run let go of to stay within its
	// bounds, by reason.
	Dropped map[string]int64 `json:"dropped,omitempty"`
	// Tally (commit-lease): what the run saw, counted in the server's
	// metrics once committed (e.g. builtin:dnsmetrics's DNS counts).
	Tally map[string]int64 `json:"tally,omitempty"`
}

// RetentionRequest is the body of the set-retention action.
type RetentionRequest struct {
	Queue          string `json:"queue"`
	Retention      string `json:"retention"` // "forever", "30d", "500GiB", "30d,500GiB"; "" to remove
	DropUnconsumed bool   `json:"drop_unconsumed,omitempty"`
}

// QueuePolicy is one queue's retention, as the retention action lists it.
type QueuePolicy struct {
	Queue string `json:"queue"`
	Policy
}

// FsckRequest is the body of the fsck action.
type FsckRequest struct {
	Repair bool `json:"repair,omitempty"`
	Verify bool `json:"verify,omitempty"`
	// GraceSeconds is how old an orphan blob must be to be deleted; an
	// hour when zero.
	GraceSeconds float64 `json:"grace_seconds,omitempty"`
}

// PrimaryStore names the store --store gives.
const PrimaryStore = "primary"

// StoreRequest is the body of the store-add, store-remove and store-drain
// actions.
type StoreRequest struct {
	Name string `json:"name"`
	URL  string `json:"url,omitempty"` // store-add
	// DeadlineSeconds bounds a drain (store-drain); 30 when zero.
	DeadlineSeconds float64 `json:"deadline_seconds,omitempty"`
	// Workers is how many blobs a drain moves at once; 4 when zero.
	Workers int `json:"workers,omitempty"`
}

// StreamRequest names a stream consumer in the stream actions.
type StreamRequest struct {
	Queue    string            `json:"queue"`
	Instance string            `json:"instance"`
	Consumer string            `json:"consumer"`
	Seq      uint64            `json:"seq,omitempty"`   // commit; checkpoint: the next to read (the cursor when 0)
	State    map[string]string `json:"state,omitempty"` // put-state, checkpoint
	From     string            `json:"from,omitempty"`  // open: earliest, checkpoint or a sequence number
}

// ProcessResult answers process-next: the block to read and its ticket.
type ProcessResult struct {
	Seq    uint64 `json:"seq"`
	Block  string `json:"block"`
	Ticket Ticket `json:"ticket"`
}

// StreamTicket reads one site's blocks of a queue in sequence order, as a
// stream consumer with a server-side cursor.
type StreamTicket struct {
	Stream   string          `json:"stream"`           // the queue
	Instance string          `json:"instance"`         // the site
	Consumer string          `json:"consumer"`         // the consumer's name: its cursor and checkpoints are kept under it
	From     json.RawMessage `json:"from,omitempty"`   // "checkpoint" (default), "earliest" or a sequence number
	Follow   bool            `json:"follow,omitempty"` // wait for the blocks after the last one, rather than end
	Gap      *GapPolicy      `json:"gap,omitempty"`    // what to do at a missing block; without it, wait for ever
}

// GapPolicy says what a stream does at a missing block: wait that long
// for it, then skip it (recorded) or stop. Without one it waits forever.
type GapPolicy struct {
	Wait string `json:"wait"` // a duration: "30s", "2d"
	Then string `json:"then"`
}

// StreamEvent is a zero-row batch's app_metadata on a stream: a gap at
// the cursor, a skip, late blocks, or the end of a stopped stream.
type StreamEvent struct {
	Event   string   `json:"event"` // "gap", "skipped", "late", "stopped"
	Next    uint64   `json:"next"`
	Missing uint64   `json:"missing,omitempty"` // blocks missing before the next present one
	Late    []uint64 `json:"late,omitempty"`
}

// WindowTicket asks for a queue's complete windows, as an outside
// consumer group: each window comes as a zero-row batch whose
// app_metadata is a WindowHeader, then its blocks as in block reads. A
// window is handed to the group once; its blocks are acked like blocks.
type WindowTicket struct {
	Window string      `json:"window"`           // the queue
	Spec   *WindowSpec `json:"spec"`             // the windows, as a window stage's window: (size, start, max_wait...)
	Group  string      `json:"group"`            // the consumer group the windows are handed to, once each
	Follow bool        `json:"follow,omitempty"` // wait for windows yet to complete, rather than end
	From   Start       `json:"from,omitempty"`   // FromEarliest (default) or FromLatest, for a new group
}

// WindowHeader announces a window on a window stream.
type WindowHeader struct {
	Window struct {
		ID       string    `json:"id"`
		From     time.Time `json:"from,omitzero"`
		To       time.Time `json:"to,omitzero"`
		FirstSeq uint64    `json:"first_seq,omitempty"`
		LastSeq  uint64    `json:"last_seq,omitempty"`
		Revision int       `json:"revision"`
		Reason   string    `json:"reason"`
	} `json:"window"`
	Instance string   `json:"instance"`
	Present  []uint64 `json:"present"`
	Missing  []uint64 `json:"missing"`
	Late     []uint64 `json:"late"`
	Blocks   int      `json:"blocks"` // how many block reads follow
	// KernelDropped sums what the capturing kernels dropped while the
	// window's present blocks were cut: packets lost at capture, not a
	// missing block.
	KernelDropped int64 `json:"kernel_dropped,omitempty"`
	// Empty, when set, makes the header stand for that many consecutive
	// windows of the site with no block, from Window.ID on, over
	// Window.From to Window.To (reason "empty").
	Empty int64 `json:"empty,omitempty"`
}

// WindowsRequest is the body of the windows action: every field narrows
// the listing (From and To are RFC 3339: windows overlapping them; State
// is waiting, fired or faulty); Limit keeps the first that many, 0 all.
type WindowsRequest struct {
	Stage string `json:"stage,omitempty"`
	Site  string `json:"site,omitempty"`
	State string `json:"state,omitempty"`
	From  string `json:"from,omitempty"`
	To    string `json:"to,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// SiteRequest is the body of site-owners (Queue, or none for every
// queue) and site-assign (Queue, Instance, and User: "" leaves the site
// unowned, for its next writer to claim).
type SiteRequest struct {
	Queue    string `json:"queue,omitempty"`
	Instance string `json:"instance,omitempty"`
	User     string `json:"user,omitempty"`
}

// SiteOwner is who may put blocks into a site (an instance of a queue):
// its first writer, or the user an admin assigned.
type SiteOwner struct {
	Queue    string    `json:"queue"`
	Instance string    `json:"instance"`
	User     string    `json:"user"`
	Since    time.Time `json:"since"`
	// By is "first put", or the admin who assigned it.
	By string `json:"by"`
}

// RotateTokenKeyRequest is the body of rotate-token-key.
type RotateTokenKeyRequest struct {
	// Keep: tokens signed with the old key stay good until they expire.
	Keep bool `json:"keep,omitempty"`
}

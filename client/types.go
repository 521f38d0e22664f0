package client

import "github.com/plumb-dev/plumb/flight"

// What the server answers, as the protocol (package flight) defines it.
// They are aliases, so a value from a Client is also the protocol's.
type (
	// Header starts a block on a stream: its name, size and SHA-256.
	//
	// Fields:
	//
	//	Name          string
	//	Size          int64
	//	SHA256        string
	//	KernelDropped int64 // KernelDropped, on upload, is how many packets the capturing kernel dropped while the block was cut (its rings were full): a gap in the capture that no missing block explains.
	//	Final         bool  // Final, on upload, says the block is the last of a finite source (an import's files): nothing follows it in its instance, so what stages hold past its end (a TCP message behind a hole that never fills) is let go with it.
	Header = flight.Header
	// PutResult says what happened to one uploaded block.
	//
	// Fields:
	//
	//	Name   string
	//	Status string // "stored", "duplicate", or "staged" for a lease's outputs
	PutResult = flight.PutResult
	// Ticket reads a block by name, or a queue as a consumer group.
	//
	// Fields:
	//
	//	Block      string        // Block asks for one block by name.
	//	Queue      string        // Queue asks for a queue's blocks in arrival order. Without Group it is a plain read of what the queue holds (and, with Follow, of what arrives). With Group the blocks are owed to the consumer group until acknowledged with the "ack" action.
	//	Group      string        // the consumer group, made on first use
	//	Follow     bool          // wait for blocks that arrive, rather than end
	//	From       Start         // From is where a new group (or a plain read) starts: FromEarliest, FromLatest or FromTime. A group keeps the start it was created with.
	//	Visibility time.Duration // Visibility is how long a block handed to a group stays reserved before it is handed out again unless acknowledged; the server's --visibility when zero. On the wire it is "visibility" in seconds.
	//	Reader     string        // Reader names a group read, chosen by the client (ValidateReader): a nack naming it gives back every block the read holds unacked, those it read ahead included, even once the server has finished sending them.
	Ticket = flight.Ticket
	// RecordsTicket selects rows of a queue of Arrow blocks.
	//
	// Fields:
	//
	//	Records  string          // the queue
	//	Instance string          // Instance keeps one site's blocks.
	//	From     json.RawMessage // From and To bound the blocks: RFC 3339 times compare with a block's event time (To) and each row's "time" column (both), numbers with blocks' sequence numbers; both ends included.
	//	To       json.RawMessage // the other end, as From
	//	Columns  []string        // Columns to send, in this order; all when empty.
	//	Filter   []Condition     // Filter keeps rows where every condition holds.
	//	Limit    int64           // Limit, when positive, ends the table after that many rows.
	RecordsTicket = flight.RecordsTicket
	// Condition is one filter of a RecordsTicket.
	//
	// Fields:
	//
	//	Column string
	//	Op     Op
	//	Value  any
	Condition = flight.Condition
	// WindowTicket reads a queue's complete windows.
	//
	// Fields:
	//
	//	Window string      // the queue
	//	Spec   *WindowSpec // the windows, as a window stage's window: (size, start, max_wait...)
	//	Group  string      // the consumer group the windows are handed to, once each
	//	Follow bool        // wait for windows yet to complete, rather than end
	//	From   Start       // FromEarliest (default) or FromLatest, for a new group
	WindowTicket = flight.WindowTicket
	// WindowSpec is a window, as a job declares it.
	//
	// Fields:
	//
	//	Size        string // a duration ("24h") or a number of blocks
	//	Start       string
	//	End         string
	//	MaxWait     string
	//	MaxMissing  string // a count or a percentage
	//	IdleTimeout string
	//	Ordering    string // "any" (default) or "strict"
	//	LateHorizon string // windows, or a duration
	//	Cutoff      string // "start" (default), "next" or "both"
	//	Late        string // "report" (default) or "refire"
	//	PerInstance string // "each" (default) or "all"
	//	Instances   []string
	//	Empty       string // Empty is "skip" (default: a stretch of windows with no block is one header with Empty set, and no blocks) or "run" (a header each).
	WindowSpec = flight.WindowSpec
	// WindowHeader announces a window on a window stream.
	//
	// Fields:
	//
	//	Window        struct{ID string; From time.Time; To time.Time; FirstSeq uint64; LastSeq uint64; Revision int; Reason string}
	//	Instance      string
	//	Present       []uint64
	//	Missing       []uint64
	//	Late          []uint64
	//	Blocks        int   // how many block reads follow
	//	KernelDropped int64 // KernelDropped sums what the capturing kernels dropped while the window's present blocks were cut: packets lost at capture, not a missing block.
	//	Empty         int64 // Empty, when set, makes the header stand for that many consecutive windows of the site with no block, from Window.ID on, over Window.From to Window.To (reason "empty").
	WindowHeader = flight.WindowHeader
	// StreamTicket reads one site's blocks in order with a cursor.
	//
	// Fields:
	//
	//	Stream   string          // the queue
	//	Instance string          // the site
	//	Consumer string          // the consumer's name: its cursor and checkpoints are kept under it
	//	From     json.RawMessage // "checkpoint" (default), "earliest" or a sequence number
	//	Follow   bool            // wait for the blocks after the last one, rather than end
	//	Gap      *GapPolicy      // what to do at a missing block; without it, wait for ever
	StreamTicket = flight.StreamTicket
	// StreamRequest names a stream consumer in the stream actions.
	//
	// Fields:
	//
	//	Queue    string
	//	Instance string
	//	Consumer string
	//	Seq      uint64            // commit; checkpoint: the next to read (the cursor when 0)
	//	State    map[string]string // put-state, checkpoint
	//	From     string            // open: earliest, checkpoint or a sequence number
	StreamRequest = flight.StreamRequest
	// StreamEvent is a gap, skip, late blocks or the end of a stream.
	//
	// Fields:
	//
	//	Event   string // "gap", "skipped", "late", "stopped"
	//	Next    uint64
	//	Missing uint64 // blocks missing before the next present one
	//	Late    []uint64
	StreamEvent = flight.StreamEvent
	// GapPolicy says what a stream does at a missing block.
	//
	// Fields:
	//
	//	Wait string // a duration: "30s", "2d"
	//	Then string
	GapPolicy = flight.GapPolicy
	// QueueStats counts a queue's blocks, bytes and groups.
	//
	// Fields:
	//
	//	Queue   string
	//	Blocks  int64
	//	Bytes   int64
	//	Groups  []GroupStats
	//	Warning string // Warning is what an operator should know of it, such as a stage's output nothing reads.
	QueueStats = flight.QueueStats
	// QueuePolicy is one queue's retention.
	//
	// Fields:
	//
	//	Queue string
	QueuePolicy = flight.QueuePolicy
	// LastSeqResult is a site's last sequence number on the server.
	//
	// Fields:
	//
	//	Seq    uint64
	//	Found  bool
	//	Server string // Server is the server's identity (its metadata's), which a spool records so it is never shipped to another server by mistake.
	//	Ended  bool   // Ended: block Seq is the empty final block the server made to end the site's capture (site-end): an agent that comes back ships its blocks after it.
	LastSeqResult = flight.LastSeqResult
	// AddProgramRequest registers a program.
	//
	// Fields:
	//
	//	Name    string
	//	Path    string // Path is the executable's path on the server's machine.
	//	SHA256  string // SHA256, when given, must be the file's checksum.
	//	Network bool   // Network lets stages that ask for it reach the network.
	AddProgramRequest = flight.AddProgramRequest
	// Block is a stored block.
	//
	// Fields:
	//
	//	Name          string
	//	Queue         string
	//	Instance      string
	//	Seq           uint64
	//	Time          time.Time // event time, from the name
	//	Size          int64
	//	SHA256        string
	//	Key           string // where the store keeps it
	//	Arrived       time.Time
	//	Serial        uint64 // arrival order within the queue, from 1
	//	KernelDropped int64  // KernelDropped is what the capturing kernel dropped while the block was cut, as its agent said.
	//	Final         bool   // Final: the block is the last of a finite source, such as an import, as its agent said.
	//	Ended         bool   // Ended: the server made the block, an empty capture marked final, to end the capture of a site whose agent went silent (site-end).
	Block = flight.Block
	// GroupStats counts a consumer group's deliveries.
	//
	// Fields:
	//
	//	Group      string
	//	Owner      string
	//	Unreserved int
	//	Reserved   int
	//	Done       int
	//	Faulty     int
	//	Lost       int // dropped unconsumed by the queue's retention
	//	Created    time.Time
	//	Used       time.Time
	//	Stage      string // Stage names the pipeline stage the group is, when it is one.
	GroupStats = flight.GroupStats
	// StatusRow is one consumer's backlog and latency.
	//
	// Fields:
	//
	//	Kind      string // "stage", "group" or "stream"
	//	Stage     string
	//	Queue     string
	//	Group     string // the consumer group, or stream consumer
	//	Backlog   int64
	//	Workers   int
	//	OldestAge time.Duration // OldestAge is how long the oldest block still owed has waited.
	//	ArrivalTo Percentiles   // ArrivalTo is from a block's arrival to its output, ack or cursor move; EventTo from its event time.
	//	EventTo   Percentiles
	StatusRow = flight.StatusRow
	// ReadAdmission is how honest the server's read admission is.
	//
	// Fields:
	//
	//	Transfers      int64
	//	Late           int64   // took longer than estimated
	//	Refused        int64   // hopeless at arrival or while waiting
	//	RatioP50       float64 // actual ÷ estimated time
	//	RatioP99       float64
	//	Rate           float64 // per transfer, assumed now
	//	ExpiredWaiting int64   // ExpiredWaiting: deadline passed while waiting for a slot (refused too late). PastDeadline: granted, but the transfer ended after the deadline. A read a client saw late that is in neither lost its time before the admission or on the way back.
	//	PastDeadline   int64
	//	Margin         float64 // Margin is the slack in seconds a read keeps now before its deadline, for the request's way in and the bytes' way out.
	ReadAdmission = flight.ReadAdmission
	// Percentiles summarise a latency.
	//
	// Fields:
	//
	//	P50     time.Duration
	//	P99     time.Duration
	//	Samples int
	Percentiles = flight.Percentiles
	// WindowView is a window of a window stage.
	//
	// Fields:
	//
	//	Stage     string
	//	ID        string
	//	State     string // waiting, fired, faulty
	//	From      time.Time
	//	To        time.Time
	//	Revision  int
	//	Reason    string
	//	Blocks    int
	//	Missing   []string
	//	Late      []string
	//	Bracketed bool
	//	WaitUntil time.Time
	//	BlockedBy string
	//	Error     string
	//	Fired     time.Time
	//	Empty     int64 // Empty, for a stretch of empty windows the stage skipped, is how many it stands for, from ID on, over From to To.
	WindowView = flight.WindowView
	// SubmitResult answers a job submission.
	//
	// Fields:
	//
	//	Job      string
	//	State    string // accepted or rejected
	//	Reason   string
	//	Warnings []string
	//	Stages   []string
	SubmitResult = flight.SubmitResult
	// Job is a submitted job.
	//
	// Fields:
	//
	//	Name      string
	//	Owner     string
	//	OwnerID   string // OwnerID is the owner's stable id in the users file: a user removed and added again under the same name has another.
	//	State     string // accepted, rejected or retracted
	//	Reason    string
	//	Warnings  []string
	//	Source    string
	//	Submitted time.Time
	//	Changed   time.Time
	//	Order     uint64
	//	Trusted   bool
	//	Suspended string // Suspended says why an accepted job's stages do not run now.
	Job = flight.Job
	// StageStats measures a stage.
	//
	// Fields:
	//
	//	Stage             string
	//	ID                string
	//	Inputs            []string
	//	Outputs           []string
	//	Owners            []string
	//	Program           string
	//	Detail            string
	//	Suspended         string
	//	Backlog           int64 // Backlog counts blocks a run could take now; Waiting a window stage's blocks held for windows not yet due.
	//	Waiting           int64
	//	Workers           int
	//	Target            int
	//	Runs              int64
	//	Failed            int64
	//	Faulty            int64
	//	Parted            int64            // Parted counts runs whose block was read apart from its site's sequence, in parallel with its neighbours (builtin:dns).
	//	Dropped           map[string]int64 // Dropped counts what the stage's runs let go of to stay within their bounds, by reason.
	//	BytesIn           int64
	//	BytesOut          int64
	//	In                map[string]EdgeCount // In and Out count the blocks and bytes of successful runs by input and output queue: the graph's edges.
	//	Out               map[string]EdgeCount
	//	ProcessingSeconds float64
	//	CPUSeconds        float64
	//	QueueWaitSeconds  float64
	//	Intensity         float64
	//	ChainCandidate    bool
	StageStats = flight.StageStats
	// FaultyBlock is a block set aside after its attempts ran out.
	//
	// Fields:
	//
	//	Queue    string
	//	Group    string
	//	Stage    string
	//	Block    string
	//	Serial   uint64
	//	Attempts int
	//	Error    string
	//	Time     time.Time
	FaultyBlock = flight.FaultyBlock
	// Program is a registered stage program.
	//
	// Fields:
	//
	//	Name    string
	//	Path    string // the server's own copy
	//	Source  string
	//	SHA256  string
	//	Network bool
	//	AddedBy string
	//	Added   time.Time
	Program = flight.Program
	// Policy is a queue's retention.
	//
	// Fields:
	//
	//	Retention      string
	//	MaxAge         time.Duration
	//	MaxBytes       int64
	//	DropUnconsumed bool
	//	By             string
	Policy = flight.Policy
	// LostBlock is a block retention dropped unconsumed.
	//
	// Fields:
	//
	//	Queue string
	//	Group string
	//	Block string
	//	Why   string
	LostBlock = flight.LostBlock
	// WorkerInfo describes a remote worker.
	//
	// Fields:
	//
	//	Worker   string
	//	Host     string
	//	Slots    int
	//	Runs     []string
	//	LastSeen time.Time
	//	Done     int64
	//	Lost     int64
	WorkerInfo = flight.WorkerInfo
)

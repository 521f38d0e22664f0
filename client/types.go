package client

import "github.com/plumb-dev/plumb/flight"

// What the server answers, as the protocol (package flight) defines it.
// They are aliases, so a value from a Client is also the protocol's.
type (
	// Header starts a block on a stream: its name, size and SHA-256.
	Header = flight.Header
	// PutResult says what happened to one uploaded block.
	PutResult = flight.PutResult
	// Ticket reads a block by name, or a queue as a consumer group.
	Ticket = flight.Ticket
	// RecordsTicket selects rows of a queue of Arrow blocks.
	RecordsTicket = flight.RecordsTicket
	// Condition is one filter of a RecordsTicket.
	Condition = flight.Condition
	// WindowTicket reads a queue's complete windows.
	WindowTicket = flight.WindowTicket
	// WindowSpec is a window, as a job declares it.
	WindowSpec = flight.WindowSpec
	// WindowHeader announces a window on a window stream.
	WindowHeader = flight.WindowHeader
	// StreamTicket reads one site's blocks in order with a cursor.
	StreamTicket = flight.StreamTicket
	// StreamRequest names a stream consumer in the stream actions.
	StreamRequest = flight.StreamRequest
	// StreamEvent is a gap, skip, late blocks or the end of a stream.
	StreamEvent = flight.StreamEvent
	// GapPolicy says what a stream does at a missing block.
	GapPolicy = flight.GapPolicy
	// QueueStats counts a queue's blocks, bytes and groups.
	QueueStats = flight.QueueStats
	// QueuePolicy is one queue's retention.
	QueuePolicy = flight.QueuePolicy
	// LastSeqResult is a site's last sequence number on the server.
	LastSeqResult = flight.LastSeqResult
	// AddProgramRequest registers a program.
	AddProgramRequest = flight.AddProgramRequest
	// Block is a stored block.
	Block = flight.Block
	// GroupStats counts a consumer group's deliveries.
	GroupStats = flight.GroupStats
	// StatusRow is one consumer's backlog and latency.
	StatusRow = flight.StatusRow
	// ReadAdmission is how honest the server's read admission is.
	ReadAdmission = flight.ReadAdmission
	// Percentiles summarise a latency.
	Percentiles = flight.Percentiles
	// WindowView is a window of a window stage.
	WindowView = flight.WindowView
	// SubmitResult answers a job submission.
	SubmitResult = flight.SubmitResult
	// Job is a submitted job.
	Job = flight.Job
	// StageStats measures a stage.
	StageStats = flight.StageStats
	// FaultyBlock is a block set aside after its attempts ran out.
	FaultyBlock = flight.FaultyBlock
	// Program is a registered stage program.
	Program = flight.Program
	// Policy is a queue's retention.
	Policy = flight.Policy
	// LostBlock is a block retention dropped unconsumed.
	LostBlock = flight.LostBlock
	// WorkerInfo describes a remote worker.
	WorkerInfo = flight.WorkerInfo
)

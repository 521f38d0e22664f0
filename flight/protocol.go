// Package flight is Plumb's Arrow Flight protocol: what the server (package
// server) and the Go client (package client) both speak, and nothing of
// either side.
//
// The wire protocol is plain Flight with JSON in the places Flight leaves to
// the application, so any Flight client (pyarrow, arrow-go, Java) speaks it
// with default settings:
//
//   - Blocks travel as record batches of (offset int64, data binary) with one
//     row of at most 1 MiB per batch. The first batch of each block carries
//     the block header {"name","size","sha256"} as its app_metadata; an empty
//     block is one batch with no rows.
//   - DoPut's descriptor is the command {"queue","instance"}. A block header
//     comes as the app_metadata of the block's first batch or as a
//     metadata-only message before it; each stored block is answered with a
//     PutResult {"name","status":"stored"|"duplicate"}.
//   - DoGet tickets are {"block": NAME} or {"queue", "group", "follow",
//     "from"}; DoAction bodies are JSON too.
//
// The requests and answers of the actions are the types of this package;
// they import nothing of Plumb's server, so a client links none of it.
package flight

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// Flow-control windows both sides set: a stream may have StreamWindow
// bytes in flight, all streams of a connection together ConnWindow.
const (
	StreamWindow = 8 << 20
	ConnWindow   = 32 << 20
)

// ChunkSize is the most block bytes one record batch carries. It keeps every
// message far below gRPC's default 4 MiB receive limit.
const ChunkSize = 1 << 20

// MaxMessage is the largest message a server takes: a block's chunk
// (ChunkSize) with its framing, an action, a ticket. gRPC reads a message
// whole before a handler can refuse it (it buffers up to a stream's flow-control window meanwhile), so this bounds what any caller,
// with rights or none, makes the server hold per call (it was 64 MiB).
const MaxMessage = 2 << 20

// BlockSchema is the schema of every block stream.
var BlockSchema = arrow.NewSchema([]arrow.Field{
	{Name: "offset", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "data", Type: arrow.BinaryTypes.Binary, Nullable: true},
}, nil)

// IsBlockSchema accepts any schema of (offset int64, data binary), whatever
// its nullability flags, as pyarrow and arrow-go default differently.
func IsBlockSchema(s *arrow.Schema) bool {
	if s.NumFields() != 2 {
		return false
	}
	for i, f := range s.Fields() {
		want := BlockSchema.Field(i)
		if f.Name != want.Name || !arrow.TypeEqual(f.Type, want.Type) {
			return false
		}
	}
	return true
}

// Header starts a block on a stream: its name, size in bytes and SHA-256 in
// hex.
type Header struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// KernelDropped, on upload, is how many packets the capturing kernel
	// dropped while the block was cut (its rings were full): a gap in the
	// capture that no missing block explains.
	KernelDropped int64 `json:"kernel_dropped,omitempty"`
	// Final, on upload, says the block is the last of a finite source
	// (an import's files): nothing follows it in its instance, so what
	// stages hold past its end (a TCP message behind a hole that never
	// fills) is let go with it.
	Final bool `json:"final,omitempty"`
}

// PutCommand is the DoPut descriptor command.
type PutCommand struct {
	Queue    string `json:"queue"`
	Instance string `json:"instance"`
	// Lease stages the blocks as outputs of a worker's leased stage run:
	// stored, but not blocks until the run commits.
	Lease string `json:"lease,omitempty"`
}

// PutResult is the answer to each block of a DoPut.
type PutResult struct {
	Name   string `json:"name"`
	Status string `json:"status"` // "stored", "duplicate", or "staged" for a lease's outputs
}

// Start is where a new consumer group starts reading a queue:
// FromEarliest, FromLatest, or a time (FromTime).
type Start string

// The starts of a consumer group.
const (
	FromEarliest Start = "earliest" // the oldest block kept
	FromLatest   Start = "latest"   // the next block to arrive
)

// FromTime starts a group at a time, as Kafka's offsets for times do:
// it is owed the blocks kept whose event time (the time in their name)
// is at or after t, and every block that arrives after it is made. On
// the wire it is the time in RFC 3339.
func FromTime(t time.Time) Start { return Start(t.UTC().Format(time.RFC3339Nano)) }

// Time is the time of a start at a time; ok is false for FromEarliest,
// FromLatest and anything that is no RFC 3339 time.
func (s Start) Time() (t time.Time, ok bool) {
	t, err := time.Parse(time.RFC3339Nano, string(s))
	return t, err == nil
}

// Valid says what is wrong with a start; nil when it is one.
func (s Start) Valid() error {
	if _, ok := s.Time(); ok || s == FromEarliest || s == FromLatest {
		return nil
	}
	return fmt.Errorf("from %q: want earliest, latest or an RFC 3339 time such as 2025-05-05T00:00:00Z", string(s))
}

// Ticket is a DoGet ticket. Exactly one of Block and Queue is set.
type Ticket struct {
	// Block asks for one block by name.
	Block string `json:"block,omitempty"`

	// Queue asks for a queue's blocks in arrival order. Without Group it is
	// a plain read of what the queue holds (and, with Follow, of what
	// arrives). With Group the blocks are owed to the consumer group until
	// acknowledged with the "ack" action.
	Queue  string `json:"queue,omitempty"`
	Group  string `json:"group,omitempty"`  // the consumer group, made on first use
	Follow bool   `json:"follow,omitempty"` // wait for blocks that arrive, rather than end
	// From is where a new group (or a plain read) starts: FromEarliest,
	// FromLatest or FromTime. A group keeps the start it was created
	// with.
	From Start `json:"from,omitempty"`
	// Visibility is how long a block handed to a group stays reserved
	// before it is handed out again unless acknowledged; the server's
	// --visibility when zero. On the wire it is "visibility" in seconds.
	Visibility time.Duration `json:"-" wire:"visibility,seconds"`
	// Reader names a group read, chosen by the client (ValidateReader):
	// a nack naming it gives back every block the read holds unacked,
	// those it read ahead included, even once the server has finished
	// sending them.
	Reader string `json:"reader,omitempty"`
}

// MaxReader bounds a Reader name.
const MaxReader = 64

// ValidateReader checks a client's name for a read: 1 to MaxReader
// letters, digits, '-' or '_' (a UUID fits).
func ValidateReader(r string) error {
	if r == "" || len(r) > MaxReader {
		return fmt.Errorf("reader %q: want 1 to %d letters, digits, '-' or '_', such as a UUID", r, MaxReader)
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("reader %q: want 1 to %d letters, digits, '-' or '_', such as a UUID", r, MaxReader)
		}
	}
	return nil
}

// ticketWire is a Ticket as JSON: the visibility in seconds, as clients
// in any language write it.
type ticketWire struct {
	ticketFields
	Visibility float64 `json:"visibility,omitempty"`
}

type ticketFields Ticket

// MarshalJSON writes the ticket with its visibility in seconds.
func (t Ticket) MarshalJSON() ([]byte, error) {
	return json.Marshal(ticketWire{ticketFields(t), t.Visibility.Seconds()})
}

// UnmarshalJSON reads a ticket, its visibility in seconds, refusing
// unknown fields as DecodeStrict does.
func (t *Ticket) UnmarshalJSON(b []byte) error {
	var w ticketWire
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	// Checked before the conversion, which would overflow.
	if !(w.Visibility >= 0 && w.Visibility <= maxVisibilitySeconds) {
		return fmt.Errorf("visibility %v s is outside 0..%d", w.Visibility, maxVisibilitySeconds)
	}
	*t = Ticket(w.ticketFields)
	t.Visibility = time.Duration(w.Visibility * float64(time.Second))
	return nil
}

// maxVisibilitySeconds is the longest visibility a ticket may ask for:
// a day.
const maxVisibilitySeconds = 86400

// AckRequest is the body of the "ack" and "nack" actions.
type AckRequest struct {
	Queue  string   `json:"queue"`
	Group  string   `json:"group"`
	Blocks []string `json:"blocks"`
	// Reader, in a nack, also gives back every block the group read of
	// that name (Ticket.Reader) holds unacked.
	Reader string `json:"reader,omitempty"`
}

// DecodeStrict decodes one JSON value and refuses unknown fields and
// trailing data, so a typo in a ticket is an error rather than a silent
// default.
func DecodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after the JSON object")
	}
	return nil
}

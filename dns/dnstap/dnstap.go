// Package dnstap reads dnstap (dnstap.info): the DNS messages a server
// logs itself, as protobuf frames in a Frame Streams file or socket.
//
// Plumb carries dnstap frames in capture blocks: each frame is one
// "packet" of link type LinkType, its time the message's. So dnstap
// takes the path captures take (agent, spool, exactly-once shipping,
// windows, streams) unchanged, and builtin:dns reads such blocks into
// the same records as packets. ToPcap makes such a capture of a Frame
// Streams file, as `plumb import` does.
package dnstap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	framestream "github.com/farsightsec/golang-framestream"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/plumb-dev/plumb/internal/protofields"
	"github.com/plumb-dev/plumb/pcap"
)

// LinkType is the link type of captures whose packets are dnstap frames:
// LINKTYPE_USER0, which tcpdump and Wireshark leave to the user.
const LinkType = layers.LinkType(147)

// ContentType names dnstap frames in Frame Streams.
const ContentType = "protobuf:dnstap.Dnstap"

// MaxFrame bounds one frame read (a DNS message is at most 64 KiB; two of
// them and addresses fit).
const MaxFrame = 256 << 10

// Types names dnstap's message types (dnstap.proto's Message.Type).
var Types = map[uint64]string{1: "AUTH_QUERY", 2: "AUTH_RESPONSE", 3: "RESOLVER_QUERY", 4: "RESOLVER_RESPONSE",
	5: "CLIENT_QUERY", 6: "CLIENT_RESPONSE", 7: "FORWARDER_QUERY", 8: "FORWARDER_RESPONSE", 9: "STUB_QUERY",
	10: "STUB_RESPONSE", 11: "TOOL_QUERY", 12: "TOOL_RESPONSE", 13: "UPDATE_QUERY", 14: "UPDATE_RESPONSE"}

// Protocols names dnstap's socket protocols as the records' transport
// column does (dnstap.proto's SocketProtocol).
var Protocols = map[uint64]string{1: "udp", 2: "tcp", 3: "dot", 4: "doh", 5: "dnscrypt-udp", 6: "dnscrypt-tcp", 7: "doq"}

// Message is what a dnstap frame says of one DNS message exchange.
type Message struct {
	Identity string // the server's name for itself
	Type     uint64 // a key of Types
	Protocol uint64 // a key of Protocols; 0 unknown
	// QueryAddr asked ResponseAddr.
	QueryAddr, ResponseAddr netip.Addr
	QueryPort, ResponsePort uint16
	QueryTime, ResponseTime time.Time
	// QueryMessage and ResponseMessage are the DNS messages' wire bytes
	// (either may be missing); they alias the frame.
	QueryMessage, ResponseMessage []byte
}

// IsResponse says whether the message's type logs a response.
func (m *Message) IsResponse() bool { return m.Type%2 == 0 }

// TypeName is the message's type as dnstap names it.
func (m *Message) TypeName() string {
	if s, ok := Types[m.Type]; ok {
		return s
	}
	return fmt.Sprintf("TYPE%d", m.Type)
}

// Time is when the frame's message was seen: the response's time for a
// response, else the query's.
func (m *Message) Time() time.Time {
	if m.IsResponse() && !m.ResponseTime.IsZero() {
		return m.ResponseTime
	}
	return m.QueryTime
}

// ErrMalformed is wrapped by the errors of frames that do not read.
var ErrMalformed = errors.New("malformed dnstap frame")

// Decode reads a dnstap frame (a Dnstap protobuf of type MESSAGE). It
// reads the wire format itself: the generated types of the Go dnstap
// package predate DoQ and DNSCrypt, which they read as UDP.
func Decode(frame []byte) (Message, error) {
	var m Message
	var msg []byte
	err := fields(frame, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			m.Identity = string(b)
		case num == 14 && typ == protowire.BytesType:
			msg = b
		case num == 15 && typ == protowire.VarintType && v != 1:
			return fmt.Errorf("%w: type %d is not MESSAGE", ErrMalformed, v)
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	if msg == nil {
		return m, fmt.Errorf("%w: no message", ErrMalformed)
	}
	var qSec, rSec uint64
	var qNsec, rNsec uint64
	err = fields(msg, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch num {
		case 1:
			m.Type = v
		case 3:
			m.Protocol = v
		case 4:
			m.QueryAddr, _ = netip.AddrFromSlice(b)
		case 5:
			m.ResponseAddr, _ = netip.AddrFromSlice(b)
		case 6:
			m.QueryPort = uint16(v)
		case 7:
			m.ResponsePort = uint16(v)
		case 8:
			qSec = v
		case 9:
			qNsec = v
		case 10:
			m.QueryMessage = b
		case 12:
			rSec = v
		case 13:
			rNsec = v
		case 14:
			m.ResponseMessage = b
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	if m.Type == 0 {
		return m, fmt.Errorf("%w: a message without a type", ErrMalformed)
	}
	if m.QueryTime, err = stamp("query", qSec, qNsec); err != nil {
		return m, err
	}
	if m.ResponseTime, err = stamp("response", rSec, rNsec); err != nil {
		return m, err
	}
	return m, nil
}

// stamp is a message's time from its seconds and nanoseconds, zero when
// absent. A time a capture cannot hold (pcap keeps 32-bit seconds: 1970
// to 2106), or nanoseconds past a second, is refused: clamped or
// wrapped, it dated rows 1738, 1816 or 2106.
func stamp(what string, sec, nsec uint64) (time.Time, error) {
	if sec == 0 && nsec == 0 {
		return time.Time{}, nil
	}
	if sec == 0 || sec >= 1<<32 || nsec > 999_999_999 {
		return time.Time{}, fmt.Errorf("%w: %s time %d s %d ns is outside what a capture holds (1970 to 2106, under a second of nanoseconds)", ErrMalformed, what, sec, nsec)
	}
	return time.Unix(int64(sec), int64(nsec)).UTC(), nil
}

// fields walks a message's fields (protofields.Walk), its wire errors
// as ErrMalformed.
func fields(b []byte, fn func(protowire.Number, protowire.Type, uint64, []byte) error) error {
	err := protofields.Walk(b, fn)
	if errors.Is(err, protofields.ErrWire) {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return err
}

// ReadFile calls fn with each frame of a Frame Streams file of dnstap
// (as fstrm_capture, dnstap-ldns -w or a server's file sink write it).
// The frame is valid during the call.
func ReadFile(r io.Reader, fn func(frame []byte) error) error {
	fr, err := framestream.NewReader(r, &framestream.ReaderOptions{ContentTypes: [][]byte{[]byte(ContentType)}})
	if err != nil {
		return fmt.Errorf("not a Frame Streams file of dnstap: %w", err)
	}
	buf := make([]byte, MaxFrame)
	for {
		n, err := fr.ReadFrame(buf)
		if err == io.EOF || errors.Is(err, framestream.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(buf[:n]); err != nil {
			return err
		}
	}
}

// Capture writes dnstap frames as a capture of LinkType, each at its
// message's time (or at now, for a frame that does not read: builtin:dns
// makes it a malformed row).
type Capture struct {
	w *pcap.Writer
}

// NewCapture starts a capture of dnstap frames on w.
func NewCapture(w io.Writer) (*Capture, error) {
	pw, err := pcap.NewWriter(w, LinkType, MaxFrame, true)
	if err != nil {
		return nil, err
	}
	return &Capture{w: pw}, nil
}

// Frame adds a frame, seen at now if its message has no time.
func (c *Capture) Frame(frame []byte, now time.Time) error {
	t := now
	if m, err := Decode(frame); err == nil && !m.Time().IsZero() {
		t = m.Time()
	}
	return c.w.WritePacket(gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(frame), Length: len(frame)}, frame)
}

// Flush writes what is buffered.
func (c *Capture) Flush() error { return c.w.Flush() }

// ToPcap writes the frames of a Frame Streams file as a capture.
func ToPcap(r io.Reader, w io.Writer) error {
	c, err := NewCapture(w)
	if err != nil {
		return err
	}
	now := time.Now()
	if err := ReadFile(r, func(frame []byte) error { return c.Frame(frame, now) }); err != nil {
		return err
	}
	return c.Flush()
}

// IsFrameStream says whether a file's first bytes start a Frame Streams
// file: an escape (four zero bytes), a control frame's length, START.
func IsFrameStream(head []byte) bool {
	return len(head) >= 12 && string(head[:4]) == "\x00\x00\x00\x00" && string(head[8:12]) == "\x00\x00\x00\x02"
}

// OpenCapture returns r as a capture: r itself when it is not a Frame
// Streams file of dnstap, else its frames as a capture of LinkType,
// made as it is read. Closing the result closes r.
func OpenCapture(r io.ReadCloser) io.ReadCloser {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(12)
	if !IsFrameStream(head) {
		return readCloser{br, r.Close}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(ToPcap(br, pw)) }()
	return readCloser{pr, func() error {
		pr.Close() // ends the conversion, whose writes now fail
		return r.Close()
	}}
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// Encode writes m as a dnstap frame, as servers send it (for tests and
// benchmarks that stand in for a server).
func Encode(m *Message) []byte {
	var b []byte
	varint := func(num protowire.Number, v uint64) {
		b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	bytes := func(num protowire.Number, v []byte) {
		b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	stamp := func(sec, nsec protowire.Number, t time.Time) {
		if !t.IsZero() {
			varint(sec, uint64(t.Unix()))
			b = protowire.AppendFixed32(protowire.AppendTag(b, nsec, protowire.Fixed32Type), uint32(t.Nanosecond()))
		}
	}
	varint(1, m.Type)
	family := uint64(2)
	if m.QueryAddr.Is4() {
		family = 1
	}
	varint(2, family)
	if m.Protocol != 0 {
		varint(3, m.Protocol)
	}
	if m.QueryAddr.IsValid() {
		bytes(4, m.QueryAddr.AsSlice())
	}
	if m.ResponseAddr.IsValid() {
		bytes(5, m.ResponseAddr.AsSlice())
	}
	varint(6, uint64(m.QueryPort))
	varint(7, uint64(m.ResponsePort))
	stamp(8, 9, m.QueryTime)
	if m.QueryMessage != nil {
		bytes(10, m.QueryMessage)
	}
	stamp(12, 13, m.ResponseTime)
	if m.ResponseMessage != nil {
		bytes(14, m.ResponseMessage)
	}
	msg := b
	b = nil
	if m.Identity != "" {
		bytes(1, []byte(m.Identity))
	}
	bytes(14, msg)
	varint(15, 1)
	return b
}

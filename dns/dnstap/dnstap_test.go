package dnstap

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	framestream "github.com/farsightsec/golang-framestream"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/plumb-dev/plumb/pcap"
)

// frame builds a dnstap frame as servers send it.
func frame(typ, proto uint64, q, r netip.Addr, qport, rport uint16, at time.Time, query, response []byte) []byte {
	m := Message{Identity: "ns1.example", Type: typ, Protocol: proto, QueryAddr: q, ResponseAddr: r, QueryPort: qport, ResponsePort: rport,
		QueryMessage: query, ResponseMessage: response}
	if query != nil {
		m.QueryTime = at
	}
	if response != nil {
		m.ResponseTime = at
	}
	return Encode(&m)
}

var (
	client = netip.MustParseAddr("2001:db8::7")
	server = netip.MustParseAddr("2001:db8::53")
	at     = time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
)

// TestDecode reads every field rows carry, for a DoQ query (protocol 7,
// which the Go dnstap package's generated types read as UDP) and a
// response, and refuses frames that are not dnstap messages, saying why.
func TestDecode(t *testing.T) {
	m, err := Decode(frame(5, 7, client, server, 40000, 853, at, []byte("query"), nil))
	if err != nil {
		t.Fatal(err)
	}
	if m.Identity != "ns1.example" || m.TypeName() != "CLIENT_QUERY" || m.IsResponse() || Protocols[m.Protocol] != "doq" ||
		m.QueryAddr != client || m.ResponseAddr != server || m.QueryPort != 40000 || m.ResponsePort != 853 ||
		!m.Time().Equal(at) || string(m.QueryMessage) != "query" || m.ResponseMessage != nil {
		t.Fatalf("%+v", m)
	}
	m, err = Decode(frame(2, 1, client, server, 40000, 53, at, nil, []byte("response")))
	if err != nil || !m.IsResponse() || m.TypeName() != "AUTH_RESPONSE" || string(m.ResponseMessage) != "response" || !m.Time().Equal(at) {
		t.Fatalf("%+v %v", m, err)
	}
	for name, b := range map[string][]byte{
		"empty":          {},
		"truncated":      frame(5, 1, client, server, 1, 53, at, []byte("q"), nil)[:20],
		"not a message":  protowire.AppendVarint(protowire.AppendTag(nil, 15, protowire.VarintType), 2),
		"no type":        protowire.AppendBytes(protowire.AppendTag(nil, 14, protowire.BytesType), nil),
		"bad field wire": {0xff, 0xff, 0xff},
	} {
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTimesOutOfRangeRefused: a message time a capture cannot hold
// (past 2106 in 32-bit seconds, or a second or more of nanoseconds) is
// refused as malformed instead of wrapped into rows dated 1738 or 2106;
// a frame so refused goes into a capture at the time it was seen.
func TestTimesOutOfRangeRefused(t *testing.T) {
	withTime := func(sec uint64, nsec uint32) []byte {
		var msg []byte
		msg = protowire.AppendVarint(protowire.AppendTag(msg, 1, protowire.VarintType), 5)
		msg = protowire.AppendVarint(protowire.AppendTag(msg, 8, protowire.VarintType), sec)
		msg = protowire.AppendFixed32(protowire.AppendTag(msg, 9, protowire.Fixed32Type), nsec)
		msg = protowire.AppendBytes(protowire.AppendTag(msg, 10, protowire.BytesType), []byte("query"))
		b := protowire.AppendBytes(protowire.AppendTag(nil, 14, protowire.BytesType), msg)
		return protowire.AppendVarint(protowire.AppendTag(b, 15, protowire.VarintType), 1)
	}
	if m, err := Decode(withTime(uint64(at.Unix()), 5)); err != nil || !m.Time().Equal(time.Unix(at.Unix(), 5)) {
		t.Fatalf("a good time: %v %v", m.Time(), err)
	}
	if m, err := Decode(withTime(1<<32-1, 999_999_999)); err != nil || m.Time().Year() != 2106 {
		t.Fatalf("the last second a capture holds: %v %v", m.Time(), err)
	}
	for _, c := range []struct {
		sec  uint64
		nsec uint32
	}{{1 << 32, 0}, {1 << 40, 0}, {1<<64 - 1, 0}, {uint64(at.Unix()), 1_000_000_000}, {0, 7}} {
		_, err := Decode(withTime(c.sec, c.nsec))
		if !errors.Is(err, ErrMalformed) || !bytes.Contains([]byte(err.Error()), []byte("outside what a capture holds")) {
			t.Errorf("time %d s %d ns: %v; want it refused as malformed", c.sec, c.nsec, err)
		}
	}
	var b bytes.Buffer
	c, err := NewCapture(&b)
	if err != nil {
		t.Fatal(err)
	}
	seen := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	if err := c.Frame(withTime(1<<40, 0), seen); err != nil {
		t.Fatal(err)
	}
	c.Flush()
	r, closer, err := pcap.NewReader(&b)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if _, ci, err := r.Next(); err != nil || !ci.Timestamp.Equal(seen) {
		t.Errorf("the refused frame is at %v (%v); want the time it was seen, %v", ci.Timestamp, err, seen)
	}
}

// TestFrameStreamFileAsCapture: a Frame Streams file of dnstap, as a
// server's file sink writes it, reads as a capture of LinkType whose
// packets are its frames at their messages' times; a capture passes
// through OpenCapture unchanged.
func TestFrameStreamFileAsCapture(t *testing.T) {
	var file bytes.Buffer
	w, err := framestream.NewWriter(&file, &framestream.WriterOptions{ContentTypes: [][]byte{[]byte(ContentType)}})
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for i := range 5 {
		f := frame(uint64(5+i%2), 1, client, server, uint16(40000+i), 53, at.Add(time.Duration(i)*time.Second), []byte{byte(i)}, []byte{byte(i)})
		frames = append(frames, f)
		if _, err := w.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if !IsFrameStream(file.Bytes()) {
		t.Fatal("a Frame Streams file is not recognised")
	}
	rc := OpenCapture(io.NopCloser(bytes.NewReader(file.Bytes())))
	defer rc.Close()
	r, closer, err := pcap.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if r.LinkType != LinkType {
		t.Fatalf("link type %v", r.LinkType)
	}
	for i := 0; ; i++ {
		data, ci, err := r.Next()
		if err == io.EOF {
			if i != len(frames) {
				t.Fatalf("%d packets for %d frames", i, len(frames))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, frames[i]) || !ci.Timestamp.Equal(at.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("packet %d at %v differs from its frame", i, ci.Timestamp)
		}
	}
	var capture bytes.Buffer
	pw, _ := pcap.NewWriter(&capture, 1, 65535, false)
	pw.Flush()
	got, _ := io.ReadAll(OpenCapture(io.NopCloser(bytes.NewReader(capture.Bytes()))))
	if !bytes.Equal(got, capture.Bytes()) || IsFrameStream(capture.Bytes()) {
		t.Fatal("a capture did not pass through unchanged")
	}
}

// FuzzDecode: any frame is read or refused as malformed, never a panic.
func FuzzDecode(f *testing.F) {
	f.Add(frame(5, 7, client, server, 40000, 853, at, []byte("query"), nil))
	f.Add(frame(2, 1, netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.53"), 1, 53, at, nil, []byte("r")))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("an error not marked malformed: %v", err)
		}
		_ = m.TypeName()
		_ = m.Time()
	})
}

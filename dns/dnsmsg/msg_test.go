package dnsmsg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/netpkt"
)

// build serialises a message with gopacket, an independent encoder.
func build(t testing.TB, d *layers.DNS) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := d.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestParse(t *testing.T) {
	q := build(t, &layers.DNS{
		ID: 0xbeef, RD: true, OpCode: layers.DNSOpCodeQuery,
		Questions: []layers.DNSQuestion{{Name: []byte("WWW.Example.COM"), Type: layers.DNSTypeAAAA, Class: layers.DNSClassIN}},
		Additionals: []layers.DNSResourceRecord{{Type: layers.DNSTypeOPT, Class: 1232, TTL: 0x01008000,
			OPT: []layers.DNSOPT{{Code: layers.DNSOptionCodeNSID}}}},
	})
	m, err := Parse(q)
	if err != nil {
		t.Fatal(err)
	}
	want := Message{ID: 0xbeef, RD: true, QDCount: 1, ARCount: 1, HasQuestion: true, QName: "www.example.com", QNameRaw: "WWW.Example.COM", QType: 28, QClass: 1,
		EDNS: true, UDPSize: 1232, DO: true, EDNSOptions: true, Rcode: 1 << 4, Options: []Option{{Code: 3}}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got  %+v\nwant %+v", m, want)
	}

	// A response whose answer points back at the question's name.
	r := build(t, &layers.DNS{
		ID: 7, QR: true, AA: true, ResponseCode: layers.DNSResponseCodeNXDomain,
		Questions: []layers.DNSQuestion{{Name: []byte("a.b"), Type: layers.DNSTypeA, Class: layers.DNSClassIN}},
		Authorities: []layers.DNSResourceRecord{{Name: []byte("b"), Type: layers.DNSTypeSOA, Class: layers.DNSClassIN,
			SOA: layers.DNSSOA{MName: []byte("ns.b"), RName: []byte("h.b")}}},
	})
	m, err = Parse(r)
	if err != nil || !m.QR || !m.AA || m.Rcode != 3 || m.NSCount != 1 || m.QName != "a.b" || m.EDNS {
		t.Errorf("response = %+v, %v", m, err)
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct {
		wire []byte
		want string
		err  string
	}{
		{[]byte{0}, ".", ""},
		{[]byte{3, 'A', '.', 'b', 0}, `a\.b`, ""},
		{[]byte{2, 0, ' ', 1, '\\', 0}, `\000\032.\\`, ""},
		{[]byte{0xc0, 12}, "", "compression pointers loop"}, // points at itself
		{[]byte{5, 'a'}, "", "runs past the end"},
		{[]byte{0x80}, "", "label type 0x80"},
	} {
		msg := make([]byte, HeaderLen, HeaderLen+len(c.wire)+4)
		binary.BigEndian.PutUint16(msg[4:], 1) // one question
		msg = append(append(msg, c.wire...), 0, 1, 0, 1)
		m, err := Parse(msg)
		switch {
		case c.err == "" && (err != nil || m.QName != c.want):
			t.Errorf("%q: %q, %v; want %q", c.wire, m.QName, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrMalformed)):
			t.Errorf("%q: error %v; want %q", c.wire, err, c.err)
		}
	}
	// 255 bytes of name is the limit.
	long := bytes.Repeat([]byte{63}, 1)
	for range 4 {
		long = append(long, bytes.Repeat([]byte{'x'}, 63)...)
		long = append(long, 63)
	}
	msg := append(make([]byte, HeaderLen), long...)
	binary.BigEndian.PutUint16(msg[4:], 1)
	if _, err := Parse(msg); err == nil || !strings.Contains(err.Error(), "longer than 255") {
		t.Errorf("over-long name: %v", err)
	}
	// A message under 12 bytes is malformed, and keeps what its bytes
	// say (issue 26: its id and flags came out 0).
	if m, err := Parse([]byte{1, 2, 0x83}); err == nil || m.ID != 0x0102 || !m.QR || !m.TC || !m.RD || m.Opcode != 0 {
		t.Errorf("short message: %+v %v", m, err)
	}
}

// FuzzParse never panics, a Parser reused from another message reads
// the same, names remembered read as names read again, and where gopacket's decoder also reads a message whole, both
// agree on its header and first question.
func FuzzParse(f *testing.F) {
	f.Add(build(f, &layers.DNS{ID: 1, Questions: []layers.DNSQuestion{{Name: []byte("example.com"), Type: 1, Class: 1}}}))
	f.Add(build(f, &layers.DNS{ID: 2, QR: true, Questions: []layers.DNSQuestion{{Name: []byte("a"), Type: 1, Class: 1}},
		Answers: []layers.DNSResourceRecord{{Name: []byte("a"), Type: 1, Class: 1, IP: []byte{1, 2, 3, 4}}}}))
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1})
	prev := build(f, &layers.DNS{ID: 3, QR: true, Questions: []layers.DNSQuestion{{Name: []byte("Prev.Example"), Type: 1, Class: 1}},
		Answers: []layers.DNSResourceRecord{{Name: []byte("prev.example"), Type: 5, Class: 1, CNAME: []byte("other.example")}}})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		// A Parser that read another message first reads b the same.
		var p Parser
		p.Parse(prev)
		if again, err2 := p.Parse(b); !reflect.DeepEqual(again, m) || (err == nil) != (err2 == nil) {
			t.Fatalf("a reused Parser read %+v, %v; a new one %+v, %v", again, err2, m, err)
		}
		// Names copied from those remembered read as names read label
		// by label, errors and all.
		slow := Parser{uncached: true}
		if got, serr := slow.Parse(b); !reflect.DeepEqual(got, m) || fmt.Sprint(serr) != fmt.Sprint(err) {
			t.Fatalf("read label by label: %+v, %v; with names remembered: %+v, %v", got, serr, m, err)
		}
		// Check agrees with Parse, and a Parser skipping sections reads
		// the rest as Parse does and none of the skipped.
		if cerr := Check(b); (cerr == nil) != (err == nil) {
			t.Fatalf("Check says %v; Parse %v", cerr, err)
		}
		// A Parser that checked or read another message first checks b
		// as a new one does.
		p.Check(prev)
		if cerr, fresh := p.Check(b), Check(b); fmt.Sprint(cerr) != fmt.Sprint(fresh) {
			t.Fatalf("a reused Parser's Check says %v; a new one's %v", cerr, fresh)
		}
		for _, skip := range []Sections{Answer, Authority | Additional, AllSections} {
			sp := Parser{Skip: skip}
			got, serr := sp.Parse(b)
			// Skipped names that end at a name remembered end as those
			// walked label by label do, errors and all.
			slowSkip := Parser{Skip: skip, uncached: true}
			if sgot, sserr := slowSkip.Parse(b); !reflect.DeepEqual(sgot, got) || fmt.Sprint(sserr) != fmt.Sprint(serr) {
				t.Fatalf("skipping %b label by label: %+v, %v; with names remembered: %+v, %v", skip, sgot, sserr, got, serr)
			}
			want := m
			if skip&Answer != 0 {
				want.Answer = nil
			}
			if skip&Authority != 0 {
				want.Authority = nil
			}
			if skip&Additional != 0 {
				want.Additional = nil
			}
			if (serr == nil) != (err == nil) || !sameRRs(got.Answer, want.Answer) || !sameRRs(got.Authority, want.Authority) ||
				!sameRRs(got.Additional, want.Additional) || got.QName != want.QName || got.EDNS != want.EDNS || got.UDPSize != want.UDPSize ||
				!reflect.DeepEqual(got.ECS, want.ECS) || got.Rcode != want.Rcode {
				t.Fatalf("skipping %b: %+v, %v; whole %+v, %v", skip, got, serr, m, err)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		var d layers.DNS
		if d.DecodeFromBytes(b, gopacket.NilDecodeFeedback) != nil {
			return
		}
		if d.ID != m.ID || d.QR != m.QR || uint8(d.OpCode) != m.Opcode || d.QDCount != m.QDCount || d.ANCount != m.ANCount {
			t.Fatalf("header differs: gopacket %+v, ours %+v", d, m)
		}
		if len(d.Questions) > 0 && !strings.Contains(m.QName, "\\") && m.QName != "." &&
			!strings.EqualFold(string(d.Questions[0].Name), m.QName) {
			t.Fatalf("qname: gopacket %q, ours %q", d.Questions[0].Name, m.QName)
		}
	})
}

// sameRRs compares sections, nil and empty alike.
func sameRRs(a, b []RR) bool { return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b) }

// TestParserReuse: a Parser's messages stay as read when it reads the
// next, and the sections, which share one array (and the messages, one
// slab), do not overwrite each other when a caller appends to one.
func TestParserReuse(t *testing.T) {
	resp := func(name string, ip byte) []byte {
		return build(t, &layers.DNS{ID: 1, QR: true, Questions: []layers.DNSQuestion{{Name: []byte(name), Type: 1, Class: 1}},
			Answers:     []layers.DNSResourceRecord{{Name: []byte(name), Type: 1, Class: 1, TTL: 60, IP: []byte{192, 0, 2, ip}}},
			Authorities: []layers.DNSResourceRecord{{Name: []byte("Example"), Type: 2, Class: 1, TTL: 90, NS: []byte("ns.example")}}})
	}
	var p Parser
	first, err := p.Parse(resp("A.example", 1))
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Parse(resp("b.example", 2))
	if err != nil {
		t.Fatal(err)
	}
	want := Message{ID: 1, QR: true, QDCount: 1, ANCount: 1, NSCount: 1, HasQuestion: true, QName: "a.example", QNameRaw: "A.example",
		QType: 1, QClass: 1, Answer: []RR{{Name: "a.example", Type: 1, Class: 1, TTL: 60, RData: "192.0.2.1"}},
		Authority: []RR{{Name: "example", Type: 2, Class: 1, TTL: 90, RData: "ns.example."}}}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("after a second message:\n got %+v\nwant %+v", first, want)
	}
	_ = append(first.Answer, RR{Name: "appended"})
	if first.Authority[0].Name != "example" {
		t.Errorf("appending to the answers overwrote the authority: %+v", first.Authority)
	}
	// The messages' records share the Parser's slab.
	_ = append(first.Authority, RR{Name: "appended"})
	if second.Answer[0].Name != "b.example" {
		t.Errorf("appending to one message's records overwrote the next message's: %+v", second.Answer)
	}
}

// TestRecordCountsDoNotAllocate: Parse makes room for a message's records
// before reading them, bounded by what its bytes can hold (minRR, 11
// bytes a record), not by its header's counts. A 42-byte message
// claiming 65,535 records in each section would otherwise take 7.8 MB.
func TestRecordCountsDoNotAllocate(t *testing.T) {
	msg := []byte{0, 1, 0x81, 0x80, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	for range 2 {
		msg = append(msg, 0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1) // the root, A 192.0.2.1
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 100
	for range runs {
		m, err := Parse(msg)
		if err == nil || len(m.Answer) != 2 {
			t.Fatalf("%d answers, %v; want the 2 there are and an error for the rest", len(m.Answer), err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 256<<10 {
		t.Errorf("a %d-byte message claiming 196,605 records allocated %d bytes", len(msg), per)
	}
}

// TestStamp: an RRSIG's times print as time.Time formats them, over the
// whole 32-bit range they take.
func TestStamp(t *testing.T) {
	rng := rand.New(rand.NewPCG(4034, 1))
	for i := range 200000 {
		secs := uint64(rng.Uint32())
		switch i {
		case 0, 1, 2:
			secs = []uint64{0, 1<<32 - 1, 951782400}[i] // the ends; 2000-02-29
		}
		want := time.Unix(int64(secs), 0).UTC().Format("20060102150405")
		if got := string(appendStamp(nil, secs)); got != want {
			t.Fatalf("%d: %s; want %s", secs, got, want)
		}
	}
}

// TestRememberedNamesOnRealCaptures reads every UDP and TCP payload of
// the captures in testdata as a message, with names remembered and label
// by label: both read every one the same, errors and all.
func TestRememberedNamesOnRealCaptures(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	if len(files) < 20 {
		t.Fatalf("%d captures in testdata/pcaps", len(files))
	}
	var fast, slow Parser
	slow.uncached = true
	fastSkip, slowSkip := Parser{Skip: AllSections}, Parser{Skip: AllSections, uncached: true}
	read, hits := 0, 0
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		r, closer, err := pcap.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var p netpkt.Packet
		for {
			frame, _, err := r.Next()
			if err != nil {
				break
			}
			if netpkt.Decode(r.LinkType, frame, &p) != nil || len(p.Payload) < HeaderLen {
				continue
			}
			b := p.Payload
			if p.Proto == netpkt.ProtoTCP && len(b) >= 2+HeaderLen && int(b[0])<<8|int(b[1]) == len(b)-2 {
				b = b[2:]
			}
			m, err := fast.Parse(b)
			hits += len(fast.names.at)
			want, werr := slow.Parse(b)
			if !reflect.DeepEqual(m, want) || fmt.Sprint(err) != fmt.Sprint(werr) {
				t.Fatalf("%s: remembered names read %+v, %v; label by label %+v, %v", file, m, err, want, werr)
			}
			m, err = fastSkip.Parse(b)
			want, werr = slowSkip.Parse(b)
			if !reflect.DeepEqual(m, want) || fmt.Sprint(err) != fmt.Sprint(werr) {
				t.Fatalf("%s: skipping sections, remembered names read %+v, %v; label by label %+v, %v", file, m, err, want, werr)
			}
			read++
		}
		closer.Close()
		f.Close()
	}
	if read < 1000 || hits == 0 {
		t.Fatalf("read %d payloads, %d names remembered", read, hits)
	}
	t.Logf("%d payloads of %d captures", read, len(files))
}

package pdnspb

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/plumb-dev/plumb/dns/dnstap"
)

// encode writes a PBDNSMessage as dnsdist does, field by field.
func encode(typ uint64, resp bool) []byte {
	var b []byte
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	bytes := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	b = varint(b, 1, typ)
	b = bytes(b, 2, []byte("0123456789abcdef"))
	b = bytes(b, 3, []byte("lb1"))
	b = varint(b, 4, 1)
	b = varint(b, 5, 2) // TCP
	b = bytes(b, 6, netip.MustParseAddr("192.0.2.7").AsSlice())
	b = bytes(b, 7, netip.MustParseAddr("198.51.100.53").AsSlice())
	b = varint(b, 8, 40)
	b = varint(b, 9, 1765101600)
	b = varint(b, 10, 250000)
	b = varint(b, 11, 0xbeef)
	var q []byte
	q = bytes(q, 1, []byte("www.example.com."))
	q = varint(q, 2, 1)
	q = varint(q, 3, 1)
	b = bytes(b, 12, q)
	if resp {
		var r, rr []byte
		r = varint(r, 1, 3) // NXDOMAIN, with a record all the same
		rr = bytes(rr, 1, []byte("www.example.com."))
		rr = varint(rr, 2, 1)
		rr = varint(rr, 3, 1)
		rr = varint(rr, 4, 300)
		rr = bytes(rr, 5, []byte{192, 0, 2, 80})
		r = bytes(r, 2, rr)
		r = varint(r, 5, 1765101599)
		r = varint(r, 6, 900000)
		b = bytes(b, 13, r)
	}
	b = varint(b, 20, 53001)
	b = varint(b, 21, 53)
	return b
}

// TestFrame: a dnsdist query and response become the dnstap frames of a
// CLIENT_QUERY and a CLIENT_RESPONSE, with their addresses, ports,
// transport and identity, and DNS messages rebuilt from their parts.
func TestFrame(t *testing.T) {
	for _, resp := range []bool{false, true} {
		typ := uint64(Query)
		if resp {
			typ = Response
		}
		frame, err := Frame(encode(typ, resp))
		if err != nil {
			t.Fatal(err)
		}
		d, err := dnstap.Decode(frame)
		if err != nil {
			t.Fatal(err)
		}
		wire := d.QueryMessage
		want := "CLIENT_QUERY"
		if resp {
			wire, want = d.ResponseMessage, "CLIENT_RESPONSE"
			if !d.QueryTime.Equal(time.Unix(1765101599, 900000000)) {
				t.Errorf("the response's query time %v", d.QueryTime)
			}
		}
		if d.TypeName() != want || d.Identity != "lb1" || dnstap.Protocols[d.Protocol] != "tcp" ||
			d.QueryAddr.String() != "192.0.2.7" || d.ResponseAddr.String() != "198.51.100.53" || d.QueryPort != 53001 || d.ResponsePort != 53 ||
			!d.Time().Equal(time.Unix(1765101600, 250000000)) {
			t.Errorf("frame: %+v", d)
		}
		var p dnsmessage.Parser
		h, err := p.Start(wire)
		if err != nil {
			t.Fatal(err)
		}
		q, err := p.Question()
		if err != nil || q.Name.String() != "www.example.com." || q.Type != dnsmessage.TypeA || h.ID != 0xbeef || h.Response != resp {
			t.Errorf("message: %+v %+v %v", h, q, err)
		}
		if resp {
			p.SkipAllQuestions()
			a, err := p.AllAnswers()
			if h.RCode != dnsmessage.RCodeNameError || err != nil || len(a) != 1 || a[0].Body.(*dnsmessage.AResource).A != [4]byte{192, 0, 2, 80} {
				t.Errorf("response: rcode %v, answers %+v %v", h.RCode, a, err)
			}
		}
	}
}

// TestMalformed: what does not read is refused with ErrMalformed, not a
// panic.
func TestMalformed(t *testing.T) {
	for _, b := range [][]byte{{0xff}, encode(9, false), protowire.AppendTag(nil, 12, protowire.BytesType)} {
		if _, err := Frame(b); err == nil {
			t.Errorf("%x read", b)
		}
	}
}

func FuzzFrame(f *testing.F) {
	f.Add(encode(Query, false))
	f.Add(encode(Response, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		frame, err := Frame(b)
		if err != nil {
			return
		}
		if _, err := dnstap.Decode(frame); err != nil {
			t.Fatalf("a frame made of %x does not read: %v", b, err)
		}
	})
}

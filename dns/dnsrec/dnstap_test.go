package dnsrec

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/dns/dnstap"
)

// TestDnstapRows: frames of a dnstap capture become rows like packets':
// a query from the querier, a response from the responder (whatever the
// ports: DoH is on 443), the transport the frame names (DoQ, DoH...), the
// message type and identity, and the message's own time; a frame that
// does not read or carries no message is a malformed row saying why.
func TestDnstapRows(t *testing.T) {
	client, server := netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("192.0.2.53")
	at := time.Date(2026, 12, 1, 10, 0, 0, 5, time.UTC)
	q := build(t, &layers.DNS{ID: 7, RD: true, Questions: []layers.DNSQuestion{{Name: []byte("Example.com"), Type: layers.DNSTypeA, Class: layers.DNSClassIN}}})
	r := build(t, &layers.DNS{ID: 7, QR: true, Questions: []layers.DNSQuestion{{Name: []byte("example.com"), Type: layers.DNSTypeA, Class: layers.DNSClassIN}},
		Answers: []layers.DNSResourceRecord{{Name: []byte("example.com"), Type: layers.DNSTypeA, Class: layers.DNSClassIN, TTL: 60, IP: []byte{192, 0, 2, 1}}}})
	frames := [][]byte{
		dnstap.Encode(&dnstap.Message{Identity: "r1", Type: 5, Protocol: 7, QueryAddr: client, ResponseAddr: server, QueryPort: 40000, ResponsePort: 853, QueryTime: at, QueryMessage: q}),
		dnstap.Encode(&dnstap.Message{Identity: "r1", Type: 6, Protocol: 4, QueryAddr: client, ResponseAddr: server, QueryPort: 40000, ResponsePort: 443, QueryTime: at, ResponseTime: at.Add(time.Millisecond), ResponseMessage: r}),
		dnstap.Encode(&dnstap.Message{Identity: "r1", Type: 3, Protocol: 1, QueryAddr: client, ResponseAddr: server, QueryTime: at}),
		{0xff, 0xff},
	}
	var rows []Record
	x := NewExtractor(dnstap.LinkType, nil, func(rec *Record) { rows = append(rows, *rec) })
	for _, f := range frames {
		x.Packet(time.Unix(1, 0), f)
	}
	x.Flush()
	if len(rows) != 4 {
		t.Fatalf("%d rows for 4 frames", len(rows))
	}
	want := []struct {
		src, dst   netip.Addr
		sport      uint16
		transport  string
		typ        string
		qr         bool
		t          time.Time
		err        string
		answerData string
	}{
		{client, server, 40000, "doq", "CLIENT_QUERY", false, at, "", ""},
		{server, client, 443, "doh", "CLIENT_RESPONSE", true, at.Add(time.Millisecond), "", "192.0.2.1"},
		{client, server, 0, "udp", "RESOLVER_QUERY", false, at, "carries no DNS message", ""},
		{netip.Addr{}, netip.Addr{}, 0, "udp", "", false, time.Unix(1, 0), "malformed dnstap frame", ""},
	}
	for i, w := range want {
		g := rows[i]
		if g.Src != w.src || g.Dst != w.dst || g.SrcPort != w.sport || Transports[g.TransportIndex()] != w.transport || g.DnstapType != w.typ ||
			g.Msg.QR != w.qr || !g.Time.Equal(w.t) {
			t.Errorf("row %d: %v:%d > %v, %s, %q, qr %v, %v; want %+v", i, g.Src, g.SrcPort, g.Dst, Transports[g.TransportIndex()], g.DnstapType, g.Msg.QR, g.Time, w)
		}
		if (w.err == "") != (g.Err == nil) || (g.Err != nil && !strings.Contains(g.Err.Error(), w.err)) {
			t.Errorf("row %d: error %v, want %q", i, g.Err, w.err)
		}
		if w.err == "" && (g.Msg.QName != "example.com" || g.DnstapIdentity != "r1") {
			t.Errorf("row %d: %q from %q", i, g.Msg.QName, g.DnstapIdentity)
		}
		if w.answerData != "" && (len(g.Msg.Answer) != 1 || g.Msg.Answer[0].RData != w.answerData) {
			t.Errorf("row %d: answers %+v", i, g.Msg.Answer)
		}
	}
}

// build serialises a DNS message with gopacket, an independent encoder.
func build(t *testing.T, d *layers.DNS) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := d.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

package rssac

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

func TestBinsAndDocuments(t *testing.T) {
	d := NewDay()
	v4 := netip.MustParseAddr("192.0.2.1")
	v6 := netip.MustParseAddr("2001:db8:0:1::5")
	for _, size := range []int{15, 16, 287, 288, 1000} {
		d.Add(Message{Src: v4, Size: size})
	}
	for _, size := range []int{4095, 4096, 9000} {
		d.Add(Message{Src: v6, IPv6: true, TCP: true, Response: true, Size: size, Rcode: 16})
	}
	d.Add(Message{Src: netip.MustParseAddr("2001:db8:0:1::6"), IPv6: true, Size: 40})
	var b bytes.Buffer
	if err := d.Write(&b, "x.example", time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"version: rssac002v4\nservice: x.example\nstart-period: 2025-05-05T00:00:00Z\nmetric: traffic-volume\n",
		"dns-udp-queries-received-ipv4: 5\n", "dns-udp-queries-received-ipv6: 1\n", "dns-tcp-responses-sent-ipv6: 3\n",
		"udp-request-sizes:\n  0-15: 1\n  16-31: 1\n  32-47: 1\n  272-287: 1\n  288-: 2\n",
		"udp-response-sizes: {}\n",
		"tcp-response-sizes:\n  4080-4095: 1\n  4096-: 2\n",
		"metric: rcode-volume\n16: 3\n",
		"num-sources-ipv4: 1\nnum-sources-ipv6: 1\nnum-sources-ipv6-aggregate: 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestArrowAndCaptureAgree: the metrics from dns.arrow records equal those
// from the capture they came from, and other days are left out.
func TestArrowAndCaptureAgree(t *testing.T) {
	var capture bytes.Buffer
	w, _ := pcap.NewWriter(&capture, layers.LinkTypeEthernet, 65535, false)
	start := time.Date(2025, 5, 5, 23, 58, 0, 0, time.UTC) // spans midnight
	if _, err := synth.Generate(context.Background(), w, synth.Config{Seed: 6, Start: start, Duration: 4 * time.Minute, Rate: 50, TCP: 0.3, IPv6: 0.5}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	r, closer, _ := pcap.NewReader(bytes.NewReader(capture.Bytes()))
	var records bytes.Buffer
	aw, _ := dnsrec.NewWriter(&records, "lax", 1)
	x := dnsrec.NewExtractor(r.LinkType, nil, func(rec *dnsrec.Record) { aw.Add(rec) })
	for {
		data, ci, err := r.Next()
		if err != nil {
			break
		}
		x.Packet(ci.Timestamp, data)
	}
	x.Flush()
	aw.Close()
	closer.Close()

	render := func(data []byte, day time.Time) string {
		d := NewDay()
		if err := d.AddFile(data, UTCDay(day)); err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		d.Write(&b, "x", day)
		return b.String()
	}
	for _, day := range []time.Time{start, start.Add(24 * time.Hour)} {
		fromCapture, fromArrow := render(capture.Bytes(), day), render(records.Bytes(), day)
		if fromCapture != fromArrow {
			t.Errorf("%s: capture and dns.arrow differ:\n%s\n---\n%s", day.Format(time.DateOnly), fromCapture, fromArrow)
		}
		if !strings.Contains(fromCapture, "dns-udp-queries-received-ipv4: ") || strings.Contains(fromCapture, "dns-udp-queries-received-ipv4: 0\n") {
			t.Errorf("%s: no queries counted:\n%s", day.Format(time.DateOnly), fromCapture)
		}
	}
	if err := NewDay().AddFile([]byte("neither"), UTCDay(start)); err == nil {
		t.Error("garbage accepted")
	}
}

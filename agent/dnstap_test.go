package agent

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	framestream "github.com/farsightsec/golang-framestream"

	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/dnstap"
)

// TestDnstapSocketRefusesOversizeFrames: a sender on the dnstap socket
// whose frame is larger than any dnstap message (a bug, or an attacker
// on the socket) loses its connection, without the frame being held;
// other senders' frames keep coming, whole and in order.
func TestDnstapSocketRefusesOversizeFrames(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dnstap.sock")
	src, err := DnstapSource("unix", sock, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := src.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	send := func(frames ...[]byte) error {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return err
		}
		defer c.Close()
		w, err := framestream.NewWriter(c, &framestream.WriterOptions{ContentTypes: [][]byte{[]byte(dnstap.ContentType)}, Bidirectional: true})
		if err != nil {
			return err
		}
		for _, f := range frames {
			if _, err := w.WriteFrame(f); err != nil {
				return err
			}
		}
		return w.Close()
	}
	// The oversize frame: the agent ends that connection (the sender
	// sees its writes or its close fail, or nothing, as the kernel
	// buffered them), and reads nothing of it.
	send(bytes.Repeat([]byte{0xAB}, dnstap.MaxFrame+1))

	at := time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC)
	var want [][]byte
	for i := range 3 {
		want = append(want, dnstap.Encode(&dnstap.Message{Identity: "ns1", Type: 5, Protocol: 1,
			QueryAddr: netip.MustParseAddr("192.0.2.1"), ResponseAddr: netip.MustParseAddr("198.51.100.53"),
			QueryPort: uint16(40000 + i), ResponsePort: 53, QueryTime: at.Add(time.Duration(i) * time.Second),
			QueryMessage: []byte{byte(i), 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}}))
	}
	if err := send(want...); err != nil {
		t.Fatal(err)
	}
	r, closer, err := pcap.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	for i, w := range want {
		data, _, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(data, w) {
			t.Fatalf("packet %d is %d bytes, not the sender's frame %d (%d bytes): the oversize frame leaked in", i, len(data), i, len(w))
		}
	}
}

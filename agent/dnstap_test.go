package agent

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	framestream "github.com/farsightsec/golang-framestream"

	"github.com/plumb-dev/plumb/dns/dnstap"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
)

// TestDnstapSocketRefusesOversizeFrames: a sender on the dnstap socket
// whose frame is larger than any dnstap message (a bug, or an attacker
// on the socket) loses its connection, without the frame being held;
// other senders' frames keep coming, whole and in order.
func TestDnstapSocketRefusesOversizeFrames(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dnstap.sock")
	src, err := DnstapSource(DnstapConfig{Network: "unix", Addr: sock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := src.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	send := func(frames ...[]byte) error {
		c, w, err := tapSender(t, sock)
		if err != nil {
			return err
		}
		defer c.Close()
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

// tapSender connects to a dnstap socket and does the handshake.
func tapSender(t *testing.T, sock string) (net.Conn, *framestream.Writer, error) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, nil, err
	}
	w, err := framestream.NewWriter(c, &framestream.WriterOptions{ContentTypes: [][]byte{[]byte(dnstap.ContentType)}, Bidirectional: true, Timeout: 5 * time.Second})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, w, nil
}

// TestDnstapListenerBounded: the listener holds at most MaxConns
// senders (one more is disconnected at once, and the log says so), lets
// a sender go after its idle timeout, and a sender that comes once
// others have gone is served, its frames whole.
func TestDnstapListenerBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dnstap.sock")
	var logs testenv.Log
	log := slog.New(slog.NewTextHandler(&logs, nil))
	src, err := DnstapSource(DnstapConfig{Network: "unix", Addr: sock, MaxConns: 4, IdleTimeout: time.Second, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := src.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// Six senders: four are held; two are disconnected during or right
	// after their handshake.
	var held []net.Conn
	refused := 0
	for range 6 {
		c, _, err := tapSender(t, sock)
		if err != nil {
			refused++
			continue
		}
		held = append(held, c)
	}
	// A held sender's connection stays open until its idle timeout; a
	// refused one reads EOF at once.
	open := 0
	for _, c := range held {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				open++
			}
		}
	}
	if open != 4 || refused+len(held)-open != 2 {
		t.Errorf("%d senders held, %d refused at the handshake, %d after it; want 4 held of 6", open, refused, len(held)-open)
	}
	// Past the idle timeout, the held senders are let go.
	for _, c := range held {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("a sender read bytes from the listener")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Error("an idle sender still connected after 5 s; the idle timeout is 1 s")
		}
		c.Close()
	}
	// A new sender is served.
	c, w, err := tapSender(t, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := dnstap.Encode(&dnstap.Message{Identity: "ns1", Type: 5, Protocol: 1,
		QueryAddr: netip.MustParseAddr("192.0.2.1"), ResponseAddr: netip.MustParseAddr("198.51.100.53"),
		QueryPort: 40000, ResponsePort: 53, QueryTime: time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC),
		QueryMessage: []byte{1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}})
	if _, err := w.WriteFrame(msg); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	r, closer, err := pcap.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if data, _, err := r.Next(); err != nil || !bytes.Equal(data, msg) {
		t.Fatalf("the new sender's frame: %v, %d bytes of %d", err, len(data), len(msg))
	}
	if !strings.Contains(logs.String(), "at its cap of connections") {
		t.Errorf("the log does not count the refused senders:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "idle timeout") {
		t.Errorf("the log does not say why idle senders went:\n%s", logs.String())
	}
}

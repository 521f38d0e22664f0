package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	framestream "github.com/farsightsec/golang-framestream"
	"golang.org/x/sync/semaphore"

	"github.com/plumb-dev/plumb/dns/dnstap"
	"github.com/plumb-dev/plumb/dns/pdnspb"
	"github.com/plumb-dev/plumb/internal/fdlimit"
)

// DnstapConfig says where dnstap comes from and how much of the agent
// its senders may hold. Anyone who can reach the socket is a sender, so
// each bound is checked before a descriptor or a byte is spent.
type DnstapConfig struct {
	// Network is "unix" (Addr a path) or "tcp" (Addr host:port).
	Network, Addr string
	// Settle finishes the block being cut when no frame came for this
	// long (as a growing file's).
	Settle time.Duration
	// MaxConns bounds the senders connected at once; one more is
	// disconnected at once and counted (DefaultDnstapConns when 0). It
	// is lowered to a quarter of the open-files limit, which the spool,
	// the server connection and live capture need too.
	MaxConns int
	// IdleTimeout disconnects a sender silent this long after its
	// handshake (DefaultDnstapIdle when 0); a DNS server reconnects.
	IdleTimeout time.Duration
	Log         *slog.Logger
}

// Defaults of DnstapConfig.
const (
	DefaultDnstapConns = 256
	DefaultDnstapIdle  = 10 * time.Minute
)

// Timeouts of a dnstap sender: to finish its handshake, and to send a
// frame's bytes once it has sent their length.
const (
	tapHandshakeTimeout = 10 * time.Second
	tapFrameTimeout     = 30 * time.Second
)

// DnstapSource takes dnstap from DNS servers that connect to a unix
// socket or a TCP address, as Unbound, BIND, Knot and PowerDNS speak it:
// Frame Streams with the bidirectional handshake. Its frames become a
// capture of dnstap.LinkType (each frame a packet at its message's
// time), cut into blocks like any capture. It listens at once, so a
// wrong address fails at start and servers can connect before the first
// block; it runs until stopped.
func DnstapSource(cfg DnstapConfig) (Source, error) { return tapSource(cfg, false) }

// PowerDNSSource takes the protobuf logs of PowerDNS Recursor
// (protobufServer) and dnsdist (RemoteLogger) from servers that connect
// to cfg's address: each PBDNSMessage, 16-bit length first, becomes the
// dnstap frame of the same query or response (pdnspb), so its blocks are
// captures of dnstap frames as DnstapSource's are, bounded the same way.
// A message that does not read is counted and skipped; the connection
// goes on.
func PowerDNSSource(cfg DnstapConfig) (Source, error) { return tapSource(cfg, true) }

func tapSource(cfg DnstapConfig, pdns bool) (Source, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultDnstapConns
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultDnstapIdle
	}
	cfg.MaxConns = fdlimit.Fit(cfg.MaxConns, "a dnstap listener", "dnstap_max_conns", cfg.Log)
	if cfg.Network == "unix" {
		if fi, err := os.Lstat(cfg.Addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(cfg.Addr) // a socket a previous run left
		}
	}
	ln, err := net.Listen(cfg.Network, cfg.Addr)
	if err != nil {
		return Source{}, err
	}
	name := "dnstap:" + cfg.Addr
	if pdns {
		name = "protobuf:" + cfg.Addr
	}
	return Source{Name: name, Live: true, Open: func() (io.ReadCloser, error) {
		ctx, cancel := context.WithCancel(context.Background())
		t := &tapListener{ln: ln, log: cfg.Log, pdns: pdns, frames: make(chan []byte, 4096), conns: map[net.Conn]bool{},
			out: make(chan []byte, 16), stop: make(chan struct{}), held: semaphore.NewWeighted(maxTapHeld),
			slots: semaphore.NewWeighted(int64(cfg.MaxConns)), maxConns: cfg.MaxConns, idle: cfg.IdleTimeout, ctx: ctx, cancel: cancel}
		t.wg.Add(1)
		go t.accept()
		t.done.Add(1)
		go t.write()
		return &tapReader{t: t, idle: cfg.Settle}, nil
	}}, nil
}

// maxTapHeld bounds the frames' bytes between the sockets and the
// capture (a few seconds of a busy resolver's dnstap).
const maxTapHeld = 16 << 20

// tapListener takes connections and writes their frames as a capture.
type tapListener struct {
	ln     net.Listener
	pdns   bool          // PowerDNS protobuf, not Frame Streams
	out    chan []byte   // the capture's bytes, closed at its end
	stop   chan struct{} // closed when the reader is gone
	log    *slog.Logger
	frames chan []byte
	// held bounds the bytes of frames read and not yet written: a sender
	// faster than the spool waits (its socket fills, and the server
	// counts what it drops), rather than the agent's memory growing.
	held *semaphore.Weighted
	// slots bounds the senders connected at once.
	slots    *semaphore.Weighted
	maxConns int
	idle     time.Duration // a connected sender's silence before it is let go
	ctx      context.Context
	cancel   context.CancelFunc // ends waits for held bytes, and the accept loop's backoff
	wg       sync.WaitGroup     // the accept loop and the connections' readers
	done     sync.WaitGroup     // the writer
	mu       sync.Mutex
	conns    map[net.Conn]bool
	closed   bool
	// refused counts senders disconnected for the cap, and acceptErrs
	// failed accepts, since each was last logged at lastLog.
	refused, acceptErrs int
	lastLog             time.Time
}

// noted counts one more refused sender or failed accept and logs the
// counts at most every 10 seconds, so a flood is seen without flooding
// the log.
func (t *tapListener) noted(refused bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if refused {
		t.refused++
	} else {
		t.acceptErrs++
	}
	if time.Since(t.lastLog) < 10*time.Second {
		return
	}
	t.lastLog = time.Now()
	if t.refused > 0 {
		t.log.Warn("dnstap senders disconnected: the listener is at its cap of connections (--dnstap-max-conns)", "refused", t.refused, "max_conns", t.maxConns)
	}
	if t.acceptErrs > 0 {
		t.log.Warn("dnstap: accepting connections failed; the listener retries (out of descriptors? raise the open-files limit)", "failures", t.acceptErrs, "err", err)
	}
	t.refused, t.acceptErrs = 0, 0
}

// accept takes senders until the listener closes. A failed accept
// (EMFILE when descriptors run out, ECONNABORTED) is waited out with a
// growing pause, as net/http's Serve does, instead of ending the loop.
func (t *tapListener) accept() {
	defer t.wg.Done()
	var pause time.Duration
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || t.ctx.Err() != nil {
				return
			}
			t.noted(false, err)
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(pause):
			case <-t.ctx.Done():
				return
			}
			continue
		}
		pause = 0
		if !t.slots.TryAcquire(1) {
			c.Close()
			t.noted(true, nil)
			continue
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			c.Close()
			return
		}
		t.conns[c] = true
		t.wg.Add(1)
		t.mu.Unlock()
		go t.read(c)
	}
}

// read reads one server's frames until it stops, goes quiet past the
// idle timeout, or the source closes. The handshake uses framestream's
// control frames; the data frames are read here, because framestream's
// Reader reads each into a buffer sized for the largest frame, which
// every connection would hold for its life (4,000 idle senders held
// 1 GB). Here a frame's length is read first, its bytes are taken from
// the bound on held bytes, and only then allocated.
func (t *tapListener) read(c net.Conn) {
	defer t.wg.Done()
	defer t.slots.Release(1)
	defer func() {
		t.mu.Lock()
		delete(t.conns, c)
		t.mu.Unlock()
		c.Close()
	}()
	from := c.RemoteAddr().String()
	br := bufio.NewReaderSize(c, 4<<10)
	if t.pdns {
		t.readPDNS(c, br, from)
		return
	}
	bw := bufio.NewWriterSize(c, 512)
	if err := tapHandshake(c, br, bw); err != nil {
		t.log.Warn("a dnstap connection did not complete its handshake", "from", from, "err", err)
		return
	}
	t.log.Info("dnstap sender connected", "from", from)
	var head [4]byte
	for {
		if !t.readHead(c, br, head[:], "dnstap", from) {
			return
		}
		n := binary.BigEndian.Uint32(head[:])
		if n == 0 { // a control frame: STOP ends the stream
			var cf framestream.ControlFrame
			c.SetReadDeadline(time.Now().Add(tapFrameTimeout))
			if err := cf.Decode(br); err != nil {
				t.log.Warn("dnstap connection sent a bad control frame", "from", from, "err", err)
				return
			}
			if cf.ControlType == framestream.CONTROL_STOP {
				c.SetWriteDeadline(time.Now().Add(tapHandshakeTimeout))
				finish := framestream.ControlFinish
				finish.EncodeFlush(bw)
				return
			}
			continue
		}
		if n > dnstap.MaxFrame {
			t.log.Warn("dnstap connection sent a frame over the bound; disconnected", "from", from, "bytes", n, "max", dnstap.MaxFrame)
			return
		}
		if err := t.held.Acquire(t.ctx, int64(n)); err != nil {
			return
		}
		c.SetReadDeadline(time.Now().Add(tapFrameTimeout))
		frame := make([]byte, n)
		if _, err := io.ReadFull(br, frame); err != nil {
			t.held.Release(int64(n))
			t.log.Warn("dnstap connection ended inside a frame", "from", from, "err", err)
			return
		}
		t.frames <- frame
	}
}

// readPDNS reads one PowerDNS server's protobuf messages, each 16-bit
// length first, until it stops, goes quiet past the idle timeout, or
// the source closes; each becomes a dnstap frame.
func (t *tapListener) readPDNS(c net.Conn, br *bufio.Reader, from string) {
	t.log.Info("PowerDNS protobuf sender connected", "from", from)
	var head [2]byte
	var bad int
	defer func() {
		if bad > 0 {
			t.log.Warn("PowerDNS protobuf messages that did not read were skipped", "from", from, "skipped", bad)
		}
	}()
	for {
		if !t.readHead(c, br, head[:], "PowerDNS protobuf", from) {
			return
		}
		n := int64(binary.BigEndian.Uint16(head[:]))
		// A frame holds the message's parts and the DNS message rebuilt
		// from them: at most a few times its size, within MaxFrame.
		held := min(4*n+512, dnstap.MaxFrame)
		if err := t.held.Acquire(t.ctx, held); err != nil {
			return
		}
		c.SetReadDeadline(time.Now().Add(tapFrameTimeout))
		msg := make([]byte, n)
		if _, err := io.ReadFull(br, msg); err != nil {
			t.held.Release(held)
			t.log.Warn("PowerDNS protobuf connection ended inside a message", "from", from, "err", err)
			return
		}
		frame, err := pdnspb.Frame(msg)
		if err != nil || int64(len(frame)) > held {
			t.held.Release(held)
			if bad++; bad == 1 {
				t.log.Warn("a PowerDNS protobuf message did not read; skipped (the count is logged when the sender leaves)", "from", from, "err", err)
			}
			continue
		}
		t.held.Release(held - int64(len(frame)))
		t.frames <- frame
	}
}

// readHead reads a frame's length, waiting at most the idle timeout;
// false when the sender is gone (said in the log, but for a plain close).
func (t *tapListener) readHead(c net.Conn, br *bufio.Reader, head []byte, what, from string) bool {
	c.SetReadDeadline(time.Now().Add(t.idle))
	_, err := io.ReadFull(br, head)
	var ne net.Error
	switch {
	case err == nil:
		return true
	case errors.As(err, &ne) && ne.Timeout():
		t.log.Info(what+" sender disconnected after its idle timeout; it reconnects when it has more", "from", from, "idle", t.idle)
	case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
		t.log.Warn(what+" connection ended", "from", from, "err", err)
	}
	return false
}

// tapHandshake is Frame Streams' bidirectional handshake for dnstap:
// READY with the content type, ACCEPT, then START.
func tapHandshake(c net.Conn, br *bufio.Reader, bw *bufio.Writer) error {
	c.SetDeadline(time.Now().Add(tapHandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	types := [][]byte{[]byte(dnstap.ContentType)}
	var ready framestream.ControlFrame
	if err := ready.DecodeTypeEscape(br, framestream.CONTROL_READY); err != nil {
		return err
	}
	ct, ok := ready.ChooseContentType(types)
	if !ok {
		return framestream.ErrContentTypeMismatch
	}
	accept := framestream.ControlAccept
	accept.SetContentType(ct)
	if err := accept.EncodeFlush(bw); err != nil {
		return err
	}
	var start framestream.ControlFrame
	if err := start.DecodeTypeEscape(br, framestream.CONTROL_START); err != nil {
		return err
	}
	if !start.MatchContentType(ct) {
		return framestream.ErrContentTypeMismatch
	}
	return nil
}

// write writes the frames as a capture, flushed when no frame waits, so
// a quiet server's last frames reach the block being cut.
func (t *tapListener) write() {
	defer t.done.Done()
	c, err := dnstap.NewCapture(chanWriter{t.out, t.stop})
	if err == nil {
		err = c.Flush()
	}
	for frame := range t.frames {
		t.held.Release(int64(len(frame)))
		if err != nil {
			continue // drain: the reader is gone
		}
		err = c.Frame(frame, time.Now())
		if err == nil && len(t.frames) == 0 {
			err = c.Flush()
		}
	}
	if err == nil {
		c.Flush()
	}
	close(t.out)
}

// chanWriter hands what is written to the reader, until it is gone.
type chanWriter struct {
	out  chan<- []byte
	stop <-chan struct{}
}

func (w chanWriter) Write(p []byte) (int, error) {
	select {
	case w.out <- append([]byte(nil), p...):
		return len(p), nil
	case <-w.stop:
		return 0, io.ErrClosedPipe
	}
}

// close stops listening, ends every connection, and ends the capture
// after the frames read so far.
func (t *tapListener) close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	t.cancel()
	t.ln.Close()
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
	close(t.frames)
	t.done.Wait()
}

// tapReader is the capture's reading end; closing it stops the source.
type tapReader struct {
	t      *tapListener
	idle   time.Duration
	onIdle func()
	buf    []byte
	once   sync.Once
}

// OnIdle sets what to do when no frame came for the idle time: the
// cutter finishes the block being cut, from within Read.
func (r *tapReader) OnIdle(fn func()) { r.onIdle = fn }

func (r *tapReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		var timeout <-chan time.Time
		if r.onIdle != nil && r.idle > 0 {
			timeout = time.After(r.idle)
		}
		select {
		case b, ok := <-r.t.out:
			if !ok {
				return 0, io.EOF
			}
			r.buf = b
		case <-timeout:
			r.onIdle()
			r.idle, timeout = -r.idle, nil // once per pause
		}
	}
	if r.idle < 0 {
		r.idle = -r.idle
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Stop ends the capture after the frames already taken (the cutter asks
// so when the agent stops): no new server connects, connections end, and
// every frame they sent reaches the block being cut before Read ends.
func (r *tapReader) Stop() { go r.t.close() }

func (r *tapReader) Close() error {
	r.once.Do(func() {
		close(r.t.stop) // the writer, if blocked handing bytes over, drains from now on
		r.t.close()
	})
	return nil
}

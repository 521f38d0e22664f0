package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	framestream "github.com/farsightsec/golang-framestream"
	"golang.org/x/sync/semaphore"

	"github.com/plumb-dev/plumb/pcap/dnstap"
)

// DnstapSource takes dnstap from DNS servers that connect to a unix
// socket (network "unix", addr a path) or a TCP address, as Unbound,
// BIND, Knot and PowerDNS speak it: Frame Streams with the bidirectional
// handshake. Its frames become a capture of dnstap.LinkType (each frame
// a packet at its message's time), cut into blocks like any capture.
// It listens at once, so a wrong address fails at start and servers can
// connect before the first block; it runs until stopped. When no frame
// came for idle, the block being cut is finished (as a growing file's).
func DnstapSource(network, addr string, idle time.Duration, log *slog.Logger) (Source, error) {
	if network == "unix" {
		if fi, err := os.Lstat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(addr) // a socket a previous run left
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return Source{}, err
	}
	if log == nil {
		log = slog.Default()
	}
	return Source{Name: "dnstap:" + addr, Live: true, Open: func() (io.ReadCloser, error) {
		t := &tapListener{ln: ln, log: log, frames: make(chan []byte, 4096), conns: map[net.Conn]bool{},
			out: make(chan []byte, 16), stop: make(chan struct{}), held: semaphore.NewWeighted(maxTapHeld)}
		t.wg.Add(1)
		go t.accept()
		t.done.Add(1)
		go t.write()
		return &tapReader{t: t, idle: idle}, nil
	}}, nil
}

// maxTapHeld bounds the frames' bytes between the sockets and the
// capture (a few seconds of a busy resolver's dnstap).
const maxTapHeld = 16 << 20

// tapListener takes connections and writes their frames as a capture.
type tapListener struct {
	ln     net.Listener
	out    chan []byte   // the capture's bytes, closed at its end
	stop   chan struct{} // closed when the reader is gone
	log    *slog.Logger
	frames chan []byte
	// held bounds the bytes of frames read and not yet written: a sender
	// faster than the spool waits (its socket fills, and the server
	// counts what it drops), rather than the agent's memory growing.
	held   *semaphore.Weighted
	wg     sync.WaitGroup // the accept loop and the connections' readers
	done   sync.WaitGroup // the writer
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func (t *tapListener) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return // closed
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

// read reads one server's frames until it stops or the source closes.
func (t *tapListener) read(c net.Conn) {
	defer t.wg.Done()
	defer func() {
		t.mu.Lock()
		delete(t.conns, c)
		t.mu.Unlock()
		c.Close()
	}()
	r, err := framestream.NewReader(c, &framestream.ReaderOptions{
		ContentTypes: [][]byte{[]byte(dnstap.ContentType)}, Bidirectional: true, Timeout: 10 * time.Second})
	if err != nil {
		t.log.Warn("a dnstap connection did not complete its handshake", "from", c.RemoteAddr(), "err", err)
		return
	}
	t.log.Info("dnstap sender connected", "from", c.RemoteAddr().String())
	buf := make([]byte, dnstap.MaxFrame)
	for {
		n, err := r.ReadFrame(buf)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.log.Warn("dnstap connection ended", "from", c.RemoteAddr(), "err", err)
			}
			return
		}
		if err := t.held.Acquire(context.Background(), int64(n)); err != nil {
			return
		}
		t.frames <- append([]byte(nil), buf[:n]...)
	}
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

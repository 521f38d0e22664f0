package server

import (
	"sync/atomic"
	"time"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SendTimeout is how long a DoGet may wait for its client to take the
// next message, unless configured: a client that stops reading holds a
// read slot and the block's store reader until then.
const SendTimeout = time.Minute

// watchedGet notes when a send started and has not returned.
type watchedGet struct {
	aflight.FlightService_DoGetServer
	since atomic.Int64 // unix nanoseconds when the send in progress began; 0 when none
}

func (w *watchedGet) SendMsg(m any) error {
	w.since.Store(time.Now().UnixNano())
	defer w.since.Store(0)
	return w.FlightService_DoGetServer.SendMsg(m)
}

func (w *watchedGet) Send(d *aflight.FlightData) error {
	w.since.Store(time.Now().UnixNano())
	defer w.since.Store(0)
	return w.FlightService_DoGetServer.Send(d)
}

// guardSends serves a DoGet with serve, and ends the call when one send
// waits past timeout for the client: the call's end makes gRPC cancel
// the stream, which unblocks the send, so serve's goroutine returns
// right after (it is not waited for: it cannot end before the call does).
func guardSends(stream aflight.FlightService_DoGetServer, timeout time.Duration, serve func(aflight.FlightService_DoGetServer) error) error {
	if timeout <= 0 {
		timeout = SendTimeout
	}
	w := &watchedGet{FlightService_DoGetServer: stream}
	done := make(chan error, 1)
	go func() { done <- serve(w) }()
	tick := time.NewTicker(max(timeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if since := w.since.Load(); since != 0 && time.Since(time.Unix(0, since)) > timeout {
				return status.Errorf(codes.DeadlineExceeded, "the client took nothing for %v; the read was ended to free its slot (read the stream as it comes, or ask for less at once)", timeout)
			}
		}
	}
}

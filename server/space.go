package server

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/state"
)

// space decides whether the store has room for more: the file system's
// free bytes above MinFree, and the bytes stored under StoreCap.
type space struct {
	store    blob.Store
	db       *state.DB
	minFree  int64
	capBytes int64

	mu      sync.Mutex
	checked time.Time
	free    int64 // -1 when the store cannot tell
	used    int64
}

// spaceEvery bounds how often free space is measured.
const spaceEvery = 500 * time.Millisecond

func (s *space) measure() {
	if time.Since(s.checked) < spaceEvery {
		return
	}
	s.checked = time.Now()
	s.free = -1
	if sp, ok := s.store.(blob.Spacer); ok {
		if free, _, err := sp.Space(); err == nil {
			s.free = free
		}
	}
	s.used = 0
	if qs, err := s.db.Queues(); err == nil {
		for _, q := range qs {
			s.used += q.Bytes
		}
	}
}

// room returns RESOURCE_EXHAUSTED when n more bytes do not fit; what is
// written is nil. Agents treat the error as transient and retry.
func (s *space) room(n int64, what string) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.measure()
	if s.free >= 0 && s.free-n < s.minFree {
		return status.Errorf(codes.ResourceExhausted, "%s: the store %s has %d MiB free, under the %d MiB it keeps free (--min-free); it is refused for now and "+
			"accepted again once space is freed (retention, plumb fsck --repair, a bigger disk); agents keep it spooled and retry",
			what, s.store, s.free>>20, s.minFree>>20)
	}
	if s.capBytes > 0 && s.used+n > s.capBytes {
		return status.Errorf(codes.ResourceExhausted, "%s: the store holds %d of its %d bytes (--store-cap); it is refused for now and "+
			"accepted again once blocks are consumed or expire; agents keep it spooled and retry", what, s.used, s.capBytes)
	}
	// Count what is let in until the next measurement, so a burst of
	// uploads cannot overshoot between two.
	s.used += n
	if s.free >= 0 {
		s.free -= n
	}
	return nil
}

// full is room for stage outputs: nil while there is room.
func (s *space) full() error {
	if err := s.room(0, "stage output"); err != nil {
		return fmt.Errorf("%s", status.Convert(err).Message())
	}
	return nil
}

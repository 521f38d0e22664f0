package server

import (
	"slices"
	"sync"
	"time"
)

// readers remembers what each named group read (Ticket.Reader) sent, so
// that a nack naming the read gives back every block it holds unacked,
// those read ahead included. Without it, a read the server had finished
// sending before its client's loop broke kept what it read ahead until
// the visibility timeout: the server only gives back on a cancelled
// stream, and a finished one is not cancelled.
type readers struct {
	mu sync.Mutex
	m  map[string]*readerSent
}

// readerSent is what one named read sent.
type readerSent struct {
	queue, group, reserver string
	sent                   []uint64
	until                  time.Time // zero while the read goes on; then when its reservations have passed
}

// maxReaders bounds the reads remembered: past it, the ended read whose
// reservations pass first is forgotten (its blocks then come back at
// the visibility timeout), and a new read beyond that many live ones is
// not remembered.
const maxReaders = 4096

// start remembers a read by its client's name.
func (r *readers) start(name, queue, group, reserver string, now time.Time) *readerSent {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*readerSent{}
	}
	var oldest string
	for n, rs := range r.m {
		if rs.until.IsZero() {
			continue
		}
		if now.After(rs.until) {
			delete(r.m, n)
		} else if oldest == "" || rs.until.Before(r.m[oldest].until) {
			oldest = n
		}
	}
	if len(r.m) >= maxReaders {
		if oldest == "" {
			return &readerSent{} // remembered nowhere
		}
		delete(r.m, oldest)
	}
	rs := &readerSent{queue: queue, group: group, reserver: reserver}
	r.m[name] = rs
	return rs
}

// sent records a block the read sent, keeping the latest maxSentKept.
func (r *readers) sent(rs *readerSent, serial uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rs.sent = append(rs.sent, serial); len(rs.sent) > maxSentKept {
		rs.sent = slices.Delete(rs.sent, 0, len(rs.sent)-maxSentKept)
	}
}

// end marks the read ended; what it holds passes by vis from now.
func (r *readers) end(rs *readerSent, now time.Time, vis time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs.until = now.Add(vis)
}

// take forgets the named read of a group and returns what it sent.
func (r *readers) take(name, queue, group string) (reserver string, sent []uint64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.m[name]
	if rs == nil || rs.queue != queue || rs.group != group {
		return "", nil, false
	}
	delete(r.m, name)
	return rs.reserver, slices.Clone(rs.sent), true
}

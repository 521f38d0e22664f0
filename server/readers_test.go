package server

import (
	"fmt"
	"testing"
	"time"
)

// TestReadersBounded: the named reads remembered for nack stay within
// maxReaders: an ended read is forgotten once its reservations have
// passed, or first when room is needed; live reads beyond the bound are
// not remembered; a nack for another queue or group finds nothing.
func TestReadersBounded(t *testing.T) {
	var r readers
	now := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	old := r.start("old", "q", "g", "res-old", now)
	r.sent(old, 7)
	r.end(old, now, time.Minute)
	if _, _, ok := r.take("old", "q", "other"); ok {
		t.Fatal("a nack of another group found the read")
	}
	for i := range maxReaders {
		r.start(fmt.Sprint("live", i), "q", "g", "res", now)
	}
	if _, _, ok := r.take("old", "q", "g"); ok {
		t.Error("the ended read was kept when room was needed for live ones")
	}
	extra := r.start("extra", "q", "g", "res-extra", now)
	r.sent(extra, 9)
	if _, _, ok := r.take("extra", "q", "g"); ok || len(r.m) != maxReaders {
		t.Errorf("a read beyond %d live ones was remembered (%d held)", maxReaders, len(r.m))
	}
	for i := range maxReaders {
		r.end(r.m[fmt.Sprint("live", i)], now, time.Minute)
	}
	r.start("new", "q", "g", "res-new", now.Add(2*time.Minute))
	if len(r.m) != 1 {
		t.Errorf("%d reads held after every ended one passed; want only the new one", len(r.m))
	}
	res, sent, ok := r.take("new", "q", "g")
	if !ok || res != "res-new" || len(sent) != 0 {
		t.Errorf("take: %q %v %v", res, sent, ok)
	}
}

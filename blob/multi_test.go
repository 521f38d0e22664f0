package blob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
)

// memLocations is Locations in memory, for tests.
type memLocations struct {
	mu sync.Mutex
	m  map[string]string
}

func (l *memLocations) Location(k string) (string, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[k]
	return s, ok, nil
}
func (l *memLocations) SetLocation(k, s string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[k] = s
	return nil
}
func (l *memLocations) ForgetLocation(k string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, k)
	return nil
}

// TestMultiPlacesAndDrains: two directory stores on one file system (equal
// free space) take turns; a draining one takes nothing new; a reader that
// opened a blob before it moved reads it whole; the primary needs no
// location records.
func TestMultiPlacesAndDrains(t *testing.T) {
	ctx := context.Background()
	a, _ := blob.OpenDir(t.TempDir())
	b, _ := blob.OpenDir(t.TempDir())
	locs := &memLocations{m: map[string]string{}}
	m := blob.NewMulti(locs, "a", "file:///a", a)
	defer m.Close()
	if err := m.Add("b", "file:///b", b); err != nil {
		t.Fatal(err)
	}
	put := func(seq uint64) string {
		data := []byte(fmt.Sprint("blob ", seq))
		sum := blob.Sum(sha256.Sum256(data))
		key := blob.BlockKey(block.Name{Time: time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC), Seq: seq, Instance: "lax", Queue: "q"}, sum)
		if err := m.Put(ctx, key, bytes.NewReader(data), int64(len(data)), sum); err != nil {
			t.Fatal(err)
		}
		return key
	}
	where := map[string]int{}
	var keys []string
	for seq := uint64(1); seq <= 10; seq++ {
		k := put(seq)
		keys = append(keys, k)
		w, _ := m.Where(k)
		where[w]++
	}
	if where["a"] == 0 || where["b"] == 0 || len(locs.m) != where["b"] {
		t.Fatalf("placement %v, %d location records; want both used and records only for b", where, len(locs.m))
	}
	m.SetDraining("b", true)
	if w, _ := m.Where(put(11)); w != "a" {
		t.Fatalf("a new blob went to the draining store")
	}
	// A reader opens a blob on b, then b drains under it.
	var onB string
	for _, k := range keys {
		if w, _ := m.Where(k); w == "b" {
			onB = k
		}
	}
	r, err := m.Open(ctx, onB)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan blob.DrainReport)
	go func() {
		rep, err := m.Drain(ctx, "b", 2)
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	time.Sleep(100 * time.Millisecond) // the drain waits for our reader before deleting
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.HasPrefix(got, []byte("blob ")) {
		t.Fatalf("the reader opened before the move read %q, %v", got, err)
	}
	rep := <-done
	if rep.Moved != where["b"] || len(rep.Left) != 0 {
		t.Fatalf("drain: %+v", rep)
	}
	n := 0
	b.List(ctx, func(blob.Info) error { n++; return nil })
	if n != 0 {
		t.Fatalf("the drained store holds %d blobs", n)
	}
	for _, k := range keys {
		if w, _ := m.Where(k); w != "a" {
			t.Fatalf("%s is on %s after the drain", k, w)
		}
		rc, err := m.Open(ctx, k)
		if err != nil {
			t.Fatalf("open %s after the drain: %v", k, err)
		}
		rc.Close()
	}
	if err := m.Remove(ctx, "b"); err != nil {
		t.Fatal(err)
	}
}

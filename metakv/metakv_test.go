package metakv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/metakv"
)

// backends opens a fresh DB of each kind; open opens another handle on
// the same store (another server), where the kind allows it.
type backend struct {
	name string
	db   metakv.DB
	open func(t *testing.T) metakv.DB // nil: one handle only
}

func backends(t *testing.T) []backend {
	t.Helper()
	bolt, err := metakv.OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bolt.Close() })
	url := testenv.StartPostgres(t)
	open := func(t *testing.T) metakv.DB {
		db, err := metakv.OpenPostgres(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	out := []backend{{name: "bolt", db: bolt}}
	if url != "" {
		out = append(out, backend{name: "postgres", db: open(t), open: open})
	}
	return out
}

// TestAcceptance checks, on every backend, what package state relies on.
func TestAcceptance(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { acceptance(t, b) })
	}
}

func acceptance(t *testing.T, be backend) {
	ctx := context.Background()
	db := be.db
	update := func(fn func(metakv.Tx) error) {
		t.Helper()
		if err := db.Update(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	view := func(fn func(metakv.Tx) error) {
		t.Helper()
		if err := db.View(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%04d", i)) }

	// Values, empty values, keys of any bytes, and what is not there.
	update(func(tx metakv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("blocks"))
		if err != nil {
			return err
		}
		for i := 0; i < 600; i++ { // past a Postgres cursor's window, twice
			if err := b.Put(key(i), []byte(fmt.Sprint(i))); err != nil {
				return err
			}
		}
		for _, k := range [][]byte{{0}, {0xff, 0xff}, {'k', 0}} {
			if err := b.Put(k, nil); err != nil {
				return err
			}
		}
		return nil
	})
	view(func(tx metakv.Tx) error {
		b := tx.Bucket([]byte("blocks"))
		if b == nil || tx.Bucket([]byte("nope")) != nil {
			t.Fatalf("bucket blocks %v, nope %v", b, tx.Bucket([]byte("nope")))
		}
		if v := b.Get(key(42)); string(v) != "42" {
			t.Errorf("k0042 = %q", v)
		}
		if v := b.Get([]byte{0xff, 0xff}); v == nil || len(v) != 0 {
			t.Errorf("an empty value reads as %v; want empty, not nil", v)
		}
		if v := b.Get([]byte("k9999")); v != nil {
			t.Errorf("a key not there reads as %q", v)
		}
		// In byte order, both ways, across windows.
		c := b.Cursor()
		var n int
		var prev []byte
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if prev != nil && bytes.Compare(prev, k) >= 0 {
				t.Fatalf("%q after %q", k, prev)
			}
			prev, n = bytes.Clone(k), n+1
		}
		if n != 603 {
			t.Errorf("a cursor read %d keys; want 603", n)
		}
		if k, _ := c.Next(); k != nil {
			t.Errorf("past the end: %q", k)
		}
		n = 0
		for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
			n++
		}
		if n != 603 {
			t.Errorf("backwards a cursor read %d keys; want 603", n)
		}
		if k, v := c.Seek([]byte("k0299x")); string(k) != "k0300" || string(v) != "300" {
			t.Errorf("Seek(k0299x) = %q %q; want k0300", k, v)
		}
		if k, _ := c.Prev(); string(k) != "k0299" {
			t.Errorf("Prev after Seek = %q", k)
		}
		if k, _ := c.Seek([]byte("k0599")); string(k) != "k0599" {
			t.Errorf("Seek(k0599) = %q", k)
		}
		if k, _ := c.Next(); k == nil || k[0] != 0xff {
			t.Errorf("after k0599: %q; want the 0xff key", k)
		}
		if k, _ := c.Seek([]byte{0xff, 0xff, 0}); k != nil {
			t.Errorf("Seek past the last key = %q", k)
		}
		if k, _ := c.First(); len(k) != 1 || k[0] != 0 {
			t.Errorf("First = %q; want the 0x00 key", k)
		}
		return nil
	})

	// A cursor deletes as it goes; Delete of a key not there is not an error.
	update(func(tx metakv.Tx) error {
		b := tx.Bucket([]byte("blocks"))
		c := b.Cursor()
		for k, _ := c.Seek([]byte("k0100")); k != nil && bytes.Compare(k, []byte("k0400")) < 0; k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return b.Delete([]byte("never there"))
	})
	view(func(tx metakv.Tx) error {
		var n int
		tx.Bucket([]byte("blocks")).ForEach(func(k, v []byte) error { n++; return nil })
		if n != 303 {
			t.Errorf("%d keys after deleting 300 of 603", n)
		}
		return nil
	})

	// Nested buckets: a key with a nil value, listed apart, deleted whole.
	update(func(tx metakv.Tx) error {
		q, err := tx.CreateBucketIfNotExists([]byte("queues"))
		if err != nil {
			return err
		}
		for _, name := range []string{"dns.arrow", "pcap"} {
			s, err := q.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			inner, err := s.CreateBucketIfNotExists([]byte("lax"))
			if err != nil {
				return err
			}
			if err := inner.Put([]byte("1"), []byte(name)); err != nil {
				return err
			}
		}
		if err := q.Put([]byte("count"), []byte("2")); err != nil {
			return err
		}
		if err := q.Put([]byte("pcap"), []byte("x")); !errors.Is(err, metakv.ErrIncompatible) {
			t.Errorf("a value over a bucket: %v", err)
		}
		if _, err := q.CreateBucketIfNotExists([]byte("count")); !errors.Is(err, metakv.ErrIncompatible) {
			t.Errorf("a bucket over a value: %v", err)
		}
		if err := q.DeleteBucket([]byte("nope")); !errors.Is(err, metakv.ErrNoBucket) {
			t.Errorf("deleting a bucket not there: %v", err)
		}
		return nil
	})
	view(func(tx metakv.Tx) error {
		q := tx.Bucket([]byte("queues"))
		var all, subs []string
		q.ForEach(func(k, v []byte) error { all = append(all, fmt.Sprintf("%s=%v", k, v != nil)); return nil })
		q.ForEachBucket(func(k []byte) error { subs = append(subs, string(k)); return nil })
		if fmt.Sprint(all) != "[count=true dns.arrow=false pcap=false]" || fmt.Sprint(subs) != "[dns.arrow pcap]" {
			t.Errorf("ForEach %v, ForEachBucket %v", all, subs)
		}
		if q.Get([]byte("pcap")) != nil {
			t.Error("Get of a nested bucket's key is not nil")
		}
		if v := q.Bucket([]byte("pcap")).Bucket([]byte("lax")).Get([]byte("1")); string(v) != "pcap" {
			t.Errorf("queues/pcap/lax/1 = %q", v)
		}
		return nil
	})
	update(func(tx metakv.Tx) error {
		// Seen, then deleted, in one transaction: gone, with what was in it.
		q := tx.Bucket([]byte("queues"))
		if q.Bucket([]byte("pcap")).Bucket([]byte("lax")) == nil {
			t.Error("queues/pcap/lax is not there")
		}
		if err := q.DeleteBucket([]byte("pcap")); err != nil {
			return err
		}
		if q.Bucket([]byte("pcap")) != nil {
			t.Error("a bucket deleted in this transaction is still there")
		}
		return nil
	})
	update(func(tx metakv.Tx) error {
		// Made again, it is empty: nothing under the old one is left.
		s, err := tx.Bucket([]byte("queues")).CreateBucketIfNotExists([]byte("pcap"))
		if err != nil {
			return err
		}
		if s.Bucket([]byte("lax")) != nil {
			t.Error("a bucket deleted and made again still holds what it did")
		}
		if v := tx.Bucket([]byte("queues")).Bucket([]byte("dns.arrow")).Bucket([]byte("lax")).Get([]byte("1")); string(v) != "dns.arrow" {
			t.Errorf("deleting pcap took its sibling's key: %q", v)
		}
		return nil
	})

	// Sequences, per bucket, kept.
	update(func(tx metakv.Tx) error {
		a, _ := tx.CreateBucketIfNotExists([]byte("a"))
		b, _ := tx.CreateBucketIfNotExists([]byte("b"))
		for i := 1; i <= 3; i++ {
			if n, err := a.NextSequence(); err != nil || n != uint64(i) {
				t.Errorf("a's NextSequence = %d %v; want %d", n, err, i)
			}
		}
		return b.SetSequence(41)
	})
	update(func(tx metakv.Tx) error {
		if n, _ := tx.Bucket([]byte("b")).NextSequence(); n != 42 || tx.Bucket([]byte("a")).Sequence() != 3 {
			t.Errorf("b's next %d, a's sequence %d; want 42 and 3", n, tx.Bucket([]byte("a")).Sequence())
		}
		return nil
	})

	// A failed update leaves nothing; a view writes nothing.
	boom := errors.New("boom")
	if err := db.Update(ctx, func(tx metakv.Tx) error {
		tx.Bucket([]byte("a")).Put([]byte("x"), []byte("1"))
		tx.CreateBucketIfNotExists([]byte("c"))
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("a failed update returned %v", err)
	}
	view(func(tx metakv.Tx) error {
		if tx.Bucket([]byte("a")).Get([]byte("x")) != nil || tx.Bucket([]byte("c")) != nil {
			t.Error("a failed update's writes are there")
		}
		if tx.Writable() {
			t.Error("a view is writable")
		}
		if err := tx.Bucket([]byte("a")).Put([]byte("x"), []byte("1")); !errors.Is(err, metakv.ErrNotWritable) {
			t.Errorf("Put in a view: %v", err)
		}
		return nil
	})

	// A view reads one snapshot, whatever commits meanwhile.
	view(func(tx metakv.Tx) error {
		before := string(tx.Bucket([]byte("a")).Get([]byte("snap")))
		done := make(chan error)
		go func() {
			done <- db.Update(ctx, func(tx metakv.Tx) error { return tx.Bucket([]byte("a")).Put([]byte("snap"), []byte("after")) })
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if now := string(tx.Bucket([]byte("a")).Get([]byte("snap"))); now != before {
			t.Errorf("a view read %q, then %q after another transaction committed", before, now)
		}
		return nil
	})

	// Updates one at a time: read, add one, write, from many goroutines
	// (and, where the store allows, from another handle, as another
	// server), and no increment is lost.
	dbs := []metakv.DB{db}
	if be.open != nil {
		dbs = append(dbs, be.open(t))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				err := dbs[g%len(dbs)].Update(ctx, func(tx metakv.Tx) error {
					b := tx.Bucket([]byte("a"))
					var n int
					fmt.Sscan(string(b.Get([]byte("counter"))), &n)
					return b.Put([]byte("counter"), []byte(fmt.Sprint(n+1)))
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	view(func(tx metakv.Tx) error {
		if v := tx.Bucket([]byte("a")).Get([]byte("counter")); string(v) != "200" {
			t.Errorf("counter %s after 200 increments", v)
		}
		return nil
	})
}

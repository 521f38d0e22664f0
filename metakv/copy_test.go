package metakv_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/metakv"
)

// dump is every bucket, key, value and sequence of a store, in order.
func dump(t *testing.T, db metakv.DB) string {
	t.Helper()
	var b strings.Builder
	var walk func(path string, bk metakv.Bucket)
	walk = func(path string, bk metakv.Bucket) {
		fmt.Fprintf(&b, "%s seq=%d\n", path, bk.Sequence())
		bk.ForEach(func(k, v []byte) error {
			if v == nil {
				walk(path+"/"+string(k), bk.Bucket(k))
			} else {
				fmt.Fprintf(&b, "%s/%q=%q\n", path, k, v)
			}
			return nil
		})
	}
	err := db.View(context.Background(), func(tx metakv.Tx) error {
		return tx.ForEachBucket(func(name []byte) error { walk(string(name), tx.Bucket(name)); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestCopy moves a bbolt store's metadata to PostgreSQL and back, every
// key, nested bucket and sequence the same, and refuses to copy into a
// store that holds something.
func TestCopy(t *testing.T) {
	ctx := context.Background()
	src, err := metakv.OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	err = src.Update(ctx, func(tx metakv.Tx) error {
		for _, top := range []string{"queues", "blocks", "empty"} {
			b, err := tx.CreateBucketIfNotExists([]byte(top))
			if err != nil {
				return err
			}
			if top == "empty" {
				continue
			}
			b.SetSequence(7)
			for i := range 300 {
				if err := b.Put([]byte(fmt.Sprintf("k%03d", i)), []byte{byte(i), 0, 0xff}); err != nil {
					return err
				}
			}
			s, err := b.CreateBucketIfNotExists([]byte("lax"))
			if err != nil {
				return err
			}
			s.NextSequence()
			if err := s.Put([]byte{0}, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := dump(t, src)
	url := testenv.StartPostgres(t)
	if url == "" {
		return
	}
	pg, err := metakv.OpenPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	if n, err := metakv.Copy(ctx, pg, src); err != nil || n != 602 {
		t.Fatalf("copy to PostgreSQL: %d keys, %v; want 602", n, err)
	}
	if got := dump(t, pg); got != want {
		t.Fatalf("PostgreSQL holds\n%s\nwant\n%s", got, want)
	}
	if _, err := metakv.Copy(ctx, pg, src); err == nil || !strings.Contains(err.Error(), "copy into an empty store") {
		t.Fatalf("a copy into a store holding buckets: %v", err)
	}
	back, err := metakv.OpenBolt(filepath.Join(t.TempDir(), "back.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if _, err := metakv.Copy(ctx, back, pg); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, back); got != want {
		t.Fatalf("back in bbolt:\n%s\nwant\n%s", got, want)
	}
}

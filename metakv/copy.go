package metakv

import (
	"context"
	"errors"
	"fmt"
)

// Copy copies every bucket of src, with its keys, nested buckets and
// sequences, into dst, which must be empty: a bbolt server's metadata
// to PostgreSQL, or back. It reads one snapshot of src and writes dst in
// one transaction, so a copy that fails leaves dst empty. It returns how
// many keys it copied.
func Copy(ctx context.Context, dst, src DB) (int, error) {
	n := 0
	err := src.View(ctx, func(from Tx) error {
		return dst.Update(ctx, func(to Tx) error {
			var names [][]byte
			if err := to.ForEachBucket(func(name []byte) error { names = append(names, name); return nil }); err != nil {
				return err
			}
			if len(names) > 0 {
				return errors.New("the metadata copied to holds buckets already; copy into an empty store")
			}
			return from.ForEachBucket(func(name []byte) error {
				b, err := to.CreateBucketIfNotExists(name)
				if err != nil {
					return err
				}
				return copyBucket(b, from.Bucket(name), &n)
			})
		})
	})
	return n, err
}

func copyBucket(to, from Bucket, n *int) error {
	if err := to.SetSequence(from.Sequence()); err != nil {
		return err
	}
	return from.ForEach(func(k, v []byte) error {
		if v != nil {
			*n++
			return to.Put(k, v)
		}
		sub, err := to.CreateBucketIfNotExists(k)
		if err != nil {
			return fmt.Errorf("bucket %q: %w", k, err)
		}
		return copyBucket(sub, from.Bucket(k), n)
	})
}

package metakv

import (
	"context"
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"
)

// Bolt is a DB in one bbolt file: the embedded default.
type Bolt struct{ db *bolt.DB }

// OpenBolt opens (creating if needed) the bbolt file at path.
func OpenBolt(path string) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	return &Bolt{db}, nil
}

// View implements DB. bbolt's transactions do not wait, so ctx is only
// checked before.
func (b *Bolt) View(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

// Batch implements DB: bbolt's Batch, which gathers concurrent calls
// into one transaction (fn may run more than once).
func (b *Bolt) Batch(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return boltErr(b.db.Batch(func(tx *bolt.Tx) error { return fn(boltTx{tx}) }))
}

// WrapBolt is a DB over an open bbolt database.
func WrapBolt(db *bolt.DB) *Bolt { return &Bolt{db} }

// Update implements DB.
func (b *Bolt) Update(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return boltErr(b.db.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx}) }))
}

// Close implements DB.
func (b *Bolt) Close() error { return b.db.Close() }

// boltErr names bbolt's errors as this package does.
func boltErr(err error) error {
	switch {
	case errors.Is(err, bolterr.ErrTxNotWritable):
		return errors.Join(ErrNotWritable, err)
	case errors.Is(err, bolterr.ErrIncompatibleValue), errors.Is(err, bolterr.ErrBucketExists):
		return errors.Join(ErrIncompatible, err)
	case errors.Is(err, bolterr.ErrBucketNotFound):
		return errors.Join(ErrNoBucket, err)
	case errors.Is(err, bolterr.ErrKeyRequired), errors.Is(err, bolterr.ErrBucketNameRequired):
		return errors.Join(ErrEmptyKey, err)
	}
	return err
}

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Bucket(name []byte) Bucket { return wrapBucket(t.tx.Bucket(name)) }

func (t boltTx) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	b, err := t.tx.CreateBucketIfNotExists(name)
	return wrapBucket(b), boltErr(err)
}

func (t boltTx) DeleteBucket(name []byte) error { return boltErr(t.tx.DeleteBucket(name)) }
func (t boltTx) Writable() bool                 { return t.tx.Writable() }
func (t boltTx) ForEachBucket(fn func(name []byte) error) error {
	return t.tx.ForEach(func(name []byte, _ *bolt.Bucket) error { return fn(name) })
}

type boltBucket struct{ b *bolt.Bucket }

// wrapBucket returns nil, not a Bucket holding nil, for no bucket.
func wrapBucket(b *bolt.Bucket) Bucket {
	if b == nil {
		return nil
	}
	return boltBucket{b}
}

func (b boltBucket) Get(key []byte) []byte { return b.b.Get(key) }
func (b boltBucket) Put(key, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return boltErr(b.b.Put(key, value))
}
func (b boltBucket) Delete(key []byte) error     { return boltErr(b.b.Delete(key)) }
func (b boltBucket) Bucket(name []byte) Bucket   { return wrapBucket(b.b.Bucket(name)) }
func (b boltBucket) DeleteBucket(n []byte) error { return boltErr(b.b.DeleteBucket(n)) }
func (b boltBucket) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	c, err := b.b.CreateBucketIfNotExists(name)
	return wrapBucket(c), boltErr(err)
}
func (b boltBucket) Cursor() Cursor                                 { return boltCursor{b.b.Cursor()} }
func (b boltBucket) ForEach(fn func(k, v []byte) error) error       { return b.b.ForEach(fn) }
func (b boltBucket) ForEachBucket(fn func(name []byte) error) error { return b.b.ForEachBucket(fn) }
func (b boltBucket) Sequence() uint64                               { return b.b.Sequence() }
func (b boltBucket) NextSequence() (uint64, error) {
	n, err := b.b.NextSequence()
	return n, boltErr(err)
}
func (b boltBucket) SetSequence(v uint64) error { return boltErr(b.b.SetSequence(v)) }

// GrowsAtEnd tells the store that keys are added to b at the end (of
// each range): bbolt then fills the pages it splits to 90%, where its
// default split leaves every page it passes half empty. Other stores
// ignore it.
func GrowsAtEnd(b Bucket) {
	if bb, ok := b.(boltBucket); ok {
		bb.b.FillPercent = 0.9
	}
}

type boltCursor struct{ c *bolt.Cursor }

func (c boltCursor) First() ([]byte, []byte)        { return c.c.First() }
func (c boltCursor) Last() ([]byte, []byte)         { return c.c.Last() }
func (c boltCursor) Seek(k []byte) ([]byte, []byte) { return c.c.Seek(k) }
func (c boltCursor) Next() ([]byte, []byte)         { return c.c.Next() }
func (c boltCursor) Prev() ([]byte, []byte)         { return c.c.Prev() }
func (c boltCursor) Delete() error                  { return boltErr(c.c.Delete()) }

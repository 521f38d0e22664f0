// Package metakv is the ordered, transactional key-value store a
// server's metadata lives in: bbolt in one file for one server (the
// embedded default), or PostgreSQL, which several servers share. Both
// give what package state relies on, with bbolt's shape: buckets that
// nest, keys in byte order read by cursors, a sequence per bucket, and
// transactions in which writes are one at a time and reads see one
// snapshot. The same acceptance suite runs on both (metakv_test.go).
package metakv

import (
	"context"
	"errors"
)

// A DB is a store of buckets.
type DB interface {
	// View runs fn in a read-only transaction: it sees one snapshot,
	// whatever commits meanwhile.
	View(ctx context.Context, fn func(Tx) error) error
	// Update runs fn in a read-write transaction, committed when fn
	// returns nil and rolled back otherwise. Updates run one at a time,
	// across every server sharing the store.
	Update(ctx context.Context, fn func(Tx) error) error
	// Batch is Update for calls that come together (a site's uploads):
	// a store may gather them into one transaction, and so run fn more
	// than once; fn must only depend on what it reads.
	Batch(ctx context.Context, fn func(Tx) error) error
	Close() error
}

// A Tx is a transaction: its top-level buckets. Keys and values it
// returns are valid until it ends.
type Tx interface {
	// Bucket returns the bucket name, or nil when there is none.
	Bucket(name []byte) Bucket
	CreateBucketIfNotExists(name []byte) (Bucket, error)
	DeleteBucket(name []byte) error
	// ForEachBucket calls fn with the name of each top-level bucket.
	ForEachBucket(fn func(name []byte) error) error
	Writable() bool
}

// A Bucket holds keys in byte order, and buckets nested in it.
type Bucket interface {
	// Get returns the value of key, or nil when there is none or key
	// names a nested bucket.
	Get(key []byte) []byte
	Put(key, value []byte) error
	// Delete removes key; a key not there is not an error.
	Delete(key []byte) error
	Bucket(name []byte) Bucket
	CreateBucketIfNotExists(name []byte) (Bucket, error)
	DeleteBucket(name []byte) error
	Cursor() Cursor
	// ForEach calls fn with each key and value in order; a nested
	// bucket's value is nil.
	ForEach(fn func(k, v []byte) error) error
	// ForEachBucket calls fn with the name of each nested bucket.
	ForEachBucket(fn func(name []byte) error) error
	// Sequence is the bucket's sequence: the last NextSequence gave.
	Sequence() uint64
	NextSequence() (uint64, error)
	SetSequence(v uint64) error
}

// A Cursor moves over a bucket's keys in order. Each move returns the
// key and value it lands on (a nested bucket's value nil), or a nil key
// past either end.
type Cursor interface {
	First() (k, v []byte)
	Last() (k, v []byte)
	// Seek moves to key, or the first key after it.
	Seek(key []byte) (k, v []byte)
	Next() (k, v []byte)
	Prev() (k, v []byte)
	// Delete removes the key the cursor is on.
	Delete() error
}

// Errors of the stores, as bbolt names them.
var (
	// ErrNotWritable: a write in a View.
	ErrNotWritable = errors.New("metakv: write in a read-only transaction")
	// ErrIncompatible: a value where a bucket is, or a bucket where a
	// value is.
	ErrIncompatible = errors.New("metakv: a bucket and a value under one key")
	// ErrNoBucket: DeleteBucket of a bucket not there.
	ErrNoBucket = errors.New("metakv: no such bucket")
	// ErrEmptyKey: a key or bucket name of no bytes.
	ErrEmptyKey = errors.New("metakv: empty key")
)

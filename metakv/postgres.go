package metakv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is a DB in a PostgreSQL database, which several servers
// share. Every key of every bucket is a row of one table, keyed by its
// bucket's path and the key, so a cursor is a range scan of the primary
// key. Updates take one transaction-scoped advisory lock, so they run one
// at a time across servers as bbolt's do in one process, and reads run
// in REPEATABLE READ, one snapshot each.
type Postgres struct {
	pool *pgxpool.Pool
}

// schema makes the table. A nested bucket is a row of its parent with
// sub set and no value, holding the bucket's sequence; a top-level
// bucket's row is under the empty path.
const schema = `
CREATE TABLE IF NOT EXISTS plumb_kv (
	bucket bytea NOT NULL,
	key    bytea NOT NULL,
	value  bytea,
	sub    boolean NOT NULL DEFAULT false,
	seq    bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (bucket, key)
)`

// updateLock is the advisory lock every Update holds: "plumb kv".
const updateLock = 0x706c756d626b76

// OpenPostgres connects to the database at url (postgres://...) and
// makes the table if it is not there.
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("metadata database: %w", err)
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("metadata database: making its table: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// Close implements DB.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// View implements DB.
func (p *Postgres) View(ctx context.Context, fn func(Tx) error) error {
	return p.run(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, false, fn)
}

// Batch implements DB: an Update.
func (p *Postgres) Batch(ctx context.Context, fn func(Tx) error) error { return p.Update(ctx, fn) }

// Update implements DB.
func (p *Postgres) Update(ctx context.Context, fn func(Tx) error) error {
	return p.run(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, true, fn)
}

func (p *Postgres) run(ctx context.Context, opts pgx.TxOptions, write bool, fn func(Tx) error) (err error) {
	tx, err := p.pool.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("metadata database: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if write {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(updateLock)); err != nil {
			return fmt.Errorf("metadata database: %w", err)
		}
	}
	t := &pgTx{ctx: ctx, tx: tx, write: write}
	if err := fn(t); err != nil {
		return err
	}
	if t.err != nil {
		return t.err // a read failed, and fn saw nil for it
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("metadata database: commit: %w", err)
	}
	return nil
}

// pgTx is a transaction. Reads that fail (the connection lost) return
// nil, as a key not there, and fail the transaction: fn may not see the
// error, but View and Update return it.
type pgTx struct {
	ctx   context.Context
	tx    pgx.Tx
	write bool
	err   error
	// buckets are the nested buckets known to be there, by path: state
	// opens the same few buckets many times in a transaction, and each
	// look was a round trip.
	buckets map[string]bool
}

func (t *pgTx) fail(err error) {
	if t.err == nil {
		t.err = fmt.Errorf("metadata database: %w", err)
	}
}

func (t *pgTx) root() *pgBucket             { return &pgBucket{t: t, path: []byte{}} }
func (t *pgTx) Bucket(name []byte) Bucket   { return t.root().Bucket(name) }
func (t *pgTx) DeleteBucket(n []byte) error { return t.root().DeleteBucket(n) }
func (t *pgTx) ForEachBucket(fn func(name []byte) error) error {
	return t.root().ForEachBucket(fn)
}
func (t *pgTx) Writable() bool { return t.write }
func (t *pgTx) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	return t.root().CreateBucketIfNotExists(name)
}

// pgBucket is a bucket: path names it (its parent's path, then its name
// with its length before it, so one bucket's path never begins
// another's), parent and name find its row.
type pgBucket struct {
	t            *pgTx
	path, parent []byte
	name         []byte
}

func (b *pgBucket) child(name []byte) *pgBucket {
	path := binary.AppendUvarint(slices.Clip(b.path), uint64(len(name)))
	return &pgBucket{t: b.t, path: append(path, name...), parent: b.path, name: slices.Clone(name)}
}

// row reads key's row: its value and whether it is a nested bucket.
func (b *pgBucket) row(key []byte) (value []byte, sub, ok bool) {
	err := b.t.tx.QueryRow(b.t.ctx, "SELECT value, sub FROM plumb_kv WHERE bucket = $1 AND key = $2", b.path, key).Scan(&value, &sub)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, false
	}
	if err != nil {
		b.t.fail(err)
		return nil, false, false
	}
	return value, sub, true
}

func (b *pgBucket) Get(key []byte) []byte {
	v, sub, ok := b.row(key)
	if !ok || sub {
		return nil
	}
	if v == nil {
		v = []byte{}
	}
	return v
}

func (b *pgBucket) writable(key []byte) error {
	switch {
	case !b.t.write:
		return ErrNotWritable
	case len(key) == 0:
		return ErrEmptyKey
	}
	return b.t.err
}

func (b *pgBucket) Put(key, value []byte) error {
	if err := b.writable(key); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	tag, err := b.t.tx.Exec(b.t.ctx, `INSERT INTO plumb_kv (bucket, key, value) VALUES ($1, $2, $3)
		ON CONFLICT (bucket, key) DO UPDATE SET value = excluded.value WHERE NOT plumb_kv.sub`, b.path, key, value)
	if err != nil {
		b.t.fail(err)
		return b.t.err
	}
	if tag.RowsAffected() == 0 {
		return ErrIncompatible // a nested bucket is there
	}
	return nil
}

func (b *pgBucket) Delete(key []byte) error {
	if err := b.writable(key); err != nil {
		return err
	}
	if _, sub, ok := b.row(key); ok && sub {
		return ErrIncompatible
	}
	if _, err := b.t.tx.Exec(b.t.ctx, "DELETE FROM plumb_kv WHERE bucket = $1 AND key = $2 AND NOT sub", b.path, key); err != nil {
		b.t.fail(err)
		return b.t.err
	}
	return nil
}

func (b *pgBucket) Bucket(name []byte) Bucket {
	c := b.child(name)
	if b.t.buckets[string(c.path)] {
		return c
	}
	if _, sub, ok := b.row(name); !ok || !sub {
		return nil
	}
	b.t.known(c)
	return c
}

// known remembers that the bucket c is there.
func (t *pgTx) known(c *pgBucket) {
	if t.buckets == nil {
		t.buckets = map[string]bool{}
	}
	t.buckets[string(c.path)] = true
}

func (b *pgBucket) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	if err := b.writable(name); err != nil {
		return nil, err
	}
	c := b.child(name)
	if b.t.buckets[string(c.path)] {
		return c, nil
	}
	// Updates run one at a time, so what is read here stays so.
	_, sub, ok := b.row(name)
	switch {
	case b.t.err != nil:
		return nil, b.t.err
	case ok && !sub:
		return nil, ErrIncompatible
	case !ok:
		if _, err := b.t.tx.Exec(b.t.ctx, "INSERT INTO plumb_kv (bucket, key, sub) VALUES ($1, $2, true)", b.path, name); err != nil {
			b.t.fail(err)
			return nil, b.t.err
		}
	}
	b.t.known(c)
	return c, nil
}

func (b *pgBucket) DeleteBucket(name []byte) error {
	if err := b.writable(name); err != nil {
		return err
	}
	_, sub, ok := b.row(name)
	switch {
	case b.t.err != nil:
		return b.t.err
	case !ok:
		return ErrNoBucket
	case !sub:
		return ErrIncompatible
	}
	c := b.child(name)
	for p := range b.t.buckets {
		if strings.HasPrefix(p, string(c.path)) {
			delete(b.t.buckets, p)
		}
	}
	// The bucket's row, and every row under it or under a bucket in it:
	// their paths begin with its path.
	if _, err := b.t.tx.Exec(b.t.ctx, "DELETE FROM plumb_kv WHERE bucket = $1 AND key = $2", b.path, name); err != nil {
		b.t.fail(err)
		return b.t.err
	}
	if _, err := b.t.tx.Exec(b.t.ctx, "DELETE FROM plumb_kv WHERE substring(bucket from 1 for $2) = $1", c.path, len(c.path)); err != nil {
		b.t.fail(err)
		return b.t.err
	}
	return nil
}

func (b *pgBucket) ForEach(fn func(k, v []byte) error) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return b.t.err
}

func (b *pgBucket) ForEachBucket(fn func(name []byte) error) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			continue // a value; a nested bucket's is nil
		}
		if err := fn(k); err != nil {
			return err
		}
	}
	return b.t.err
}

// seqRow is the row holding the bucket's sequence: its own, in its
// parent. A top-level bucket's parent is the empty path.
func (b *pgBucket) Sequence() uint64 {
	var n int64
	err := b.t.tx.QueryRow(b.t.ctx, "SELECT seq FROM plumb_kv WHERE bucket = $1 AND key = $2", b.parent, b.name).Scan(&n)
	if err != nil {
		b.t.fail(err)
	}
	return uint64(n)
}

func (b *pgBucket) NextSequence() (uint64, error) {
	if !b.t.write {
		return 0, ErrNotWritable
	}
	var n int64
	err := b.t.tx.QueryRow(b.t.ctx, "UPDATE plumb_kv SET seq = seq + 1 WHERE bucket = $1 AND key = $2 RETURNING seq", b.parent, b.name).Scan(&n)
	if err != nil {
		b.t.fail(err)
		return 0, b.t.err
	}
	return uint64(n), nil
}

func (b *pgBucket) SetSequence(v uint64) error {
	if !b.t.write {
		return ErrNotWritable
	}
	if _, err := b.t.tx.Exec(b.t.ctx, "UPDATE plumb_kv SET seq = $3 WHERE bucket = $1 AND key = $2", b.parent, b.name, int64(v)); err != nil {
		b.t.fail(err)
		return b.t.err
	}
	return nil
}

func (b *pgBucket) Cursor() Cursor { return &pgCursor{b: b} }

// pgCursor reads its bucket's rows a window at a time around where it
// is: a move within the window reads nothing.
type pgCursor struct {
	b    *pgBucket
	rows []kvRow // in key order
	i    int     // the row the cursor is on; -1 or len(rows) past an end
}

type kvRow struct {
	k, v []byte
	sub  bool
}

// window is how many rows a cursor reads at once.
const window = 256

// fetch reads up to window rows after (or before, when back) key, or
// from the start (end) for a nil key, in key order.
func (c *pgCursor) fetch(key []byte, inclusive, back bool) []kvRow {
	q := "SELECT key, value, sub FROM plumb_kv WHERE bucket = $1"
	args := []any{c.b.path}
	switch {
	case key != nil && back:
		q += " AND key < $2"
		args = append(args, key)
	case key != nil && inclusive:
		q += " AND key >= $2"
		args = append(args, key)
	case key != nil:
		q += " AND key > $2"
		args = append(args, key)
	}
	if back {
		q += " ORDER BY key DESC"
	} else {
		q += " ORDER BY key"
	}
	q += fmt.Sprintf(" LIMIT %d", window)
	rows, err := c.b.t.tx.Query(c.b.t.ctx, q, args...)
	if err != nil {
		c.b.t.fail(err)
		return nil
	}
	var out []kvRow
	for rows.Next() {
		var r kvRow
		if err := rows.Scan(&r.k, &r.v, &r.sub); err != nil {
			c.b.t.fail(err)
			rows.Close()
			return nil
		}
		if r.sub {
			r.v = nil
		} else if r.v == nil {
			r.v = []byte{}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		c.b.t.fail(err)
		return nil
	}
	if back {
		slices.Reverse(out)
	}
	return out
}

func (c *pgCursor) at() ([]byte, []byte) {
	if c.i < 0 || c.i >= len(c.rows) {
		return nil, nil
	}
	return c.rows[c.i].k, c.rows[c.i].v
}

func (c *pgCursor) First() ([]byte, []byte) {
	c.rows, c.i = c.fetch(nil, false, false), 0
	return c.at()
}

func (c *pgCursor) Last() ([]byte, []byte) {
	c.rows = c.fetch(nil, false, true)
	c.i = len(c.rows) - 1
	return c.at()
}

func (c *pgCursor) Seek(key []byte) ([]byte, []byte) {
	c.rows, c.i = c.fetch(key, true, false), 0
	return c.at()
}

func (c *pgCursor) Next() ([]byte, []byte) {
	if c.i+1 < len(c.rows) {
		c.i++
		return c.at()
	}
	if len(c.rows) == 0 || c.i >= len(c.rows) {
		return nil, nil
	}
	last := c.rows[len(c.rows)-1].k
	c.rows, c.i = c.fetch(last, false, false), 0
	return c.at()
}

func (c *pgCursor) Prev() ([]byte, []byte) {
	if c.i > 0 && c.i <= len(c.rows) {
		c.i--
		return c.at()
	}
	if len(c.rows) == 0 || c.i < 0 {
		return nil, nil
	}
	first := c.rows[0].k
	c.rows = c.fetch(first, false, true)
	c.i = len(c.rows) - 1
	return c.at()
}

func (c *pgCursor) Delete() error {
	k, v := c.at()
	switch {
	case k == nil:
		return nil
	case v == nil && c.rows[c.i].sub:
		return ErrIncompatible
	}
	return c.b.Delete(bytes.Clone(k))
}

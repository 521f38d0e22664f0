// Package state holds Plumb's metadata: queues, blocks, consumer groups and
// one delivery record per block and group, in a metakv store (bbolt in one
// file, or PostgreSQL that several servers share). Every change is one
// transaction of that store, so a crash leaves either the whole change or
// none of it. Block bytes live in a blob store; state only names their keys.
package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/metakv"
)

// Errors to test with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	// ErrTooMany: a per-user cap was reached.
	ErrTooMany = errors.New("too many")
	// ErrConflict is returned when a block's identity is already stored
	// with a different checksum; the stored block is never replaced.
	ErrConflict = errors.New("block identity already stored with a different checksum")
)

// Block is a stored block, as the protocol defines it.
type Block = flight.Block

// Queue summarises a queue.
type Queue struct {
	Name    string    `json:"name"`
	Blocks  int64     `json:"blocks"`
	Bytes   int64     `json:"bytes"`
	Created time.Time `json:"created"`
}

// Status says what CommitBlock did.
type Status string

// The outcomes of CommitBlock.
const (
	Stored    Status = "stored"
	Duplicate Status = "duplicate"
)

// DB is the metadata database.
type DB struct {
	kv   metakv.DB
	bolt *bolt.DB // the file, for its statistics and checks
	id   string
	now  func() time.Time

	mu         sync.Mutex
	waiters    map[string]chan struct{} // queue → closed at its next change
	stopListen func()                   // ends the listening for other servers' changes
}

// Options configure Open.
type Options struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

var (
	bucketQueues     = []byte("queues")
	bucketBlocks     = []byte("blocks")     // queue → instance\x00seq → Block
	bucketArrivals   = []byte("arrivals")   // queue → serial → instance\x00seq
	bucketGroups     = []byte("groups")     // queue → group → Group
	bucketDeliveries = []byte("deliveries") // queue → group → serial → Delivery
)

// Open opens or creates the database file.
func Open(path string, opts Options) (*DB, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open metadata %s: %w (is another plumb serve using this data directory?)", path, err)
	}
	// Puts and stage commits are batched (bolt.Batch): a millisecond is
	// enough to gather those in flight together, and adds little to one
	// alone. A reader's reserves and acks come one at a time, and wait
	// for no batch.
	db.MaxBatchDelay = time.Millisecond
	d, err := OpenKV(context.Background(), metakv.WrapBolt(db), opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.bolt = db
	return d, nil
}

// OpenKV opens the metadata in a key-value store (metakv): a bbolt
// file's, or a PostgreSQL database's.
func OpenKV(ctx context.Context, kv metakv.DB, opts Options) (*DB, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var id string
	err := kv.Update(ctx, func(tx metakv.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if v := meta.Get(keyID); v != nil {
			id = string(v)
		} else {
			id = uuid.NewString()
			if err := meta.Put(keyID, []byte(id)); err != nil {
				return err
			}
		}
		for _, b := range [][]byte{bucketQueues, bucketBlocks, bucketArrivals, bucketGroups, bucketDeliveries, bucketWindows, bucketStreams, bucketPolicies, bucketHighWater, bucketLocations, bucketStores, bucketCarries, bucketSamples, bucketOwners} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d := &DB{kv: kv, id: id, now: opts.Now, waiters: map[string]chan struct{}{}}
	if n, ok := kv.(metakv.Notifier); ok {
		d.listen(n)
	}
	return d, nil
}

var (
	bucketMeta = []byte("meta")
	keyID      = []byte("id")
)

// ID is the metadata's identity, made when it was created: it tells one
// server's data from another's (an agent's spool belongs to one).
func (d *DB) ID() string { return d.id }

// Changed returns a channel closed at the next change of a queue that may
// give a reader something to do: a block committed, a delivery released or
// requeued. Changed("") fires on a change of any queue. Take the channel
// before looking, so a change between looking and waiting is not missed.
func (d *DB) Changed(queue string) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch, ok := d.waiters[queue]
	if !ok {
		ch = make(chan struct{})
		d.waiters[queue] = ch
	}
	return ch
}

func (d *DB) notify(queues ...string) {
	d.wake(queues...)
	if n, ok := d.kv.(metakv.Notifier); ok {
		// The other servers on the store: their readers wait too. A lost
		// notice costs a reader its wait's timeout, not a block.
		n.Notify(context.Background(), changedChannel, strings.Join(queues, "\n"))
	}
}

// wake wakes this process's readers waiting on queues (all of them for
// a queue named ""), and those waiting on any queue.
func (d *DB) wake(queues ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if slices.Contains(queues, "") {
		for q, ch := range d.waiters {
			close(ch)
			delete(d.waiters, q)
		}
		return
	}
	for _, q := range append(queues, "") {
		if ch, ok := d.waiters[q]; ok {
			close(ch)
			delete(d.waiters, q)
		}
	}
}

// changedChannel is the PostgreSQL channel on which servers sharing the
// metadata tell each other which queues changed.
const changedChannel = "plumb_changed"

// listen wakes this process's readers when another server (or this one)
// says queues changed, until Close.
func (d *DB) listen(n metakv.Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	d.stopListen = func() { cancel(); <-done }
	go func() {
		defer close(done)
		n.Listen(ctx, changedChannel, func(payload string) { d.wake(strings.Split(payload, "\n")...) })
	}()
}

// Close closes the database.
func (d *DB) Close() error {
	if d.stopListen != nil {
		d.stopListen()
	}
	return d.kv.Close()
}

// Check verifies the integrity of the database file (every page reachable
// once); tests call it on cleanup.
func (d *DB) Check() error {
	if d.bolt == nil {
		return nil // PostgreSQL checks its own pages
	}
	return d.bolt.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

func u64(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}

func blockKey(instance string, seq uint64) []byte {
	return append(append([]byte(instance), 0), u64(seq)...)
}

// sub returns the nested bucket name under top, creating it when create.
func sub(tx metakv.Tx, top []byte, names ...string) (metakv.Bucket, error) {
	b := tx.Bucket(top)
	for _, n := range names {
		var nb metakv.Bucket
		if tx.Writable() {
			var err error
			if nb, err = b.CreateBucketIfNotExists([]byte(n)); err != nil {
				return nil, err
			}
			// Nested buckets are keyed by serial or by instance and
			// sequence number, so they grow at the end (of each site's
			// range): bbolt's default split leaves every page it passes
			// half empty, which doubled the metadata per block.
			metakv.GrowsAtEnd(nb)
		} else if nb = b.Bucket([]byte(n)); nb == nil {
			return nil, nil
		}
		b = nb
	}
	return b, nil
}

// getRecord reads the value of key in b, reporting false when there is
// none (or no bucket).
func getRecord[T any](b metakv.Bucket, key []byte) (T, bool, error) {
	var v T
	if b == nil {
		return v, false, nil
	}
	raw := b.Get(key)
	if raw == nil {
		return v, false, nil
	}
	return v, true, decode(raw, &v)
}

// decode reads a stored value. Delivery records are read by the thousand
// in every scan of what a group is owed, and nearly all have one of a few
// short shapes, {"state":S,"attempts":N[,"until":T][,"reserver":R]}:
// reading those by hand instead of with encoding/json took a busy server's
// scans from 40% of its CPU to a few.
//
// Blocks have a compact form of their own (see encodeBlock).
func decode[T any](raw []byte, v *T) error {
	if b, ok := any(v).(*Block); ok {
		return decodeBlock(raw, b)
	}
	if d, ok := any(v).(*Delivery); ok {
		if short, ok := shortDelivery(raw); ok {
			*d = short
			return nil
		}
	}
	return json.Unmarshal(raw, v)
}

// shortDelivery reads a delivery of a short shape, and reports false for
// any other (which encoding/json then reads).
func shortDelivery(raw []byte) (Delivery, bool) {
	var d Delivery
	st, rest, ok := shortString(raw, `{"state":`)
	if !ok {
		return d, false
	}
	switch string(st) {
	case string(Unreserved):
		d.State = Unreserved
	case string(Reserved):
		d.State = Reserved
	case string(Done):
		d.State = Done
	case string(Faulty):
		d.State = Faulty
	default:
		return d, false
	}
	rest, ok = bytes.CutPrefix(rest, []byte(`,"attempts":`))
	if !ok {
		return d, false
	}
	i := 0
	for ; i < len(rest) && i < 9 && '0' <= rest[i] && rest[i] <= '9'; i++ {
		d.Attempts = d.Attempts*10 + int(rest[i]-'0')
	}
	if i == 0 || i > 1 && rest[0] == '0' {
		return d, false
	}
	rest = rest[i:]
	if t, r, ok := shortString(rest, `,"until":`); ok {
		var err error
		if d.Until, err = time.Parse(time.RFC3339Nano, string(t)); err != nil {
			return d, false
		}
		rest = r
	}
	if who, r, ok := shortString(rest, `,"reserver":`); ok {
		d.Reserver, rest = string(who), r
	}
	return d, string(rest) == "}"
}

// shortString reads key and a JSON string without escapes from the start
// of raw, returning the string's bytes and what follows it.
func shortString(raw []byte, key string) ([]byte, []byte, bool) {
	rest, ok := bytes.CutPrefix(raw, []byte(key))
	if !ok || len(rest) == 0 || rest[0] != '"' {
		return nil, raw, false
	}
	rest = rest[1:]
	i := bytes.IndexByte(rest, '"')
	if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return nil, raw, false
	}
	return rest[:i], rest[i+1:], true
}

// listRecords decodes every value of a bucket (none when it is nil).
func listRecords[T any](b metakv.Bucket) ([]T, error) {
	var out []T
	if b == nil {
		return nil, nil
	}
	err := b.ForEach(func(_, v []byte) error {
		var x T
		if err := decode(v, &x); err != nil {
			return err
		}
		out = append(out, x)
		return nil
	})
	return out, err
}

// putRecord stores v: blocks in their compact form, the rest as JSON.
func putRecord(b metakv.Bucket, key []byte, v any) error {
	if blk, ok := v.(Block); ok {
		return b.Put(key, encodeBlock(blk))
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

// CommitBlock records a block whose blob is already durable. If the same
// identity is stored with the same checksum it returns Duplicate and the
// stored block; with a different checksum it returns an error wrapping
// ErrConflict and the stored block. A stored block gets one delivery
// record for every consumer group of its queue.
func (d *DB) CommitBlock(b Block) (Block, Status, error) {
	var (
		out    Block
		status Status
	)
	// Batched: concurrent puts share one commit (and one fsync).
	err := d.kv.Batch(context.Background(), func(tx metakv.Tx) error {
		var err error
		out, status, err = d.commitBlock(tx, b)
		return err
	})
	if err == nil && status == Stored {
		d.notify(b.Queue)
	}
	return out, status, err
}

func (d *DB) commitBlock(tx metakv.Tx, b Block) (Block, Status, error) {
	blocks, err := sub(tx, bucketBlocks, b.Queue)
	if err != nil {
		return Block{}, "", err
	}
	k := blockKey(b.Instance, b.Seq)
	old, ok, err := getRecord[Block](blocks, k)
	if err != nil {
		return Block{}, "", err
	}
	if ok {
		if old.SHA256 != b.SHA256 || old.Size != b.Size {
			return old, "", fmt.Errorf("%w: block %s is stored with sha256 %s (%d bytes); refusing sha256 %s (%d bytes); send it under a new sequence number or instance",
				ErrConflict, old.Name, old.SHA256, old.Size, b.SHA256, b.Size)
		}
		return old, Duplicate, nil
	}
	arrivals, err := sub(tx, bucketArrivals, b.Queue)
	if err != nil {
		return Block{}, "", err
	}
	if b.Serial, err = arrivals.NextSequence(); err != nil {
		return Block{}, "", err
	}
	b.Arrived = d.now().UTC()
	if err := putRecord(blocks, k, b); err != nil {
		return Block{}, "", err
	}
	if err := arrivals.Put(u64(b.Serial), k); err != nil {
		return Block{}, "", err
	}
	queues := tx.Bucket(bucketQueues)
	q, ok, err := getRecord[Queue](queues, []byte(b.Queue))
	if err != nil {
		return Block{}, "", err
	}
	if !ok {
		q = Queue{Name: b.Queue, Created: b.Arrived}
	}
	q.Blocks++
	q.Bytes += b.Size
	if err := putRecord(queues, []byte(b.Queue), q); err != nil {
		return Block{}, "", err
	}
	if err := addDeliveries(tx, b.Queue, b.Serial); err != nil {
		return Block{}, "", err
	}
	return b, Stored, nil
}

// Lookup returns the block with the given identity.
func (d *DB) Lookup(id block.ID) (Block, error) {
	var out Block
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		blocks, _ := sub(tx, bucketBlocks, id.Queue)
		b, ok, err := getRecord[Block](blocks, blockKey(id.Instance, id.Seq))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("block %s: %w", id, ErrNotFound)
		}
		if expired(tx, b, d.now()) {
			return fmt.Errorf("block %s expired (queue retention %s): %w", id, policyOf(tx, id.Queue).Retention, ErrNotFound)
		}
		out = b
		return nil
	})
	return out, err
}

// Queues lists every queue, sorted by name.
func (d *DB) Queues() ([]Queue, error) {
	var out []Queue
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		return tx.Bucket(bucketQueues).ForEach(func(k, v []byte) error {
			var q Queue
			if err := json.Unmarshal(v, &q); err != nil {
				return err
			}
			out = append(out, q)
			return nil
		})
	})
	return out, err
}

// Queue returns one queue's summary.
func (d *DB) Queue(name string) (Queue, error) {
	var out Queue
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		q, ok, err := getRecord[Queue](tx.Bucket(bucketQueues), []byte(name))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("queue %q: %w", name, ErrNotFound)
		}
		out = q
		return nil
	})
	return out, err
}

// Blocks returns up to limit blocks of a queue in arrival order, starting
// after the given serial (0 for the first).
func (d *DB) Blocks(queue string, after uint64, limit int) ([]Block, error) {
	var out []Block
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		arrivals, _ := sub(tx, bucketArrivals, queue)
		blocks, _ := sub(tx, bucketBlocks, queue)
		if arrivals == nil {
			return nil
		}
		c := arrivals.Cursor()
		now := d.now()
		for k, v := c.Seek(u64(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			b, ok, err := getRecord[Block](blocks, v)
			if err != nil {
				return err
			}
			if ok && !expired(tx, b, now) {
				out = append(out, b)
			}
		}
		return nil
	})
	return out, err
}

// LastSerial returns the serial of the newest block of a queue (0 if none).
func (d *DB) LastSerial(queue string) (uint64, error) {
	var n uint64
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		if a, _ := sub(tx, bucketArrivals, queue); a != nil {
			n = a.Sequence()
		}
		return nil
	})
	return n, err
}

func bytesU64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// MissingRecent counts the sequence numbers missing among an instance's
// latest span numbers up to last: between the lowest block stored in
// that span and last, the numbers no block holds. Only the span is read,
// so the cost does not grow with the queue's history; blocks retention
// removed from below the span's lowest stored block are not counted.
func (d *DB) MissingRecent(queue, instance string, last, span uint64) (uint64, error) {
	var missing uint64
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		var err error
		missing, err = eachRecent(tx, queue, instance, last, span, nil)
		return err
	})
	return missing, err
}

// eachRecent calls fn (when not nil) with each block stored among an
// instance's latest span sequence numbers up to last, in order, and
// returns how many numbers between the lowest of them and last no block
// holds.
func eachRecent(tx metakv.Tx, queue, instance string, last, span uint64, fn func(seq uint64, v []byte) error) (uint64, error) {
	blocks, _ := sub(tx, bucketBlocks, queue)
	if blocks == nil || span == 0 {
		return 0, nil
	}
	from := uint64(1)
	if last >= span {
		from = last - span + 1
	}
	prefix := append([]byte(instance), 0)
	c := blocks.Cursor()
	var lowest, n uint64
	for k, v := c.Seek(blockKey(instance, from)); k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+8; k, v = c.Next() {
		seq := bytesU64(k[len(prefix):])
		if seq > last {
			break
		}
		if n == 0 {
			lowest = seq
		}
		n++
		if fn != nil {
			if err := fn(seq, v); err != nil {
				return 0, err
			}
		}
	}
	if n == 0 {
		return 0, nil
	}
	return last - lowest + 1 - n, nil
}

// Site is what a site (an instance) shipped lately to a queue, read
// from its latest sequence numbers only.
type Site struct {
	Queue string `json:"queue"`
	Site  string `json:"site"`
	// LastSeq is the highest sequence number the site used, counting
	// blocks retention removed; Last the stored block with the highest.
	LastSeq uint64 `json:"last_seq"`
	Last    *Block `json:"last,omitempty"`
	// Blocks, Bytes and KernelDropped sum the stored blocks among the
	// span; FirstArrived is the earliest arrival among them.
	Blocks        int       `json:"blocks"`
	Bytes         int64     `json:"bytes"`
	KernelDropped int64     `json:"kernel_dropped"`
	FirstArrived  time.Time `json:"first_arrived,omitzero"`
	// Missing counts the numbers no block holds between the lowest stored
	// in the span and LastSeq (as MissingRecent).
	Missing uint64 `json:"missing"`
}

// SiteRecent summarises a site's latest span sequence numbers in a queue;
// its cost is the span's, whatever the queue's history.
func (d *DB) SiteRecent(queue, instance string, span uint64) (Site, error) {
	out := Site{Queue: queue, Site: instance}
	last, ok, err := d.LastSeq(queue, instance)
	if err != nil || !ok || span == 0 {
		return out, err
	}
	out.LastSeq = last
	err = d.kv.View(context.Background(), func(tx metakv.Tx) error {
		var err error
		out.Missing, err = eachRecent(tx, queue, instance, last, span, func(seq uint64, v []byte) error {
			var b Block
			if err := decode(v, &b); err != nil {
				return fmt.Errorf("block %s:%d of queue %s: %w", instance, seq, queue, err)
			}
			out.Blocks++
			out.Bytes += b.Size
			out.KernelDropped += b.KernelDropped
			if out.FirstArrived.IsZero() || b.Arrived.Before(out.FirstArrived) {
				out.FirstArrived = b.Arrived
			}
			out.Last = &b
			return nil
		})
		return err
	})
	return out, err
}

// LastSeq returns the highest sequence number stored for an instance in a
// queue, and false if the queue holds no block of that instance.
func (d *DB) LastSeq(queue, instance string) (uint64, bool, error) {
	var (
		seq   uint64
		found bool
	)
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		// Blocks retention deleted still count: their numbers are used.
		if hw := mustSub(tx, bucketHighWater, queue); hw != nil {
			if v := hw.Get([]byte(instance)); v != nil {
				seq, found = bytesU64(v), true
			}
		}
		blocks, _ := sub(tx, bucketBlocks, queue)
		if blocks == nil {
			return nil
		}
		prefix := append([]byte(instance), 0)
		c := blocks.Cursor()
		// The last key with the prefix is just before the first key past it.
		k, _ := c.Seek(append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
		if k == nil {
			k, _ = c.Last()
		} else {
			k, _ = c.Prev()
		}
		if k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+8 {
			seq, found = max(seq, bytesU64(k[len(prefix):])), true
		}
		return nil
	})
	return seq, found, err
}

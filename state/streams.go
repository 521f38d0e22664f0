package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/metakv"
)

// Cursor is a stream consumer's place in one site's ordered stream of a
// queue, with its small key-value state and its last checkpoint.
type Cursor struct {
	Queue    string `json:"queue"`
	Instance string `json:"instance"`
	Consumer string `json:"consumer"`
	// Owner is the user who opened the cursor first; only that user
	// (or an admin) moves it. Empty for the engine's own and on servers
	// without users.
	Owner    string            `json:"owner,omitempty"`
	OwnerID  string            `json:"owner_id,omitempty"` // the owner's stable id: a re-added name is someone else
	Next     uint64            `json:"next"`               // the next sequence number to process
	Pending  bool              `json:"pending"`            // Next was handed out, not yet committed
	Advanced time.Time         `json:"advanced"`           // when the cursor last moved
	Skipped  []uint64          `json:"skipped,omitempty"`
	Late     []uint64          `json:"late,omitempty"` // skipped blocks that arrived after, reported
	State    map[string]string `json:"state,omitempty"`
	// Checkpoint is where a restarted consumer resumes: a cursor and the
	// state that went with it, stored together.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
}

// Checkpoint is a cursor position and state saved atomically.
type Checkpoint struct {
	Next  uint64            `json:"next"`
	State map[string]string `json:"state,omitempty"`
	At    time.Time         `json:"at"`
	// Released: the blocks before it are released for replay retention.
	Released uint64 `json:"released,omitempty"`
}

// MaxStreamState bounds a consumer's state: it is for counters and
// offsets, not data.
const MaxStreamState = 64 << 10

var (
	bucketStreams = []byte("streams") // queue → instance\x00consumer → Cursor

	// ErrNotPresent: the block at the cursor has not arrived.
	ErrNotPresent = errors.New("the next block of the stream has not arrived")
	// ErrOwned: the consumer belongs to another user.
	ErrOwned = errors.New("belongs to another user")
	// ErrPresent: skip refuses to pass a block that is there.
	ErrPresent = errors.New("the next block is present; process it instead of skipping")
)

func cursorKey(instance, consumer string) []byte {
	return append(append([]byte(instance), 0), consumer...)
}

// firstSeq returns the lowest sequence number of an instance in a queue.
func firstSeq(tx metakv.Tx, queue, instance string) (uint64, bool) {
	blocks := mustSub(tx, bucketBlocks, queue)
	if blocks == nil {
		return 0, false
	}
	prefix := append([]byte(instance), 0)
	k, _ := blocks.Cursor().Seek(prefix)
	if k == nil || !bytes.HasPrefix(k, prefix) || len(k) != len(prefix)+8 {
		return 0, false
	}
	return bytesU64(k[len(prefix):]), true
}

// present reports whether the block of an instance's seq is stored.
func present(tx metakv.Tx, queue, instance string, seq uint64) bool {
	blocks := mustSub(tx, bucketBlocks, queue)
	return blocks != nil && blocks.Get(blockKey(instance, seq)) != nil
}

// nextPresent returns the lowest stored seq of an instance at or after seq.
func nextPresent(tx metakv.Tx, queue, instance string, seq uint64) (uint64, bool) {
	blocks := mustSub(tx, bucketBlocks, queue)
	if blocks == nil {
		return 0, false
	}
	prefix := append([]byte(instance), 0)
	k, _ := blocks.Cursor().Seek(blockKey(instance, seq))
	if k == nil || !bytes.HasPrefix(k, prefix) || len(k) != len(prefix)+8 {
		return 0, false
	}
	return bytesU64(k[len(prefix):]), true
}

// OpenCursor returns a consumer's cursor, creating it at from: "earliest"
// (the first stored block of the instance, or 1), "checkpoint" (its last
// checkpoint, or earliest), or a sequence number. An existing cursor moves
// to from unless from is empty.
func (d *DB) OpenCursor(queue, instance, consumer, from string) (Cursor, error) {
	return d.OpenOwnedCursor(queue, instance, consumer, from, "", "", true)
}

// Others reports whether the cursor belongs to someone other than the
// user (name and stable id), who is no admin: then the user may neither
// move nor read it. A user removed and added again under the same name is
// someone else.
func (c Cursor) Others(user, id string, admin bool) bool {
	return c.Owner != "" && !admin && (c.Owner != user || c.OwnerID != "" && id != "" && c.OwnerID != id)
}

// OpenOwnedCursor is OpenCursor for a user: a new cursor (or one from
// before cursors had owners) becomes owner's; another user's is refused
// with ErrOwned, untouched, unless admin.
func (d *DB) OpenOwnedCursor(queue, instance, consumer, from, owner, ownerID string, admin bool) (Cursor, error) {
	var c Cursor
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		sb, err := sub(tx, bucketStreams, queue)
		if err != nil {
			return err
		}
		k := cursorKey(instance, consumer)
		old, ok, err := getRecord[Cursor](sb, k)
		if err != nil {
			return err
		}
		c = old
		if ok && old.Others(owner, ownerID, admin) {
			return fmt.Errorf("stream consumer %s of %s/%s %w, %s", consumer, queue, instance, ErrOwned, old.Owner)
		}
		if !ok {
			c = Cursor{Queue: queue, Instance: instance, Consumer: consumer, Advanced: d.now().UTC()}
			if from == "" {
				from = "earliest"
			}
		}
		if c.Owner == "" {
			c.Owner, c.OwnerID = owner, ownerID
		}
		switch from {
		case "":
		case "earliest":
			c.Next = 1
			if s, ok := firstSeq(tx, queue, instance); ok {
				c.Next = s
			}
		case "checkpoint":
			if c.Checkpoint != nil {
				c.Next, c.State = c.Checkpoint.Next, maps.Clone(c.Checkpoint.State)
			} else if s, ok := firstSeq(tx, queue, instance); ok {
				c.Next = s
			} else {
				c.Next = 1
			}
		default:
			var n uint64
			if _, err := fmt.Sscan(from, &n); err != nil || n == 0 {
				return fmt.Errorf("from %q: want earliest, checkpoint or a sequence number", from)
			}
			c.Next = n
		}
		c.Pending = false
		return putRecord(sb, k, c)
	})
	return c, err
}

// DeleteCursor removes a stream consumer's cursor and state, releasing
// the blocks it held from retention.
func (d *DB) DeleteCursor(queue, instance, consumer string) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		sb := mustSub(tx, bucketStreams, queue)
		k := cursorKey(instance, consumer)
		if sb == nil || sb.Get(k) == nil {
			return fmt.Errorf("stream consumer %q of %s/%s: %w", consumer, queue, instance, ErrNotFound)
		}
		return sb.Delete(k)
	})
}

// updateCursor changes a cursor in one transaction.
func (d *DB) updateCursor(queue, instance, consumer string, fn func(tx metakv.Tx, c *Cursor) error) (Cursor, error) {
	var c Cursor
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		sb, err := sub(tx, bucketStreams, queue)
		if err != nil {
			return err
		}
		k := cursorKey(instance, consumer)
		cur, ok, err := getRecord[Cursor](sb, k)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("stream consumer %q of %s/%s: %w (open it with a stream ticket or peek-next first)", consumer, queue, instance, ErrNotFound)
		}
		if err := fn(tx, &cur); err != nil {
			return err
		}
		c = cur
		return putRecord(sb, k, cur)
	})
	return c, err
}

// Peek is where a stream stands for a consumer.
type Peek struct {
	Next    uint64 `json:"next"`
	Present bool   `json:"present"`
	// Gap is 1 when the next block is present, k+1 when k blocks are
	// missing before the next present one, 0 when none is stored past the
	// cursor, and seq-next (negative) when a block arrived behind the
	// cursor (Late lists those, each reported once).
	Gap   int64         `json:"gap"`
	Late  []uint64      `json:"late,omitempty"`
	Since time.Duration `json:"since_ns"` // since the cursor last moved
}

// PeekNext reports the next block of a consumer's stream without moving.
func (d *DB) PeekNext(queue, instance, consumer string) (Peek, error) {
	var p Peek
	now := d.now()
	_, err := d.updateCursor(queue, instance, consumer, func(tx metakv.Tx, c *Cursor) error {
		p = Peek{Next: c.Next, Since: now.Sub(c.Advanced)}
		// Skipped blocks that came since are late: reported once.
		for _, s := range c.Skipped {
			if present(tx, queue, instance, s) && !slices.Contains(c.Late, s) {
				p.Late = append(p.Late, s)
				c.Late = append(c.Late, s)
			}
		}
		switch n, ok := nextPresent(tx, queue, instance, c.Next); {
		case ok && n == c.Next:
			p.Present, p.Gap = true, 1
		case ok:
			p.Gap = int64(n-c.Next) + 1
		}
		if len(p.Late) > 0 {
			p.Gap = int64(p.Late[0]) - int64(c.Next) // behind the cursor: negative
		}
		return nil
	})
	return p, err
}

// ProcessNext hands out the block at the cursor; the cursor moves when
// the consumer commits it.
func (d *DB) ProcessNext(queue, instance, consumer string) (Block, error) {
	var b Block
	_, err := d.updateCursor(queue, instance, consumer, func(tx metakv.Tx, c *Cursor) error {
		blk, ok, err := getRecord[Block](mustSub(tx, bucketBlocks, queue), blockKey(instance, c.Next))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s/%s seq %d: %w", queue, instance, c.Next, ErrNotPresent)
		}
		b, c.Pending = blk, true
		return nil
	})
	return b, err
}

// Commit moves the cursor past seq, which must be the cursor's block.
func (d *DB) Commit(queue, instance, consumer string, seq uint64) (Cursor, error) {
	now := d.now().UTC()
	return d.updateCursor(queue, instance, consumer, func(tx metakv.Tx, c *Cursor) error {
		if seq != c.Next {
			return fmt.Errorf("commit of seq %d: the cursor is at %d", seq, c.Next)
		}
		c.Next, c.Pending, c.Advanced = c.Next+1, false, now
		return nil
	})
}

// Skip moves the cursor past a missing block on purpose, and records it.
func (d *DB) Skip(queue, instance, consumer string) (Cursor, error) {
	now := d.now().UTC()
	return d.updateCursor(queue, instance, consumer, func(tx metakv.Tx, c *Cursor) error {
		if present(tx, queue, instance, c.Next) {
			return fmt.Errorf("%s/%s seq %d: %w", queue, instance, c.Next, ErrPresent)
		}
		c.Skipped = append(c.Skipped, c.Next)
		c.Next, c.Pending, c.Advanced = c.Next+1, false, now
		return nil
	})
}

// PutState sets (or with an empty value deletes) keys of a consumer's
// state.
func (d *DB) PutState(queue, instance, consumer string, kv map[string]string) (Cursor, error) {
	return d.updateCursor(queue, instance, consumer, func(tx metakv.Tx, c *Cursor) error {
		if c.State == nil {
			c.State = map[string]string{}
		}
		for k, v := range kv {
			if v == "" {
				delete(c.State, k)
			} else {
				c.State[k] = v
			}
		}
		size := 0
		for k, v := range c.State {
			size += len(k) + len(v)
		}
		if size > MaxStreamState {
			return fmt.Errorf("stream state of %q would be %d bytes; it holds at most %d (keep data in outputs, not state)", consumer, size, MaxStreamState)
		}
		return nil
	})
}

// GetCursor returns a consumer's cursor and state.
func (d *DB) GetCursor(queue, instance, consumer string) (Cursor, error) {
	return d.updateCursor(queue, instance, consumer, func(metakv.Tx, *Cursor) error { return nil })
}

// SaveCheckpoint stores the cursor and the state together, so a consumer
// restarting from its checkpoint resumes exactly there. With state nil
// the current state is saved.
func (d *DB) SaveCheckpoint(queue, instance, consumer string, state map[string]string) (Cursor, error) {
	return d.SaveCheckpointAt(queue, instance, consumer, 0, state)
}

// SaveCheckpointAt is SaveCheckpoint at next instead of the cursor (0:
// the cursor): a reader that is sent blocks ahead of what it has written
// (the stream ticket moves the cursor as it sends) checkpoints what it
// wrote. next may not pass the cursor, but for the block at the cursor
// that was handed out (Pending): the stream ticket commits a block after
// sending it, and its reader may have written it, and checkpointed past
// it, before that commit.
func (d *DB) SaveCheckpointAt(queue, instance, consumer string, next uint64, state map[string]string) (Cursor, error) {
	now := d.now().UTC()
	return d.updateCursor(queue, instance, consumer, func(tx metakv.Tx, c *Cursor) error {
		if next == 0 {
			next = c.Next
		}
		if next > c.Next && (!c.Pending || next != c.Next+1) {
			return fmt.Errorf("checkpoint at %d: past the cursor of stream consumer %s of %s/%s, at %d: nothing after it was read", next, consumer, queue, instance, c.Next)
		}
		if state != nil {
			c.State = maps.Clone(state)
		}
		c.Checkpoint = &Checkpoint{Next: next, State: maps.Clone(c.State), At: now}
		return nil
	})
}

// Cursors lists a queue's stream consumers.
func (d *DB) Cursors(queue string) ([]Cursor, error) {
	var out []Cursor
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		var err error
		out, err = listRecords[Cursor](mustSub(tx, bucketStreams, queue))
		return err
	})
	return out, err
}

// CheckpointAt stores a checkpoint at a given next sequence number with
// the state a stream program reported for it: the program has processed
// every block before next. When the consumer is also a consumer group of
// the queue (a stream stage), the blocks before next are released for it,
// so retention may let them go; it returns those blocks. keepBlocks and
// keepFor hold back that many blocks, or that much event time, behind the
// checkpoint, so the consumer can replay them; they are released by
// later checkpoints.
func (d *DB) CheckpointAt(queue, instance, consumer string, next uint64, st map[string]string, keepBlocks uint64, keepFor time.Duration) ([]Block, error) {
	now := d.now().UTC()
	var released []Block
	_, err := d.updateCursor(queue, instance, consumer, func(tx metakv.Tx, c *Cursor) error {
		released = released[:0]
		from := uint64(1)
		if c.Checkpoint != nil && c.Checkpoint.Released > 0 {
			from = c.Checkpoint.Released
		}
		c.State = maps.Clone(st)
		ck := &Checkpoint{Next: next, State: maps.Clone(st), At: now, Released: from}
		c.Checkpoint = ck
		dels := mustSub(tx, bucketDeliveries, queue, consumer)
		if dels == nil {
			return nil
		}
		blocks := mustSub(tx, bucketBlocks, queue)
		upTo := next // release the blocks before this
		if keepBlocks > 0 {
			upTo = next - min(keepBlocks, next)
		}
		var horizon time.Time
		if keepFor > 0 {
			last, ok, err := getRecord[Block](blocks, blockKey(instance, next-1))
			if err != nil || !ok {
				return err // without the newest block's time, keep all
			}
			horizon = last.Time.Add(-keepFor)
		}
		for seq := from; seq < upTo; seq++ {
			b, ok, err := getRecord[Block](blocks, blockKey(instance, seq))
			if err != nil {
				return err
			}
			if ok && keepFor > 0 && !b.Time.Before(horizon) {
				break // times grow with seq: the rest are within the replay span
			}
			ck.Released = seq + 1
			if !ok {
				continue
			}
			_, changed, err := markDone(tx, queue, consumer, b.Serial)
			if err != nil {
				return err
			}
			if changed {
				released = append(released, b)
			}
		}
		if len(released) == 0 {
			return nil
		}
		return advanceFloor(tx, queue, consumer)
	})
	return released, err
}

// Instances lists the instances with blocks in a queue, sorted.
func (d *DB) Instances(queue string) ([]string, error) {
	var out []string
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		blocks := mustSub(tx, bucketBlocks, queue)
		if blocks == nil {
			return nil
		}
		c := blocks.Cursor()
		for k, _ := c.First(); k != nil; {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				k, _ = c.Next()
				continue
			}
			inst := string(k[:i])
			out = append(out, inst)
			// Jump past every key of this instance.
			k, _ = c.Seek(append([]byte(inst), 1))
		}
		return nil
	})
	return out, err
}

// StreamOwed returns how many blocks a stream consumer has yet to read
// (those stored at or past its cursor) and when the first of them arrived
// (false when there is none).
func (d *DB) StreamOwed(c Cursor) (n int64, first time.Time, ok bool, err error) {
	err = d.kv.View(context.Background(), func(tx metakv.Tx) error {
		blocks := mustSub(tx, bucketBlocks, c.Queue)
		if blocks == nil {
			return nil
		}
		prefix := append([]byte(c.Instance), 0)
		cur := blocks.Cursor()
		for k, _ := cur.Seek(blockKey(c.Instance, c.Next)); k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+8; k, _ = cur.Next() {
			if n == 0 {
				b, _, err := getRecord[Block](blocks, k)
				if err != nil {
					return fmt.Errorf("block %s/%s seq %d: %w", c.Queue, c.Instance, bytesU64(k[len(prefix):]), err)
				}
				first, ok = b.Arrived, true
			}
			n++
		}
		return nil
	})
	return n, first, ok, err
}

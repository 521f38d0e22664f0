package state

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/plumb-dev/plumb/metakv"
)

// Carry is what a sequential stage hands from one block of a site to the
// next: the stage's state after the site's blocks up to Next-1.
type Carry struct {
	Next  uint64 `json:"next"` // the sequence number the state goes on with
	State []byte `json:"state,omitempty"`
	// StateKey names the blob that holds the state, kept out of the
	// metadata: a site's state is up to a stage's budget (16 MiB), and
	// rewriting it in every commit bloated the metadata file.
	StateKey string    `json:"state_key,omitempty"`
	Gaps     uint64    `json:"gaps,omitempty"` // sequence numbers skipped (never arrived in time, or FAULTY)
	Late     uint64    `json:"late,omitempty"` // blocks that came after their place was skipped, run on their own
	Updated  time.Time `json:"updated"`
}

// CarryIn is how a reserved block of a sequential stage is to run.
type CarryIn struct {
	Instance string
	// Carried: the block goes on from State (its site's previous block,
	// or the start); the run's new state is committed with it. Not
	// carried: a late block, run on its own, its state dropped.
	Carried  bool
	State    []byte
	StateKey string // the blob holding State, when it is not inline
	// Gap: sequence numbers before this block were skipped; State is to
	// be let go of before the block.
	Gap bool
}

var bucketCarries = []byte("carries") // group → instance → Carry

// GetCarry returns a group's carry for an instance.
func (d *DB) GetCarry(group, instance string) (Carry, bool, error) {
	var c Carry
	var ok bool
	err := d.kv.View(context.Background(), func(tx metakv.Tx) (err error) {
		c, ok, err = getRecord[Carry](mustSub(tx, bucketCarries, group), []byte(instance))
		return err
	})
	return c, ok, err
}

// ReserveNext reserves, for a sequential stage, the next block of some
// site in sequence order: the block its site's carry goes on with; the
// first owed block of a site without one (sequence 1, or the lowest owed
// once lower ones had gapWait to come); past a gap, the next present
// block once gapWait has passed since the carry last moved and the
// missing ones are neither owed nor stored; or a late block (before its
// site's carry), which runs on its own. A site has at most one carried
// run at a time, since its carry moves only when that run commits.
// skip, when not nil, passes over blocks (by serial) that are not this
// caller's to take now: their first half is held by another process.
func (d *DB) ReserveNext(queue, group, reserver string, visibility, gapWait time.Duration, skip func(serial uint64) bool) (Reservation, CarryIn, bool, error) {
	var (
		out Reservation
		in  CarryIn
	)
	now := d.now()
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		arrivals, blocks, carries, dels, err := sequenceBuckets(tx, queue, group)
		if err != nil {
			return err
		}
		take := func(serial []byte, b Block, with CarryIn) error {
			del, _, err := getRecord[Delivery](dels, serial)
			if err != nil {
				return err
			}
			del.State, del.Until, del.Reserver = Reserved, now.Add(visibility), reserver
			del.Attempts++
			if err := putRecord(dels, serial, del); err != nil {
				return err
			}
			out, in = Reservation{Blocks: []Block{b}, Attempt: del.Attempts}, with
			return nil
		}
		// The common case, found without scanning the backlog: a site's
		// next block in sequence is here and free.
		if err := carries.ForEach(func(inst, raw []byte) error {
			if out.Blocks != nil {
				return nil
			}
			var c Carry
			if json.Unmarshal(raw, &c) != nil {
				return nil
			}
			b, ok, err := getRecord[Block](blocks, blockKey(string(inst), c.Next))
			if err != nil || !ok {
				return err
			}
			del, ok, err := getRecord[Delivery](dels, u64(b.Serial))
			if err != nil || !ok || !del.available(now) || del.Part != "" && skip != nil && skip(b.Serial) {
				return err
			}
			return take(u64(b.Serial), b, CarryIn{Instance: b.Instance, Carried: true, State: c.State, StateKey: c.StateKey})
		}); err != nil || out.Blocks != nil {
			return err
		}
		// Otherwise scan: a site's first block, a late one, one past a
		// gap. The lowest sequence number each site still owes, and the
		// blocks that could run now.
		type cand struct {
			serial []byte
			b      Block
		}
		lowest := map[string]uint64{}
		var ready []cand
		if err := eachOwed(tx, queue, group, func(k []byte, del Delivery) (bool, error) {
			if del.State != Unreserved && del.State != Reserved {
				return false, nil
			}
			b, ok, err := getRecord[Block](blocks, arrivals.Get(k))
			if err != nil || !ok {
				return false, err
			}
			if l, seen := lowest[b.Instance]; !seen || b.Seq < l {
				lowest[b.Instance] = b.Seq
			}
			if del.available(now) && (del.Part == "" || skip == nil || !skip(b.Serial)) {
				ready = append(ready, cand{append([]byte(nil), k...), b})
			}
			return false, nil
		}); err != nil {
			return err
		}
		for _, c := range ready {
			b := c.b
			carry, have, err := getRecord[Carry](carries, []byte(b.Instance))
			if err != nil {
				return err
			}
			switch {
			case !have && b.Seq == lowest[b.Instance] && (b.Seq <= 1 || present(tx, queue, b.Instance, b.Seq-1) || now.Sub(b.Arrived) >= gapWait):
				// A site's first block: sequence 1, or the lowest owed once
				// lower ones had time to come.
				in = CarryIn{Instance: b.Instance, Carried: true}
			case have && b.Seq == carry.Next:
				in = CarryIn{Instance: b.Instance, Carried: true, State: carry.State, StateKey: carry.StateKey}
			case have && b.Seq < carry.Next:
				in = CarryIn{Instance: b.Instance} // late: on its own
			case have && b.Seq > carry.Next && b.Seq == lowest[b.Instance] &&
				(now.Sub(carry.Updated) >= gapWait && !present(tx, queue, b.Instance, carry.Next) ||
					allPresent(tx, queue, b.Instance, carry.Next, b.Seq)):
				// Past a gap: the missing blocks had gapWait to come, or
				// none is missing and those skipped were set aside (a
				// FAULTY block of a run in parallel) and will not run.
				in = CarryIn{Instance: b.Instance, Carried: true, State: carry.State, StateKey: carry.StateKey, Gap: true}
			default:
				continue
			}
			return take(c.serial, b, in)
		}
		return nil
	})
	if err != nil || out.Blocks == nil {
		return Reservation{}, CarryIn{}, false, err
	}
	return out, in, true, nil
}

// allPresent reports whether an instance's blocks from seq up to, not
// including, end are all stored.
func allPresent(tx metakv.Tx, queue, instance string, seq, end uint64) bool {
	for ; seq < end; seq++ {
		if !present(tx, queue, instance, seq) {
			return false
		}
	}
	return true
}

// ReservePart reserves, for an edged stage, the first half of a run on
// a block it owes that has none done yet: of the blocks free, the one
// whose turn in its site's sequence comes soonest (the fewest sequence
// numbers past its site's carry). The other half runs in sequence
// (ReserveNext).
func (d *DB) ReservePart(queue, group, reserver string, visibility time.Duration) (Reservation, bool, error) {
	var out Reservation
	now := d.now()
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		arrivals, blocks, carries, dels, err := sequenceBuckets(tx, queue, group)
		if err != nil {
			return err
		}
		next := map[string]uint64{} // each site's carry
		var (
			best     []byte
			bestB    Block
			bestDel  Delivery
			bestRank uint64
		)
		if err := eachOwed(tx, queue, group, func(k []byte, del Delivery) (bool, error) {
			if del.Part != "" || !del.available(now) {
				return false, nil
			}
			b, ok, err := getRecord[Block](blocks, arrivals.Get(k))
			if err != nil || !ok {
				return false, err
			}
			n, seen := next[b.Instance]
			if !seen {
				c, _, err := getRecord[Carry](carries, []byte(b.Instance))
				if err != nil {
					return false, err
				}
				n = c.Next
				next[b.Instance] = n
			}
			rank := b.Seq - min(n, b.Seq) // a late block (before its carry) first
			if best == nil || rank < bestRank {
				best, bestB, bestDel, bestRank = append([]byte(nil), k...), b, del, rank
			}
			return false, nil
		}); err != nil || best == nil {
			return err
		}
		bestDel.State, bestDel.Until, bestDel.Reserver = Reserved, now.Add(visibility), reserver
		bestDel.Attempts++
		if err := putRecord(dels, best, bestDel); err != nil {
			return err
		}
		out = Reservation{Blocks: []Block{bestB}, Attempt: bestDel.Attempts}
		return nil
	})
	return out, out.Blocks != nil, err
}

// CommitPart records that the first half of a run is done and held as
// part: the block is free again, for its turn in sequence, and the
// attempts made so far still count.
func (d *DB) CommitPart(r Run, part string) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		if err := holds(tx, r); err != nil {
			return err
		}
		dels := mustSub(tx, bucketDeliveries, r.Inputs[0].Queue, r.Group)
		k := u64(r.Inputs[0].Serial)
		del, _, err := getRecord[Delivery](dels, k)
		if err != nil {
			return err
		}
		del.State, del.Until, del.Reserver, del.Part = Unreserved, time.Time{}, "", part
		return putRecord(dels, k, del)
	})
}

// CarryUpdate moves a site's carry with a committed run (or past a block
// set aside as FAULTY, whose state is lost).
type CarryUpdate struct {
	Instance string
	Seq      uint64 // the block the run was over
	State    []byte
	StateKey string // the blob holding State instead
	Late     bool   // the block ran on its own: the carry only counts it
	Faulty   bool   // the block was set aside: the carry skips it
}

func putCarry(tx metakv.Tx, group string, u *CarryUpdate, now time.Time) error {
	carries, err := sub(tx, bucketCarries, group)
	if err != nil {
		return err
	}
	c, have, err := getRecord[Carry](carries, []byte(u.Instance))
	if err != nil {
		return err
	}
	if u.Late {
		c.Late++
	} else {
		if have && u.Seq > c.Next {
			c.Gaps += u.Seq - c.Next
		}
		if u.Faulty {
			c.Gaps++
		}
		c.Next, c.State, c.StateKey = u.Seq+1, u.State, u.StateKey
	}
	c.Updated = now.UTC()
	if len(c.State) > MaxCarry {
		return fmt.Errorf("the state a stage carries for %s is %d bytes, over %d", u.Instance, len(c.State), MaxCarry)
	}
	return putRecord(carries, []byte(u.Instance), c)
}

// MaxCarry bounds the state a stage carries per site.
const MaxCarry = 64 << 20

// DeleteCarries forgets a group's carries, for a stage that left the
// graph.
func (d *DB) DeleteCarries(group string) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		top := tx.Bucket(bucketCarries)
		if top == nil || top.Bucket([]byte(group)) == nil {
			return nil
		}
		return top.DeleteBucket([]byte(group))
	})
}

// sequenceBuckets are what a reservation in sequence reads: the queue's
// arrivals and blocks, the group's carries and its deliveries. The group
// must exist.
func sequenceBuckets(tx metakv.Tx, queue, group string) (arrivals, blocks, carries, dels metakv.Bucket, err error) {
	if _, _, err := loadGroup(tx, queue, group); err != nil {
		return nil, nil, nil, nil, err
	}
	if carries, err = sub(tx, bucketCarries, group); err != nil {
		return nil, nil, nil, nil, err
	}
	return mustSub(tx, bucketArrivals, queue), mustSub(tx, bucketBlocks, queue), carries, mustSub(tx, bucketDeliveries, queue, group), nil
}

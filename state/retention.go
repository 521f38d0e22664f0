package state

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/metakv"
)

// Policy is a queue's retention, as the protocol defines it.
type Policy = flight.Policy

// Lost is the state of a delivery whose block the queue's retention
// dropped before the subscriber was done with it.
const Lost DeliveryState = "LOST"

var (
	bucketPolicies  = []byte("policies")  // queue → Policy
	bucketHighWater = []byte("highwater") // queue → instance → highest seq ever stored
)

// SetPolicy sets a queue's retention; a zero Policy removes it (blocks
// are then kept until consumed, or forever on source queues).
func (d *DB) SetPolicy(queue string, p Policy) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		b := tx.Bucket(bucketPolicies)
		if p.MaxAge == 0 && p.MaxBytes == 0 && p.Retention == "" {
			return b.Delete([]byte(queue))
		}
		return putRecord(b, []byte(queue), p)
	})
}

// Policies returns every queue's retention policy.
func (d *DB) Policies() (map[string]Policy, error) {
	out := map[string]Policy{}
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		b := tx.Bucket(bucketPolicies)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var p Policy
			if err := json.Unmarshal(v, &p); err != nil {
				return err
			}
			out[string(k)] = p
			return nil
		})
	})
	return out, err
}

func policyOf(tx metakv.Tx, queue string) Policy {
	var p Policy
	if b := tx.Bucket(bucketPolicies); b != nil {
		p, _, _ = getRecord[Policy](b, []byte(queue))
	}
	return p
}

// owed reports whether any consumer group of the block's queue still owes
// it, or a stream consumer of its site has not checkpointed past it.
func owed(tx metakv.Tx, b Block) bool {
	groups := mustSub(tx, bucketGroups, b.Queue)
	held := false
	if groups != nil {
		groups.ForEach(func(g, _ []byte) error {
			del, ok, _ := deliveryOf(tx, b.Queue, string(g), b.Serial)
			if ok && del.State != Done && del.State != Faulty && del.State != Lost {
				held = true
				return errStop
			}
			return nil
		})
	}
	if sb := mustSub(tx, bucketStreams, b.Queue); sb != nil && !held {
		sb.ForEach(func(_, v []byte) error {
			var c Cursor
			if json.Unmarshal(v, &c) != nil {
				return nil
			}
			pos := c.Next
			if c.Checkpoint != nil {
				pos = c.Checkpoint.Next
			}
			held = held || c.Instance == b.Instance && b.Seq >= pos
			return nil
		})
	}
	return held
}

// expired reports whether a block has outlived its queue's MaxAge and no
// one still needs it: such a block is gone for readers at once, before
// the sweep deletes it.
func expired(tx metakv.Tx, b Block, now time.Time) bool {
	p := policyOf(tx, b.Queue)
	return p.MaxAge > 0 && now.Sub(b.Arrived) >= p.MaxAge && (p.DropUnconsumed || !owed(tx, b))
}

// ExpireResult is what one Expire pass let go.
type ExpireResult struct {
	Deleted []Block     `json:"deleted"` // their blobs are for the caller to delete
	Lost    []LostBlock `json:"lost"`    // deliveries dropped unconsumed
	Kept    int         `json:"kept"`    // past the limits but still owed
}

// LostBlock is a delivery whose block retention dropped unconsumed, as the protocol defines it.
type LostBlock = flight.LostBlock

// Expire deletes up to limit of a queue's oldest blocks that its policy
// lets go: older than MaxAge, or beyond the newest MaxBytes. A block a
// subscriber still owes is kept, unless the policy drops unconsumed
// blocks; then each such subscriber's delivery becomes LOST. The highest
// sequence number of each site is remembered, so an agent that lost its
// state never reuses one of an expired block.
func (d *DB) Expire(queue string, limit int) (ExpireResult, error) {
	var res ExpireResult
	now := d.now()
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		p := policyOf(tx, queue)
		if p.MaxAge == 0 && p.MaxBytes == 0 {
			return nil
		}
		queues := tx.Bucket(bucketQueues)
		q, ok, err := getRecord[Queue](queues, []byte(queue))
		if err != nil || !ok {
			return err
		}
		arrivals, blocks := mustSub(tx, bucketArrivals, queue), mustSub(tx, bucketBlocks, queue)
		hw, err := sub(tx, bucketHighWater, queue)
		if err != nil {
			return err
		}
		bytesLeft := q.Bytes
		var gone [][]byte
		c := arrivals.Cursor()
		for k, v := c.First(); k != nil && len(res.Deleted) < limit; k, v = c.Next() {
			b, ok, err := getRecord[Block](blocks, v)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			// bytesLeft is what this block and the newer ones hold.
			tooOld := p.MaxAge > 0 && now.Sub(b.Arrived) >= p.MaxAge
			tooMuch := p.MaxBytes > 0 && bytesLeft > p.MaxBytes
			if !tooOld && !tooMuch {
				break // arrival order: the rest are younger, and fit
			}
			bytesLeft -= b.Size
			why := fmt.Sprintf("dropped unconsumed by retention %s", p.Retention)
			if owed(tx, b) {
				if !p.DropUnconsumed {
					res.Kept++
					continue
				}
				lost, err := loseDeliveries(tx, b, why)
				if err != nil {
					return err
				}
				res.Lost = append(res.Lost, lost...)
			}
			if err := forgetBlock(tx, b, hw, blocks); err != nil {
				return err
			}
			gone = append(gone, bytes.Clone(k))
			q.Blocks--
			q.Bytes -= b.Size
			res.Deleted = append(res.Deleted, b)
		}
		for _, k := range gone {
			if err := arrivals.Delete(k); err != nil {
				return err
			}
		}
		if len(gone) == 0 {
			return nil
		}
		return putRecord(queues, []byte(queue), q)
	})
	return res, err
}

// forgetBlock removes a block's metadata but for its arrival entry (the
// caller's cursor may be on it) and queue counts, keeping LOST deliveries
// and the site's highest sequence number.
func forgetBlock(tx metakv.Tx, b Block, hw, blocks metakv.Bucket) error {
	if err := forgetDeliveries(tx, b); err != nil {
		return err
	}
	if last := hw.Get([]byte(b.Instance)); last == nil || bytesU64(last) < b.Seq {
		if err := hw.Put([]byte(b.Instance), u64(b.Seq)); err != nil {
			return err
		}
	}
	return blocks.Delete(blockKey(b.Instance, b.Seq))
}

// MarkLost records that a block's bytes are gone (its blob missing or
// corrupt): the metadata goes, and every subscriber still owed it gets a
// LOST delivery saying why. It does nothing (false) unless the block is
// still stored under that blob key, so a block deleted or replaced
// meanwhile is left alone.
func (d *DB) MarkLost(id block.ID, key, why string) (bool, error) {
	marked := false
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		blocks := mustSub(tx, bucketBlocks, id.Queue)
		b, ok, err := getRecord[Block](blocks, blockKey(id.Instance, id.Seq))
		if err != nil || !ok || b.Key != key {
			return err
		}
		if _, err := loseDeliveries(tx, b, why); err != nil {
			return err
		}
		hw, err := sub(tx, bucketHighWater, id.Queue)
		if err != nil {
			return err
		}
		if err := forgetBlock(tx, b, hw, blocks); err != nil {
			return err
		}
		if err := mustSub(tx, bucketArrivals, id.Queue).Delete(u64(b.Serial)); err != nil {
			return err
		}
		queues := tx.Bucket(bucketQueues)
		q, _, err := getRecord[Queue](queues, []byte(id.Queue))
		if err != nil {
			return err
		}
		q.Blocks--
		q.Bytes -= b.Size
		marked = true
		return putRecord(queues, []byte(id.Queue), q)
	})
	if marked {
		d.notify(id.Queue)
	}
	return marked, err
}

// loseDeliveries marks the deliveries still owed of a block LOST.
func loseDeliveries(tx metakv.Tx, b Block, why string) ([]LostBlock, error) {
	var out []LostBlock
	groups := mustSub(tx, bucketGroups, b.Queue)
	if groups == nil {
		return nil, nil
	}
	err := groups.ForEach(func(g, _ []byte) error {
		dels := mustSub(tx, bucketDeliveries, b.Queue, string(g))
		del, ok, err := getRecord[Delivery](dels, u64(b.Serial))
		if err != nil || !ok || del.State == Done || del.State == Faulty || del.State == Lost {
			return err
		}
		del.State, del.Reserver, del.Until, del.Block = Lost, "", time.Time{}, b.Name
		del.LastError = why
		out = append(out, LostBlock{Queue: b.Queue, Group: string(g), Block: b.Name, Why: why})
		return putRecord(dels, u64(b.Serial), del)
	})
	return out, err
}

// forgetDeliveries removes a deleted block's finished deliveries; LOST
// ones stay, so the subscriber can be told.
func forgetDeliveries(tx metakv.Tx, b Block) error {
	groups := mustSub(tx, bucketGroups, b.Queue)
	if groups == nil {
		return nil
	}
	return groups.ForEach(func(g, _ []byte) error {
		del, ok, err := deliveryOf(tx, b.Queue, string(g), b.Serial)
		if err != nil || !ok || del.State == Lost {
			return err
		}
		return forgetDelivery(tx, b.Queue, string(g), b.Serial)
	})
}

// LostBlocks lists the blocks a queue's retention dropped before a group
// (or any group, with "") was done with them.
func (d *DB) LostBlocks(queue, group string) ([]LostBlock, error) {
	var out []LostBlock
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		groups := mustSub(tx, bucketGroups, queue)
		if groups == nil {
			return nil
		}
		return groups.ForEach(func(g, _ []byte) error {
			if group != "" && string(g) != group {
				return nil
			}
			return eachUnsettled(tx, queue, string(g), func(_ []byte, del Delivery) (bool, error) {
				if del.State == Lost {
					out = append(out, LostBlock{Queue: queue, Group: string(g), Block: del.Block, Why: del.LastError})
				}
				return false, nil
			})
		})
	})
	slices.SortFunc(out, func(a, b LostBlock) int { return bytes.Compare([]byte(a.Block), []byte(b.Block)) })
	return out, err
}

// Rekey points a block at new bytes (a recomputed block whose stage is not
// deterministic), keeping its place and deliveries. It does nothing unless
// the block still has the old key.
func (d *DB) Rekey(id block.ID, oldKey, newKey, sha string, size int64) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		blocks := mustSub(tx, bucketBlocks, id.Queue)
		b, ok, err := getRecord[Block](blocks, blockKey(id.Instance, id.Seq))
		if err != nil || !ok || b.Key != oldKey {
			return err
		}
		queues := tx.Bucket(bucketQueues)
		q, _, err := getRecord[Queue](queues, []byte(id.Queue))
		if err != nil {
			return err
		}
		q.Bytes += size - b.Size
		b.Key, b.SHA256, b.Size = newKey, sha, size
		if err := putRecord(queues, []byte(id.Queue), q); err != nil {
			return err
		}
		return putRecord(blocks, blockKey(id.Instance, id.Seq), b)
	})
}

package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/metakv"
)

// ErrLostReservation is returned when a run commits or fails inputs it no
// longer holds: its reservation expired and passed to another run, or the
// block was finished by one. Nothing of the late run is published.
var ErrLostReservation = errors.New("the run no longer holds its input's reservation")

// Reservation is a set of blocks reserved for one run.
type Reservation struct {
	Blocks []Block
	// Attempt counts the runs the set has been handed to, this one
	// included.
	Attempt int
}

// ReserveJoin reserves, for one group, a block of the first queue together
// with the blocks of the same instance and sequence number in every other
// queue (a stage with several inputs joins them so). It takes the oldest
// such set whose deliveries are all available, and returns the blocks in
// queue order and false when none is complete now.
func (d *DB) ReserveJoin(queues []string, group, reserver string, visibility time.Duration) (Reservation, bool, error) {
	res, err := d.reserveJoin(queues, group, reserver, visibility, 0, 1, 0)
	if len(res) == 0 {
		return Reservation{}, false, err
	}
	return res[0], true, err
}

// reserveJoin reserves in one transaction up to most sets (see
// ReserveJoin) past serial after, and stops before a set would take the
// first queue's bytes past mostBytes (0: no bound); the first set is
// taken whatever its size.
func (d *DB) reserveJoin(queues []string, group, reserver string, visibility time.Duration, after uint64, most int, mostBytes int64) ([]Reservation, error) {
	var out []Reservation
	now := d.now()
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		out = out[:0]
		var bytes int64
		if _, _, err := loadGroup(tx, queues[0], group); err != nil {
			return err
		}
		arrivals := mustSub(tx, bucketArrivals, queues[0])
		return eachOwedAfter(tx, queues[0], group, after, func(k []byte, del Delivery) (bool, error) {
			if !del.available(now) {
				return false, nil
			}
			first, ok, err := getRecord[Block](mustSub(tx, bucketBlocks, queues[0]), arrivals.Get(k))
			if err != nil || !ok {
				return false, errors.Join(err, fmt.Errorf("delivery %d of group %q names a block queue %q does not hold", bytesU64(k), group, queues[0]))
			}
			if len(out) > 0 && mostBytes > 0 && bytes+first.Size > mostBytes {
				return true, nil
			}
			set := []Block{first}
			for _, q := range queues[1:] {
				b, ok, err := getRecord[Block](mustSub(tx, bucketBlocks, q), blockKey(first.Instance, first.Seq))
				if err != nil || !ok {
					return false, err
				}
				od, ok, err := getRecord[Delivery](mustSub(tx, bucketDeliveries, q, group), u64(b.Serial))
				if err != nil || !ok || !od.available(now) {
					return false, err
				}
				set = append(set, b)
			}
			res := Reservation{Blocks: set}
			for _, b := range set {
				bdels := mustSub(tx, bucketDeliveries, b.Queue, group)
				del, _, err := getRecord[Delivery](bdels, u64(b.Serial))
				if err != nil {
					return false, err
				}
				del.State, del.Until, del.Reserver = Reserved, now.Add(visibility), reserver
				del.Attempts++
				if err := putRecord(bdels, u64(b.Serial), del); err != nil {
					return false, err
				}
				if b.Queue == queues[0] {
					res.Attempt = del.Attempts
				}
			}
			out = append(out, res)
			bytes += first.Size
			return len(out) >= most, nil
		})
	})
	return out, err
}

// mustSub returns a nested bucket in a writable transaction, or nil when
// it does not exist in a read-only one; getRecord treats nil as empty.
func mustSub(tx metakv.Tx, top []byte, names ...string) metakv.Bucket {
	b, _ := sub(tx, top, names...)
	return b
}

// Backlog counts the blocks owed to a group: ready, those that could be
// handed out now (unreserved, or reserved past the deadline), and held,
// those reserved by a run or waiting out a retry backoff, which time
// alone will make ready again.
func (d *DB) Backlog(queue, group string) (ready, held int64, err error) {
	now := d.now()
	err = d.kv.View(context.Background(), func(tx metakv.Tx) error {
		return eachOwed(tx, queue, group, func(_ []byte, del Delivery) (bool, error) {
			switch {
			case del.State == Unreserved || del.State == Reserved && now.After(del.Until):
				ready++
			case del.State == Reserved:
				held++
			}
			return false, nil
		})
	})
	return ready, held, err
}

// Run is one stage run's result: the inputs it reserved and the outputs
// it made, each output's blob already durable.
type Run struct {
	Group    string
	Reserver string
	Inputs   []Block
	Outputs  []Block
	// Carry, for a sequential stage, moves the site's carry with the
	// commit (or past the block when it ends FAULTY).
	Carry *CarryUpdate
}

// CommitRun publishes a run in one transaction: its outputs are committed
// and its inputs marked DONE for the group, or nothing happens. It fails
// with ErrLostReservation when the run no longer holds every input, so a
// timed-out or repeated run never publishes twice. An output whose
// identity is already stored with the same checksum counts as published.
func (d *DB) CommitRun(r Run) ([]Block, error) {
	var out []Block
	err := d.kv.Batch(context.Background(), func(tx metakv.Tx) error {
		out = out[:0]
		if err := holds(tx, r); err != nil {
			return err
		}
		for _, b := range r.Outputs {
			stored, _, err := d.commitBlock(tx, b)
			if err != nil {
				return fmt.Errorf("output of a run on %s: %w", r.Inputs[0].Name, err)
			}
			out = append(out, stored)
		}
		if r.Carry != nil {
			if err := putCarry(tx, r.Group, r.Carry, d.now()); err != nil {
				return err
			}
		}
		return d.settle(tx, r, Done, "")
	})
	if err == nil {
		for _, b := range r.Outputs {
			d.notify(b.Queue)
		}
	}
	return out, err
}

// FailRun records a failed attempt of a run: the inputs become FAULTY
// with the error kept when attempts reached maxAttempts, else available
// again from retryAt. It reports whether they became FAULTY.
func (d *DB) FailRun(r Run, why string, maxAttempts int, retryAt time.Time) (bool, error) {
	faulty := false
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		if err := holds(tx, r); err != nil {
			return err
		}
		del, _, err := getRecord[Delivery](mustSub(tx, bucketDeliveries, r.Inputs[0].Queue, r.Group), u64(r.Inputs[0].Serial))
		if err != nil {
			return err
		}
		if del.Attempts >= maxAttempts {
			faulty = true
			if r.Carry != nil && !r.Carry.Late {
				// The site goes on past the block; what its state held
				// is lost with it.
				if err := putCarry(tx, r.Group, &CarryUpdate{Instance: r.Carry.Instance, Seq: r.Carry.Seq, Faulty: true}, d.now()); err != nil {
					return err
				}
			}
			return d.settle(tx, r, Faulty, why)
		}
		for _, b := range r.Inputs {
			dels := mustSub(tx, bucketDeliveries, b.Queue, r.Group)
			del, _, err := getRecord[Delivery](dels, u64(b.Serial))
			if err != nil {
				return err
			}
			del.State, del.Until, del.Reserver, del.LastError = Unreserved, retryAt, "", why
			if err := putRecord(dels, u64(b.Serial), del); err != nil {
				return err
			}
		}
		return nil
	})
	return faulty, err
}

// holds checks that the run still holds each input's reservation.
func holds(tx metakv.Tx, r Run) error {
	for _, b := range r.Inputs {
		del, ok, err := getRecord[Delivery](mustSub(tx, bucketDeliveries, b.Queue, r.Group), u64(b.Serial))
		if err != nil {
			return err
		}
		if !ok || del.State != Reserved || del.Reserver != r.Reserver {
			return fmt.Errorf("block %s for %s: %w", b.Name, r.Group, ErrLostReservation)
		}
	}
	return nil
}

// settle puts a run's inputs in a final state and advances the group's
// floor over finished deliveries, once per input queue.
func (d *DB) settle(tx metakv.Tx, r Run, st DeliveryState, why string) error {
	var queues []string
	for _, b := range r.Inputs {
		if !slices.Contains(queues, b.Queue) {
			queues = append(queues, b.Queue)
		}
		if st == Done {
			if _, _, err := markDone(tx, b.Queue, r.Group, b.Serial); err != nil {
				return err
			}
		} else {
			dels := mustSub(tx, bucketDeliveries, b.Queue, r.Group)
			del, _, err := getRecord[Delivery](dels, u64(b.Serial))
			if err != nil {
				return err
			}
			del.State, del.Until, del.Reserver = st, time.Time{}, ""
			if why != "" {
				del.LastError = why
			}
			if err := putRecord(dels, u64(b.Serial), del); err != nil {
				return err
			}
		}
	}
	for _, q := range queues {
		if err := advanceFloor(tx, q, r.Group); err != nil {
			return err
		}
	}
	return nil
}

// advanceFloor moves a group's floor over its leading settled
// deliveries: DONE (whose records are gone), and those set aside, FAULTY
// or LOST. A block set aside once must not hold back every later scan of
// what the group owes for the rest of the queue's life; eachUnsettled
// finds them below it. It also deletes some DONE records an older server
// kept.
func advanceFloor(tx metakv.Tx, queue, group string) error {
	groups, g, err := migrate(tx, queue, group)
	if err != nil {
		return err
	}
	dels := mustSub(tx, bucketDeliveries, queue, group)
	if dels == nil {
		return nil
	}
	if err := clearLegacy(dels, &g); err != nil {
		return err
	}
	// Up to the first delivery still owed; with none, to the newest
	// block (those between have no records: DONE).
	floor := mustSub(tx, bucketArrivals, queue).Sequence()
	c := dels.Cursor()
	for k, v := c.Seek(u64(g.Floor + 1)); k != nil; k, v = c.Next() {
		var del Delivery
		if err := decode(v, &del); err != nil {
			return err
		}
		if del.State != Done && del.State != Faulty && del.State != Lost {
			floor = bytesU64(k) - 1
			break
		}
	}
	g.Floor = max(g.Floor, floor)
	return putRecord(groups, []byte(group), g)
}

// lowerFloor brings a group's floor below serial, for a delivery set
// aside below it that is owed again.
func lowerFloor(tx metakv.Tx, queue, group string, serial uint64) error {
	groups, g, err := loadGroup(tx, queue, group)
	if err != nil || serial > g.Floor {
		return err
	}
	g.Floor = serial - 1
	return putRecord(groups, []byte(group), g)
}

// clearMost is the most DONE records an older server kept that one move
// of a group's floor deletes: a long history goes a piece at a time, not
// in one huge transaction.
const clearMost = 4096

// clearLegacy deletes up to clearMost of the DONE records an older
// server kept (they are counted in Done), and says when none are left.
func clearLegacy(dels metakv.Bucket, g *Group) error {
	if g.Legacy == 0 {
		return nil
	}
	var gone [][]byte
	c := dels.Cursor()
	k, v := c.Seek(u64(g.Start + 1))
	for ; k != nil && bytesU64(k) <= g.Legacy && len(gone) < clearMost; k, v = c.Next() {
		var del Delivery
		if err := decode(v, &del); err != nil {
			return err
		}
		if del.State == Done {
			gone = append(gone, bytes.Clone(k))
		}
	}
	for _, k := range gone {
		if err := dels.Delete(k); err != nil {
			return err
		}
	}
	if k == nil || bytesU64(k) > g.Legacy {
		g.Legacy = 0
	}
	return nil
}

// FaultyBlock is a delivery set aside after its attempts, as the protocol defines it.
type FaultyBlock = flight.FaultyBlock

// Faulty lists the FAULTY deliveries of a queue, or of every queue when
// queue is empty.
func (d *DB) Faulty(queue string) ([]FaultyBlock, error) {
	var out []FaultyBlock
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		return tx.Bucket(bucketDeliveries).ForEachBucket(func(q []byte) error {
			if queue != "" && string(q) != queue {
				return nil
			}
			qb := tx.Bucket(bucketDeliveries).Bucket(q)
			arrivals := mustSub(tx, bucketArrivals, string(q))
			blocks := mustSub(tx, bucketBlocks, string(q))
			return qb.ForEachBucket(func(g []byte) error {
				return eachUnsettled(tx, string(q), string(g), func(k []byte, del Delivery) (bool, error) {
					if del.State != Faulty {
						return false, nil
					}
					b, _, err := getRecord[Block](blocks, arrivals.Get(k))
					if err != nil {
						return false, err
					}
					out = append(out, FaultyBlock{Queue: string(q), Group: string(g), Block: b.Name, Serial: bytesU64(k),
						Attempts: del.Attempts, Error: del.LastError, Time: b.Time})
					return false, nil
				})
			})
		})
	})
	return out, err
}

// Retry hands FAULTY deliveries back for new attempts: those of one block
// (by name) or, when name is empty, all of a queue's, or all of every
// queue's when queue is empty too. It returns how many it requeued.
func (d *DB) Retry(queue, name string) (int, error) {
	n := 0
	var touched []string
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		n, touched = 0, touched[:0]
		all := tx.Bucket(bucketDeliveries)
		var queues [][]byte
		all.ForEachBucket(func(q []byte) error { queues = append(queues, bytes.Clone(q)); return nil })
		for _, q := range queues {
			if queue != "" && string(q) != queue {
				continue
			}
			qb := all.Bucket(q)
			arrivals := mustSub(tx, bucketArrivals, string(q))
			blocks := mustSub(tx, bucketBlocks, string(q))
			var groups [][]byte
			qb.ForEachBucket(func(g []byte) error { groups = append(groups, bytes.Clone(g)); return nil })
			for _, g := range groups {
				dels := qb.Bucket(g)
				type change struct {
					k   []byte
					del Delivery
				}
				var changes []change
				err := eachUnsettled(tx, string(q), string(g), func(k []byte, del Delivery) (bool, error) {
					if del.State != Faulty {
						return false, nil
					}
					if name != "" {
						b, _, err := getRecord[Block](blocks, arrivals.Get(k))
						if err != nil || b.Name != name {
							return false, err
						}
					}
					del.State, del.Attempts, del.Until = Unreserved, 0, time.Time{}
					changes = append(changes, change{bytes.Clone(k), del})
					return false, nil
				})
				if err != nil {
					return err
				}
				for _, c := range changes {
					if err := putRecord(dels, c.k, c.del); err != nil {
						return err
					}
				}
				if len(changes) > 0 {
					// Owed again: the floor goes below them.
					if err := lowerFloor(tx, string(q), string(g), bytesU64(changes[0].k)); err != nil {
						return err
					}
					n += len(changes)
					touched = append(touched, string(q))
				}
			}
		}
		return nil
	})
	if err == nil {
		d.notify(touched...)
	}
	return n, err
}

// ResetReservations hands back every block a group has reserved, for a
// server starting after runs of its previous process ended with it. A
// run the previous process ran itself (crashed says so of its reserver)
// died with the process, perhaps because of its input: that counts as
// an attempt, recorded with why, and a block out of attempts is FAULTY,
// so a block that crashes the server cannot crash it for ever. Other
// reservations (leases of remote workers) are handed back uncounted.
func (d *DB) ResetReservations(group string, queues []string, crashed func(reserver string) bool, why string, maxAttempts int) (reset, faulty int, err error) {
	err = d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		reset, faulty = 0, 0
		runs := map[string]*Run{}
		var order []string
		for _, q := range queues {
			// From the floor: below it all is done, and a restart must
			// not cost the group's history.
			if err := eachOwed(tx, q, group, func(k []byte, del Delivery) (bool, error) {
				if del.State != Reserved {
					return false, nil
				}
				r := runs[del.Reserver]
				if r == nil {
					r = &Run{Group: group, Reserver: del.Reserver}
					runs[del.Reserver] = r
					order = append(order, del.Reserver)
				}
				r.Inputs = append(r.Inputs, Block{Queue: q, Serial: bytesU64(k)})
				return false, nil
			}); err != nil {
				return err
			}
		}
		for _, id := range order {
			r := runs[id]
			counted := crashed(id)
			first, _, err := getRecord[Delivery](mustSub(tx, bucketDeliveries, r.Inputs[0].Queue, group), u64(r.Inputs[0].Serial))
			if err != nil {
				return err
			}
			if counted && first.Attempts >= maxAttempts {
				if err := d.settle(tx, *r, Faulty, why); err != nil {
					return err
				}
				faulty++
				continue
			}
			for _, b := range r.Inputs {
				dels := mustSub(tx, bucketDeliveries, b.Queue, group)
				del, _, err := getRecord[Delivery](dels, u64(b.Serial))
				if err != nil {
					return err
				}
				del.State, del.Until, del.Reserver = Unreserved, time.Time{}, ""
				if counted {
					del.LastError = why
				} else {
					del.Attempts = max(del.Attempts-1, 0)
				}
				if err := putRecord(dels, u64(b.Serial), del); err != nil {
					return err
				}
			}
			reset++
		}
		return nil
	})
	return reset, faulty, err
}

// ReleaseRun hands a run's inputs back without counting an attempt, for
// a run stopped because the server is stopping.
func (d *DB) ReleaseRun(r Run) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		if err := holds(tx, r); err != nil {
			return err
		}
		for _, b := range r.Inputs {
			dels := mustSub(tx, bucketDeliveries, b.Queue, r.Group)
			del, _, err := getRecord[Delivery](dels, u64(b.Serial))
			if err != nil {
				return err
			}
			del.State, del.Until, del.Reserver = Unreserved, time.Time{}, ""
			del.Attempts = max(del.Attempts-1, 0)
			if err := putRecord(dels, u64(b.Serial), del); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteGroup removes a consumer group and everything it was owed, for a
// stage that left the graph.
func (d *DB) DeleteGroup(queue, group string) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		if groups, _ := sub(tx, bucketGroups, queue); groups != nil {
			if err := groups.Delete([]byte(group)); err != nil {
				return err
			}
		}
		if qd, _ := sub(tx, bucketDeliveries, queue); qd != nil && qd.Bucket([]byte(group)) != nil {
			return qd.DeleteBucket([]byte(group))
		}
		return nil
	})
}

// DeleteConsumed removes a block that every subscriber of its queue is
// done with, and returns it so the caller can delete its blob. It does
// nothing (false) while any group still owes it, while a stream consumer
// of its site has not checkpointed past it, or when no group ever
// subscribed: a block nobody has read is never dropped.
func (d *DB) DeleteConsumed(queue string, serial uint64) (Block, bool, error) {
	var (
		out     Block
		deleted bool
	)
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		groups := mustSub(tx, bucketGroups, queue)
		if groups == nil {
			return nil
		}
		var names [][]byte
		owed := 0
		err := groups.ForEach(func(g, _ []byte) error {
			del, ok, err := deliveryOf(tx, queue, string(g), serial)
			if err != nil || !ok {
				return err
			}
			if del.State != Done {
				return errStop
			}
			owed++
			names = append(names, bytes.Clone(g))
			return nil
		})
		if errors.Is(err, errStop) || owed == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		arrivals := mustSub(tx, bucketArrivals, queue)
		blocks := mustSub(tx, bucketBlocks, queue)
		k := arrivals.Get(u64(serial))
		b, ok, err := getRecord[Block](blocks, k)
		if err != nil || !ok {
			return err
		}
		// Stream consumers keep what they have not checkpointed past.
		if sb := mustSub(tx, bucketStreams, queue); sb != nil {
			held := false
			err := sb.ForEach(func(_, v []byte) error {
				var c Cursor
				if err := json.Unmarshal(v, &c); err != nil {
					return err
				}
				pos := c.Next
				if c.Checkpoint != nil {
					pos = c.Checkpoint.Next
				}
				held = held || c.Instance == b.Instance && b.Seq >= pos
				return nil
			})
			if err != nil || held {
				return err
			}
		}
		for _, g := range names {
			if err := forgetDelivery(tx, queue, string(g), serial); err != nil {
				return err
			}
		}
		if err := blocks.Delete(k); err != nil {
			return err
		}
		if err := arrivals.Delete(u64(serial)); err != nil {
			return err
		}
		queues := tx.Bucket(bucketQueues)
		q, _, err := getRecord[Queue](queues, []byte(queue))
		if err != nil {
			return err
		}
		q.Blocks--
		q.Bytes -= b.Size
		out, deleted = b, true
		return putRecord(queues, []byte(queue), q)
	})
	return out, deleted, err
}

var errStop = errors.New("stop")

// OldestOwed returns the arrival time of the oldest block a group still
// owes (not done, not set aside), and false when it owes none.
func (d *DB) OldestOwed(queue, group string) (time.Time, bool, error) {
	var (
		at    time.Time
		found bool
	)
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		arrivals := mustSub(tx, bucketArrivals, queue)
		blocks := mustSub(tx, bucketBlocks, queue)
		return eachOwed(tx, queue, group, func(k []byte, del Delivery) (bool, error) {
			if del.State == Done || del.State == Faulty {
				return false, nil
			}
			b, ok, err := getRecord[Block](blocks, arrivals.Get(k))
			if err != nil || !ok {
				return false, err
			}
			at, found = b.Arrived, true
			return true, nil
		})
	})
	return at, found, err
}

// Extend pushes the reservation deadline of a run's inputs to now+ttl, for
// a worker that is still at it. It fails with ErrLostReservation if any of
// them is no longer reserved by reserver.
func (d *DB) Extend(inputs []Block, group, reserver string, ttl time.Duration) error {
	now := d.now()
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		for _, b := range inputs {
			dels := mustSub(tx, bucketDeliveries, b.Queue, group)
			del, ok, err := getRecord[Delivery](dels, u64(b.Serial))
			if err != nil {
				return err
			}
			if !ok || del.State != Reserved || del.Reserver != reserver || now.After(del.Until) {
				return fmt.Errorf("block %s: %w", b.Name, ErrLostReservation)
			}
			del.Until = now.Add(ttl)
			if err := putRecord(dels, u64(b.Serial), del); err != nil {
				return err
			}
		}
		return nil
	})
}

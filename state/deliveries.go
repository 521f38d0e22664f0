package state

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/metakv"
)

// DeliveryState is where one block stands with one subscriber.
type DeliveryState string

// The states of a delivery. RESERVED with an expired deadline counts as
// UNRESERVED: the block is handed out again (at-least-once).
const (
	Unreserved DeliveryState = "UNRESERVED"
	Reserved   DeliveryState = "RESERVED"
	Done       DeliveryState = "DONE"
	Faulty     DeliveryState = "FAULTY"
)

// Delivery is one block owed to one subscriber.
type Delivery struct {
	State     DeliveryState `json:"state"`
	Attempts  int           `json:"attempts"`
	Until     time.Time     `json:"until,omitzero"`     // end of the reservation, or of a retry backoff
	Reserver  string        `json:"reserver,omitempty"` // who holds the reservation
	LastError string        `json:"last_error,omitempty"`
	Block     string        `json:"block,omitempty"` // the block's name, kept when it is LOST
	// Part names the first half of an edged stage's run, done and held
	// by the process that made it (see DB.CommitPart); the run that
	// takes the block next finishes it, or starts again when that
	// process is gone.
	Part string `json:"part,omitempty"`
}

// From says where a new consumer group starts.
type From string

// Where a new group starts: with every retained block, or with the next
// block to arrive. A From may also be a time in RFC 3339: the group is
// owed the retained blocks whose time is at or after it, and every block
// that arrives after it is made.
const (
	Earliest From = "earliest"
	Latest   From = "latest"
)

// Group is a consumer group of a queue.
type Group struct {
	Name    string    `json:"name"`
	From    From      `json:"from"`
	Created time.Time `json:"created"`
	// Floor is a serial at or below which every delivery is settled
	// (DONE, FAULTY or LOST), so the scans of what is owed start past it.
	Floor uint64 `json:"floor"`
	// DoneDeleted says the group's DONE deliveries are deleted as they
	// become DONE, and counted in Done: it keeps the records of what it
	// has open or set aside, not of its history. A stored block past
	// Start without a record was DONE. Groups made before are moved to
	// this at their next change (see migrate).
	DoneDeleted bool  `json:"done_deleted,omitempty"`
	Done        int64 `json:"done,omitempty"`
	// Legacy is the newest serial whose DONE record an older server may
	// have kept; they are deleted a piece at a time (0: none left).
	Legacy uint64 `json:"legacy,omitempty"`
	// Settled counts the DONE deliveries at or below Floor of a group an
	// older server made (SettledKnown says it does), for its stats until
	// it is migrated.
	Settled      int64 `json:"settled,omitempty"`
	SettledKnown bool  `json:"settled_known,omitempty"`
	// Start is the serial after which the group is owed blocks: 0 from
	// earliest, the newest serial at creation from latest.
	Start uint64 `json:"start"`
	// Owner is the user who created the group; only they (and admins)
	// may read from it, ack or reset it. Empty for stage groups and on
	// a server without users.
	Owner string `json:"owner,omitempty"`
	// OwnerID is the owner's stable id ("" before ids were kept): a
	// user removed and added again under the same name is someone else.
	OwnerID string `json:"owner_id,omitempty"`
	// Used is when the group was last read from or acked (written at most
	// once a minute); a group idle for long is expired.
	Used time.Time `json:"used,omitzero"`
}

// GroupStats counts a consumer group's deliveries by state, as the protocol defines it.
type GroupStats = flight.GroupStats

// addDeliveries records one UNRESERVED delivery of a new block for every
// group of its queue.
func addDeliveries(tx metakv.Tx, queue string, serial uint64) error {
	groups, err := sub(tx, bucketGroups, queue)
	if err != nil {
		return err
	}
	return groups.ForEach(func(name, _ []byte) error {
		dels, err := sub(tx, bucketDeliveries, queue, string(name))
		if err != nil {
			return err
		}
		return putRecord(dels, u64(serial), Delivery{State: Unreserved})
	})
}

// EnsureGroup creates a consumer group if it does not exist. A group that
// starts from Earliest is owed every block the queue holds now; one that
// starts from Latest only the blocks that arrive after it. Returns the
// group as stored (an existing group keeps its first From).
func (d *DB) EnsureGroup(queue, group string, from From) (Group, error) {
	return d.EnsureOwnedGroup(queue, group, from, "", "", 0)
}

// EnsureOwnedGroup is EnsureGroup for a group a user creates: a new group
// is the owner's; an existing one is returned as it is, for the caller
// to check its owner. A group created before groups had owners goes to
// the first user who uses it.
//
// An owner may create at most maxPerOwner groups on a queue (0: no cap):
// every group is owed every later block until it is deleted, so groups
// without end are storage without end.
func (d *DB) EnsureOwnedGroup(queue, group string, from From, owner, ownerID string, maxPerOwner int) (Group, error) {
	if err := block.ValidateGroup(group); err != nil {
		return Group{}, err
	}
	at, isTime := flight.Start(from).Time()
	if err := flight.Start(from).Valid(); err != nil {
		return Group{}, err
	}
	var out Group
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		groups, err := sub(tx, bucketGroups, queue)
		if err != nil {
			return err
		}
		g, ok, err := getRecord[Group](groups, []byte(group))
		if err != nil || ok {
			out = g
			if err == nil && g.Owner == "" && owner != "" {
				g.Owner, g.OwnerID = owner, ownerID
				out = g
				return putRecord(groups, []byte(group), g)
			}
			return err
		}
		if maxPerOwner > 0 && owner != "" {
			n := 0
			if err := groups.ForEach(func(_, v []byte) error {
				var o Group
				if json.Unmarshal(v, &o) == nil && o.Owner == owner {
					n++
				}
				return nil
			}); err != nil {
				return err
			}
			if n >= maxPerOwner {
				return fmt.Errorf("%w: user %s has %d consumer groups on queue %s, the most one user may have; reuse one", ErrTooMany, owner, n, queue)
			}
		}
		g = Group{Name: group, From: from, Created: d.now().UTC(), Owner: owner, OwnerID: ownerID, DoneDeleted: true}
		arrivals, err := sub(tx, bucketArrivals, queue)
		if err != nil {
			return err
		}
		if from == Earliest || isTime {
			dels, err := sub(tx, bucketDeliveries, queue, group)
			if err != nil {
				return err
			}
			blocks := mustSub(tx, bucketBlocks, queue)
			if err := arrivals.ForEach(func(serial, k []byte) error {
				if isTime {
					b, ok, err := getRecord[Block](blocks, k)
					if err != nil {
						return err
					}
					if ok && b.Time.Before(at) {
						// Before the start: as if done, so that the block's
						// deletion later counts it off as every done one.
						g.Done++
						return nil
					}
				}
				return putRecord(dels, serial, Delivery{State: Unreserved})
			}); err != nil {
				return err
			}
		} else {
			g.Floor = arrivals.Sequence()
			g.Start = g.Floor
		}
		out = g
		return putRecord(groups, []byte(group), g)
	})
	return out, err
}

// GetGroup returns a consumer group; ErrNotFound when the queue has none
// of that name.
func (d *DB) GetGroup(queue, group string) (Group, error) {
	var out Group
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		b := tx.Bucket(bucketGroups)
		if b != nil {
			b = b.Bucket([]byte(queue))
		}
		g, ok, err := getRecord[Group](b, []byte(group))
		if err == nil && !ok {
			err = fmt.Errorf("consumer group %s of queue %s: %w", group, queue, ErrNotFound)
		}
		out = g
		return err
	})
	return out, err
}

// loadGroup returns the groups bucket of a queue and one group in it.
func loadGroup(tx metakv.Tx, queue, group string) (metakv.Bucket, Group, error) {
	groups, err := sub(tx, bucketGroups, queue)
	if err != nil {
		return nil, Group{}, err
	}
	g, ok, err := getRecord[Group](groups, []byte(group))
	if err == nil && !ok {
		err = fmt.Errorf("group %q of queue %q: %w", group, queue, ErrNotFound)
	}
	return groups, g, err
}

// Reserve hands the oldest block owed to a group to reserver for the given
// visibility timeout: UNRESERVED, or RESERVED with an expired deadline. It
// returns false when nothing is available now.
func (d *DB) Reserve(queue, group, reserver string, visibility time.Duration) (Block, bool, error) {
	bs, err := d.ReserveAfter(queue, group, reserver, visibility, 0, 1, 0)
	if len(bs) == 0 {
		return Block{}, false, err
	}
	return bs[0], true, err
}

// ReserveAfter is Reserve looking only past serial after: a reader that
// follows the queue passes the last serial it reserved, so it does not
// walk again over the reservations it holds (thousands, for a reader of
// small blocks). Blocks below it whose reservation expired are found only
// by a Reserve from the floor (after 0), which such a reader makes now
// and then and whenever this finds nothing.
//
// It reserves up to most blocks at once, in serial order, as long as
// they hold at most mostBytes together (the first is taken whatever its
// size): a reader of small blocks then pays one commit for many.
func (d *DB) ReserveAfter(queue, group, reserver string, visibility time.Duration, after uint64, most int, mostBytes int64) ([]Block, error) {
	res, err := d.reserveJoin([]string{queue}, group, reserver, visibility, after, max(most, 1), mostBytes)
	out := make([]Block, len(res))
	for i, r := range res {
		out[i] = r.Blocks[0]
	}
	return out, err
}

// NextExpiry returns the earliest end of a reservation of the group, or
// zero when no block is reserved; a waiting reader sleeps until then.
func (d *DB) NextExpiry(queue, group string) (time.Time, error) {
	var next time.Time
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		return eachOwed(tx, queue, group, func(_ []byte, del Delivery) (bool, error) {
			if del.State == Reserved && (next.IsZero() || del.Until.Before(next)) {
				next = del.Until
			}
			return false, nil
		})
	})
	return next, err
}

// eachOwed calls fn with each delivery of a group past its floor, in
// serial order, until fn says it is done. A group that does not exist has
// none.
func eachOwed(tx metakv.Tx, queue, group string, fn func(serial []byte, del Delivery) (done bool, err error)) error {
	return eachOwedAfter(tx, queue, group, 0, fn)
}

// eachUnsettled is eachOwed over the deliveries set aside below the
// floor (FAULTY, LOST) too, first. DONE deliveries have no records, so
// the walk there costs what was set aside.
func eachUnsettled(tx metakv.Tx, queue, group string, fn func(serial []byte, del Delivery) (done bool, err error)) error {
	g, ok, err := getRecord[Group](mustSub(tx, bucketGroups, queue), []byte(group))
	if err != nil || !ok {
		return err
	}
	if dels := mustSub(tx, bucketDeliveries, queue, group); dels != nil {
		c := dels.Cursor()
		for k, v := c.Seek(u64(g.Start + 1)); k != nil && bytesU64(k) <= g.Floor; k, v = c.Next() {
			var del Delivery
			if err := decode(v, &del); err != nil {
				return err
			}
			if del.State == Done {
				continue
			}
			if done, err := fn(k, del); done || err != nil {
				return err
			}
		}
	}
	return eachOwed(tx, queue, group, fn)
}

// eachOwedAfter is eachOwed from past serial after, when it is above the
// floor.
func eachOwedAfter(tx metakv.Tx, queue, group string, after uint64, fn func(serial []byte, del Delivery) (done bool, err error)) error {
	g, ok, err := getRecord[Group](mustSub(tx, bucketGroups, queue), []byte(group))
	if err != nil || !ok {
		return err
	}
	dels := mustSub(tx, bucketDeliveries, queue, group)
	if dels == nil {
		return nil
	}
	c := dels.Cursor()
	for k, v := c.Seek(u64(max(g.Floor, after) + 1)); k != nil; k, v = c.Next() {
		var del Delivery
		if err := decode(v, &del); err != nil {
			return err
		}
		if done, err := fn(k, del); done || err != nil {
			return err
		}
	}
	return nil
}

// Ack marks blocks DONE for a group. Each must be owed to the group; acking
// a block twice is not an error (a redelivered block may be acked by both
// readers). It returns how many deliveries changed.
func (d *DB) Ack(queue, group string, ids []block.ID) (int, error) {
	n := 0
	// Batched with concurrent puts and other acks (it may run more than
	// once, so it sets n afresh): a consumer acking block by block beside
	// hundreds of puts a second paid a transaction and an fsync of its
	// own for each, and fell behind.
	err := d.kv.Batch(context.Background(), func(tx metakv.Tx) error {
		n = 0
		if _, _, err := loadGroup(tx, queue, group); err != nil {
			return err
		}
		blocks, _ := sub(tx, bucketBlocks, queue)
		for _, id := range ids {
			b, ok, err := getRecord[Block](blocks, blockKey(id.Instance, id.Seq))
			if err != nil {
				return err
			}
			if !ok || id.Queue != queue {
				return fmt.Errorf("ack of block %s for group %q: %w in queue %q", id, group, ErrNotFound, queue)
			}
			owed, changed, err := markDone(tx, queue, group, b.Serial)
			if err != nil {
				return err
			}
			if !owed {
				return fmt.Errorf("ack of block %s: it is not owed to group %q (the group started after it): %w", b.Name, group, ErrNotFound)
			}
			if changed {
				n++
			}
		}
		return advanceFloor(tx, queue, group)
	})
	return n, err
}

// Nack gives blocks a group's reader holds back to the group at once,
// for any reader of it to take next, rather than after their visibility
// timeout: the consumer could not finish them (a nack, as Kafka and SQS
// clients have). The attempt stays counted. It returns how many were
// held; a block done, or not held by any reader, is left as it is.
func (d *DB) Nack(queue, group string, ids []block.ID) (int, error) {
	n := 0
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		n = 0
		if _, _, err := loadGroup(tx, queue, group); err != nil {
			return err
		}
		blocks, _ := sub(tx, bucketBlocks, queue)
		dels := mustSub(tx, bucketDeliveries, queue, group)
		for _, id := range ids {
			b, ok, err := getRecord[Block](blocks, blockKey(id.Instance, id.Seq))
			if err != nil {
				return err
			}
			if !ok || id.Queue != queue {
				return fmt.Errorf("nack of block %s for group %q: %w in queue %q", id, group, ErrNotFound, queue)
			}
			del, ok, err := getRecord[Delivery](dels, u64(b.Serial))
			if err != nil {
				return err
			}
			if !ok || del.State != Reserved {
				continue
			}
			del.State, del.Until, del.Reserver = Unreserved, time.Time{}, ""
			if err := putRecord(dels, u64(b.Serial), del); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err == nil && n > 0 {
		d.notify(queue)
	}
	return n, err
}

// markDone records a group's delivery of a block as done: its record
// goes, and the group counts it. It reports whether the block was owed
// to the group at all, and whether this changed its state.
func markDone(tx metakv.Tx, queue, group string, serial uint64) (owed, changed bool, err error) {
	del, ok, err := deliveryOf(tx, queue, group, serial)
	if err != nil || !ok || del.State == Done {
		return ok, false, err
	}
	groups, g, err := migrate(tx, queue, group)
	if err != nil {
		return true, false, err
	}
	if err := mustSub(tx, bucketDeliveries, queue, group).Delete(u64(serial)); err != nil {
		return true, false, err
	}
	g.Done++
	return true, true, putRecord(groups, []byte(group), g)
}

// deliveryOf reads a group's delivery of a stored block; a block past the
// group's start without a record was DONE.
func deliveryOf(tx metakv.Tx, queue, group string, serial uint64) (Delivery, bool, error) {
	del, ok, err := getRecord[Delivery](mustSub(tx, bucketDeliveries, queue, group), u64(serial))
	if ok || err != nil {
		return del, ok, err
	}
	g, ok, err := getRecord[Group](mustSub(tx, bucketGroups, queue), []byte(group))
	if err != nil || !ok || !g.DoneDeleted || serial <= g.Start {
		return Delivery{}, false, err
	}
	if arrivals := mustSub(tx, bucketArrivals, queue); arrivals == nil || arrivals.Get(u64(serial)) == nil {
		return Delivery{}, false, nil // not a stored block
	}
	return Delivery{State: Done}, true, nil
}

// migrate moves a group an older server made, which kept every DONE
// record, to deleting them (DoneDeleted): it counts them once, a walk of
// the group's history made once, and marks them for deletion in pieces.
// It returns the group as it now is.
func migrate(tx metakv.Tx, queue, group string) (metakv.Bucket, Group, error) {
	groups, g, err := loadGroup(tx, queue, group)
	if err != nil || g.DoneDeleted {
		return groups, g, err
	}
	if dels := mustSub(tx, bucketDeliveries, queue, group); dels != nil {
		c := dels.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var del Delivery
			if err := decode(v, &del); err != nil {
				return nil, g, err
			}
			if del.State == Done {
				g.Done++
				g.Legacy = bytesU64(k)
			}
		}
	}
	g.DoneDeleted, g.Settled, g.SettledKnown = true, 0, false
	return groups, g, putRecord(groups, []byte(group), g)
}

// Groups returns the delivery counts of every group of a queue.
func (d *DB) Groups(queue string) ([]GroupStats, error) {
	var out []GroupStats
	now := d.now()
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		groups, _ := sub(tx, bucketGroups, queue)
		if groups == nil {
			return nil
		}
		return groups.ForEach(func(name, raw []byte) error {
			s := GroupStats{Group: string(name)}
			var g Group
			if json.Unmarshal(raw, &g) == nil {
				s.Owner, s.Created, s.Used = g.Owner, g.Created, g.Used
			}
			if g.DoneDeleted {
				s.Done = int(g.Done)
			}
			dels, _ := sub(tx, bucketDeliveries, queue, string(name))
			if dels == nil {
				out = append(out, s)
				return nil
			}
			// What is DONE is counted, not read: the stats cost what is
			// open or set aside, not the group's history. (The records
			// of a migrated group are those, and DONE ones an older
			// server kept, counted in Done.)
			c := dels.Cursor()
			k, v := c.First()
			if !g.DoneDeleted && g.SettledKnown {
				s.Done = int(g.Settled)
				k, v = c.Seek(u64(g.Floor + 1))
			}
			for ; k != nil; k, v = c.Next() {
				var del Delivery
				if err := decode(v, &del); err != nil {
					return err
				}
				switch {
				case del.State == Reserved && now.After(del.Until), del.State == Unreserved:
					// Counted as owed even while a retry backs off.
					s.Unreserved++
				case del.State == Reserved:
					s.Reserved++
				case del.State == Done && !g.DoneDeleted:
					s.Done++
				case del.State == Faulty:
					s.Faulty++
				case del.State == Lost:
					s.Lost++
				}
			}
			out = append(out, s)
			return nil
		})
	})
	return out, err
}

// forgetDelivery deletes a group's delivery of a block being deleted
// (before its arrival goes), keeping the group's count of DONE ones.
func forgetDelivery(tx metakv.Tx, queue, group string, serial uint64) error {
	del, ok, err := deliveryOf(tx, queue, group, serial)
	if err != nil || !ok {
		return err
	}
	groups, g, err := migrate(tx, queue, group)
	if err != nil {
		return err
	}
	if err := mustSub(tx, bucketDeliveries, queue, group).Delete(u64(serial)); err != nil {
		return err
	}
	if del.State != Done {
		return nil
	}
	g.Done--
	return putRecord(groups, []byte(group), g)
}

// Release hands reserved blocks back to their group at once, for a
// reader that could not deliver them (its stream broke mid-block). It
// does nothing for a block whose reservation has passed to another
// reader or that is done.
func (d *DB) Release(queue, group, reserver string, serials ...uint64) error {
	_, err := d.release(queue, group, reserver, false, serials)
	return err
}

// GiveBack is Release answering how many of the blocks reserver still
// held (the others were acked, or passed to another reader).
func (d *DB) GiveBack(queue, group, reserver string, serials ...uint64) (int, error) {
	return d.release(queue, group, reserver, false, serials)
}

// Unreserve is Release for blocks a reader reserved ahead and never
// began to send: as if never reserved, their attempt is not counted.
func (d *DB) Unreserve(queue, group, reserver string, serials ...uint64) error {
	_, err := d.release(queue, group, reserver, true, serials)
	return err
}

func (d *DB) release(queue, group, reserver string, uncount bool, serials []uint64) (int, error) {
	n := 0
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		n = 0
		dels, err := sub(tx, bucketDeliveries, queue, group)
		if err != nil {
			return err
		}
		for _, serial := range serials {
			del, ok, err := getRecord[Delivery](dels, u64(serial))
			if err != nil {
				return err
			}
			if !ok || del.State != Reserved || del.Reserver != reserver {
				continue
			}
			del.State, del.Until, del.Reserver = Unreserved, time.Time{}, ""
			if uncount {
				del.Attempts = max(del.Attempts-1, 0)
			}
			if err := putRecord(dels, u64(serial), del); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err == nil {
		d.notify(queue)
	}
	return n, err
}

// available reports whether a delivery may be handed out now: unreserved
// and past any retry backoff, or reserved with an expired deadline.
func (del Delivery) available(now time.Time) bool {
	switch del.State {
	case Unreserved:
		return !now.Before(del.Until)
	case Reserved:
		return now.After(del.Until)
	}
	return false
}

// DeliveriesOf returns, for each given block serial of a queue, its
// delivery to each group that is owed it (a block a group never owed, or
// one already deleted, has no entry), in one read.
func (d *DB) DeliveriesOf(queue string, serials []uint64) (map[uint64]map[string]Delivery, error) {
	out := make(map[uint64]map[string]Delivery, len(serials))
	now := d.now()
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		groups, _ := sub(tx, bucketGroups, queue)
		if groups == nil {
			return nil
		}
		return groups.ForEach(func(name, _ []byte) error {
			for _, s := range serials {
				del, ok, err := deliveryOf(tx, queue, string(name), s)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				if del.State == Reserved && now.After(del.Until) {
					del.State = Unreserved // its reservation lapsed
				}
				if out[s] == nil {
					out[s] = map[string]Delivery{}
				}
				out[s][string(name)] = del
			}
			return nil
		})
	})
	return out, err
}

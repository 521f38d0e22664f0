package state

import (
	"context"
	"encoding/json"
	"time"

	"github.com/plumb-dev/plumb/metakv"
)

// touchEvery bounds how often a group's last use is written: a read is
// frequent, and the idle expiry counts in days.
const touchEvery = time.Minute

// TouchGroup records that a group was used now (read from or acked), so
// its idle expiry starts over.
func (d *DB) TouchGroup(queue, group string) error {
	now := d.now().UTC()
	// Most calls find it touched within the minute: a read-only look
	// spares them a write transaction (and its fsync).
	fresh := false
	d.kv.View(context.Background(), func(tx metakv.Tx) error {
		g, ok, err := getRecord[Group](mustSub(tx, bucketGroups, queue), []byte(group))
		fresh = err == nil && ok && now.Sub(g.Used) < touchEvery
		return nil
	})
	if fresh {
		return nil
	}
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		groups, g, err := loadGroup(tx, queue, group)
		if err != nil {
			return err
		}
		if now.Sub(g.Used) < touchEvery {
			return nil
		}
		g.Used = now
		return putRecord(groups, []byte(group), g)
	})
}

// GroupRef names a consumer group of a queue.
type GroupRef struct {
	Queue, Group, Owner string
	Idle                time.Duration
}

// ExpireGroups deletes the consumer groups not used (created, read from
// or acked) for longer than idle, except those keep says to keep (the
// stages'), and returns them: each was owed every block that came after
// it, so a group nobody reads pins those blocks for ever.
func (d *DB) ExpireGroups(idle time.Duration, keep func(group string) bool) ([]GroupRef, error) {
	now := d.now()
	var gone []GroupRef
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		top := tx.Bucket(bucketGroups)
		if top == nil {
			return nil
		}
		return top.ForEach(func(queue, v []byte) error {
			if v != nil {
				return nil
			}
			return top.Bucket(queue).ForEach(func(name, raw []byte) error {
				var g Group
				if json.Unmarshal(raw, &g) != nil || keep(string(name)) {
					return nil
				}
				last := g.Created
				if g.Used.After(last) {
					last = g.Used
				}
				if now.Sub(last) > idle {
					gone = append(gone, GroupRef{Queue: string(queue), Group: string(name), Owner: g.Owner, Idle: now.Sub(last)})
				}
				return nil
			})
		})
	})
	if err != nil {
		return nil, err
	}
	for _, r := range gone {
		if err := d.DeleteGroup(r.Queue, r.Group); err != nil {
			return nil, err
		}
	}
	return gone, nil
}

// GroupNames lists a queue's consumer groups without counting what they
// hold (Groups counts every delivery, done ones included).
func (d *DB) GroupNames(queue string) ([]string, error) {
	var out []string
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		groups := mustSub(tx, bucketGroups, queue)
		if groups == nil {
			return nil
		}
		return groups.ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// Owed counts a group's deliveries it could take now or after a retry
// backoff, and the FAULTY ones. Its cost follows what is open and what
// was set aside, not the queue's history.
func (d *DB) Owed(queue, group string) (backlog, faulty int64, err error) {
	now := d.now()
	err = d.kv.View(context.Background(), func(tx metakv.Tx) error {
		return eachUnsettled(tx, queue, group, func(_ []byte, del Delivery) (bool, error) {
			switch {
			case del.State == Unreserved || del.State == Reserved && now.After(del.Until):
				backlog++
			case del.State == Faulty:
				faulty++
			}
			return false, nil
		})
	})
	return backlog, faulty, err
}

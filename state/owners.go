package state

import (
	"context"
	"fmt"
	"time"

	"github.com/plumb-dev/plumb/metakv"
)

// Owner is who may put blocks into one instance (a site) of a queue: the
// first user who did, or one an admin assigned. Without an owner, two
// users who may both write a queue could each write the other's sites,
// taking a site's next sequence numbers from its agent.
type Owner struct {
	Queue    string `json:"queue"`
	Instance string `json:"instance"`
	User     string `json:"user"`
	// UserID is the user's stable id: a user removed and added again
	// under the same name is someone else, and owns nothing.
	UserID string    `json:"user_id,omitempty"`
	Since  time.Time `json:"since"`
	// By says how: "first put", or the admin who assigned it.
	By string `json:"by"`
}

// Is reports whether a user (name and stable id) is the owner. A record
// or a users file without ids compares names.
func (o Owner) Is(user, id string) bool {
	if o.UserID != "" && id != "" {
		return o.UserID == id
	}
	return o.User == user
}

var bucketOwners = []byte("owners") // queue → instance → Owner

// ClaimInstance makes a user the owner of an instance that has none, and
// fails with an error wrapping ErrOwned when someone else owns it. Reading first keeps the
// common case, a put by the owner, out of the write lock.
func (d *DB) ClaimInstance(queue, instance, user, id string) (Owner, error) {
	o, ok, err := d.InstanceOwner(queue, instance)
	if err != nil || ok && o.Is(user, id) {
		return o, err
	}
	if !ok {
		err = d.kv.Update(context.Background(), func(tx metakv.Tx) error {
			b, err := sub(tx, bucketOwners, queue)
			if err != nil {
				return err
			}
			if o, ok, err = getRecord[Owner](b, []byte(instance)); err != nil || ok {
				return err // claimed meanwhile: judged below
			}
			o = Owner{Queue: queue, Instance: instance, User: user, UserID: id, Since: d.now().UTC(), By: "first put"}
			return putRecord(b, []byte(instance), o)
		})
		if err != nil {
			return o, err
		}
	}
	if !o.Is(user, id) && o.User == user {
		return o, fmt.Errorf("%w: instance %s of queue %s belongs to an earlier user named %s, removed since (%s since %s)", ErrOwned, instance, queue, o.User, o.By, o.Since.Format(time.RFC3339))
	}
	if !o.Is(user, id) {
		return o, fmt.Errorf("%w: instance %s of queue %s belongs to user %s (%s since %s)", ErrOwned, instance, queue, o.User, o.By, o.Since.Format(time.RFC3339))
	}
	return o, nil
}

// InstanceOwner returns an instance's owner, if it has one.
func (d *DB) InstanceOwner(queue, instance string) (o Owner, ok bool, err error) {
	err = d.kv.View(context.Background(), func(tx metakv.Tx) error {
		b, err := sub(tx, bucketOwners, queue)
		if err != nil {
			return err
		}
		o, ok, err = getRecord[Owner](b, []byte(instance))
		return err
	})
	return o, ok, err
}

// SetOwner assigns an instance to a user, or with an empty user leaves
// it unowned, for its next writer to claim.
func (d *DB) SetOwner(o Owner) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		b, err := sub(tx, bucketOwners, o.Queue)
		if err != nil {
			return err
		}
		if o.User == "" {
			return b.Delete([]byte(o.Instance))
		}
		if o.Since.IsZero() {
			o.Since = d.now().UTC()
		}
		return putRecord(b, []byte(o.Instance), o)
	})
}

// Owners lists the owned instances of a queue, or of every queue when
// queue is "", by queue and instance.
func (d *DB) Owners(queue string) ([]Owner, error) {
	var out []Owner
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		top := tx.Bucket(bucketOwners)
		return top.ForEachBucket(func(q []byte) error {
			if queue != "" && string(q) != queue {
				return nil
			}
			os, err := listRecords[Owner](top.Bucket(q))
			out = append(out, os...)
			return err
		})
	})
	return out, err
}

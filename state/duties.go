package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/plumb-dev/plumb/metakv"
)

// A Duty is work that one server at a time does for all the servers
// sharing the metadata: scheduling stage runs, retention, fsck. A server
// holds a duty until a time it keeps pushing forward; when it dies and
// stops doing so, another takes the duty once that time has passed.
type Duty struct {
	Name   string    `json:"name"`
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
	// Since is when the holder took the duty.
	Since time.Time `json:"since"`
	// Term counts the duty's changes of holder: a holder that finds a
	// later term than its own lost the duty meanwhile.
	Term uint64 `json:"term"`
}

var bucketDuties = []byte("duties") // name → Duty

// ErrDutyHeld is HoldDuty's answer while another server holds a duty.
var ErrDutyHeld = errors.New("held by another server")

// HoldDuty takes the duty name for holder for ttl, or keeps it for
// another ttl when holder has it. It fails with an error wrapping
// ErrDutyHeld while another holder has it and its time has not passed.
// The clocks of the servers sharing the metadata must agree to well
// within ttl.
func (d *DB) HoldDuty(ctx context.Context, name, holder string, ttl time.Duration) (Duty, error) {
	var out Duty
	err := d.kv.Update(ctx, func(tx metakv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketDuties)
		if err != nil {
			return err
		}
		cur, ok, err := getRecord[Duty](b, []byte(name))
		if err != nil {
			return err
		}
		now := d.now().UTC()
		switch {
		case ok && cur.Holder == holder && now.Before(cur.Until):
			out = cur
		case ok && now.Before(cur.Until):
			out = cur
			return fmt.Errorf("duty %s: %w (%s, until %s)", name, ErrDutyHeld, cur.Holder, cur.Until.Format(time.RFC3339Nano))
		default:
			// Free, lapsed, or this holder's own lapsed hold: a new
			// term either way, since another may have held it between.
			out = Duty{Name: name, Holder: holder, Since: now, Term: cur.Term + 1}
		}
		out.Until = now.Add(ttl)
		return putRecord(b, []byte(name), out)
	})
	return out, err
}

// ReleaseDuty gives the duty up, when holder holds it, so another server
// takes it at once rather than after its time runs out.
func (d *DB) ReleaseDuty(ctx context.Context, name, holder string) error {
	return d.kv.Update(ctx, func(tx metakv.Tx) error {
		b := tx.Bucket(bucketDuties)
		if b == nil {
			return nil
		}
		cur, ok, err := getRecord[Duty](b, []byte(name))
		if err != nil || !ok || cur.Holder != holder {
			return err
		}
		cur.Until = time.Time{}
		return putRecord(b, []byte(name), cur)
	})
}

// Duties lists the duties and who holds each (a past Until: no one).
func (d *DB) Duties() ([]Duty, error) {
	var out []Duty
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		b := tx.Bucket(bucketDuties)
		if b == nil {
			return nil
		}
		var err error
		out, err = listRecords[Duty](b)
		return err
	})
	return out, err
}

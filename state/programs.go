package state

import (
	"context"
	"fmt"

	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/metakv"
)

// Program is a registered program, as the protocol defines it.
type Program = flight.Program

var bucketPrograms = []byte("programs")

// PutProgram registers or replaces a program.
func (d *DB) PutProgram(p Program) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketPrograms)
		if err != nil {
			return err
		}
		return putRecord(b, []byte(p.Name), p)
	})
}

// GetProgram returns a registered program; ErrNotFound when none has
// that name.
func (d *DB) GetProgram(name string) (Program, error) {
	var out Program
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		p, ok, err := getRecord[Program](tx.Bucket(bucketPrograms), []byte(name))
		if err == nil && !ok {
			err = fmt.Errorf("program %q: %w", name, ErrNotFound)
		}
		out = p
		return err
	})
	return out, err
}

// Programs lists the registered programs by name.
func (d *DB) Programs() ([]Program, error) {
	var out []Program
	err := d.kv.View(context.Background(), func(tx metakv.Tx) (err error) {
		out, err = listRecords[Program](tx.Bucket(bucketPrograms))
		return err
	})
	return out, err
}

// RemoveProgram unregisters a program; ErrNotFound when none has that
// name.
func (d *DB) RemoveProgram(name string) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		b := tx.Bucket(bucketPrograms)
		if b == nil || b.Get([]byte(name)) == nil {
			return fmt.Errorf("program %q: %w", name, ErrNotFound)
		}
		return b.Delete([]byte(name))
	})
}

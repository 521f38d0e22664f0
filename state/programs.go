package state

import (
	"context"
	"fmt"
	"time"

	"github.com/plumb-dev/plumb/metakv"
)

// Program is an executable an admin registered for jobs to name.
type Program struct {
	Name string `json:"name"`
	// Path is the server's own copy, named by its checksum, so what runs
	// is what was approved whatever happens to the original.
	Path   string `json:"path,omitempty"`
	Source string `json:"source,omitempty"` // the path it was registered from
	SHA256 string `json:"sha256"`
	// Network lets stages that ask for it (network: true) reach the
	// host's network.
	Network bool      `json:"network,omitempty"`
	AddedBy string    `json:"added_by,omitempty"`
	Added   time.Time `json:"added"`
}

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

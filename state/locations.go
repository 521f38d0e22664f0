package state

import (
	"context"
	"encoding/json"

	"github.com/plumb-dev/plumb/metakv"
)

var (
	bucketLocations = []byte("locations") // blob key → store name
	bucketStores    = []byte("stores")    // store name → StoreRecord
)

// Location returns the store holding a blob, when one was recorded
// (blob.Locations).
func (d *DB) Location(key string) (string, bool, error) {
	var out string
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		if v := tx.Bucket(bucketLocations).Get([]byte(key)); v != nil {
			out = string(v)
		}
		return nil
	})
	return out, out != "", err
}

// SetLocation records the store holding a blob.
func (d *DB) SetLocation(key, store string) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		return tx.Bucket(bucketLocations).Put([]byte(key), []byte(store))
	})
}

// ForgetLocation drops a deleted blob's location.
func (d *DB) ForgetLocation(key string) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		return tx.Bucket(bucketLocations).Delete([]byte(key))
	})
}

// StoreRecord is a blob store the server opens besides its primary one.
type StoreRecord struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	Draining bool   `json:"draining,omitempty"`
}

// PutStore records a store; Removed ones are deleted.
func (d *DB) PutStore(r StoreRecord) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error { return putRecord(tx.Bucket(bucketStores), []byte(r.Name), r) })
}

// DeleteStore forgets a store.
func (d *DB) DeleteStore(name string) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error { return tx.Bucket(bucketStores).Delete([]byte(name)) })
}

// Stores lists the recorded stores.
func (d *DB) Stores() ([]StoreRecord, error) {
	var out []StoreRecord
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		return tx.Bucket(bucketStores).ForEach(func(_, v []byte) error {
			var r StoreRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

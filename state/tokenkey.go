package state

import (
	"bytes"
	"context"

	"github.com/plumb-dev/plumb/metakv"
)

var keyTokenKey = []byte("token-key")

// TokenKey returns the key that signs login tokens for every server on
// this metadata, storing seed as that key when there is none yet (the
// first server's own key, so its tokens go on working). A token is then
// good on every server sharing the metadata, whichever issued it; one
// server's key in its data directory made a login work only where it
// was made. Whoever can read the metadata can sign tokens: it is already
// the whole system's secret.
func (d *DB) TokenKey(seed []byte) ([]byte, error) {
	var key []byte
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if v := meta.Get(keyTokenKey); len(v) >= 32 {
			key = bytes.Clone(v)
			return nil
		}
		key = bytes.Clone(seed)
		return meta.Put(keyTokenKey, key)
	})
	return key, err
}

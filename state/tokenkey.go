package state

import (
	"bytes"
	"context"
	"crypto/rand"

	"github.com/plumb-dev/plumb/metakv"
)

var (
	keyTokenKey      = []byte("token-key")
	keyTokenPrevious = []byte("token-key-previous")
)

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

// TokenKeys reads the token signing key and, after a rotation that kept
// it, the one before (nil otherwise). Servers read them again now and
// then, so a rotation on one reaches them all.
func (d *DB) TokenKeys() (current, previous []byte, err error) {
	err = d.kv.View(context.Background(), func(tx metakv.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return nil
		}
		current, previous = bytes.Clone(meta.Get(keyTokenKey)), bytes.Clone(meta.Get(keyTokenPrevious))
		return nil
	})
	return current, previous, err
}

// RotateTokenKey makes a new random token signing key. With keep, the
// key before still verifies the tokens it signed until they expire (a
// routine rotation); without it they end at once (a key that leaked).
// Only one previous key is kept: a second rotation drops the first.
func (d *DB) RotateTokenKey(keep bool) ([]byte, error) {
	key := make([]byte, 32)
	rand.Read(key)
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		old := bytes.Clone(meta.Get(keyTokenKey))
		if keep && len(old) >= 32 {
			if err := meta.Put(keyTokenPrevious, old); err != nil {
				return err
			}
		} else if err := meta.Delete(keyTokenPrevious); err != nil {
			return err
		}
		return meta.Put(keyTokenKey, key)
	})
	return key, err
}

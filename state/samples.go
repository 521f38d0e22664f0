package state

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/plumb-dev/plumb/metakv"
)

// bucketSamples holds the dashboard's history: time (Unix ns, big
// endian) → one sample, as the dashboard encodes it.
var bucketSamples = []byte("samples")

// PutSample keeps a dashboard sample taken at at, and lets go of those
// taken before keepFrom, so the history survives restarts and stays the
// size of its window.
func (d *DB) PutSample(at time.Time, sample []byte, keepFrom time.Time) error {
	return d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		b := tx.Bucket(bucketSamples)
		c := b.Cursor()
		for k, _ := c.First(); k != nil && bytesU64(k) < uint64(keepFrom.UnixNano()); k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return b.Put(binary.BigEndian.AppendUint64(nil, uint64(at.UnixNano())), sample)
	})
}

// Samples returns the samples taken at or after from, oldest first.
func (d *DB) Samples(from time.Time) ([][]byte, error) {
	var out [][]byte
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		c := tx.Bucket(bucketSamples).Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, uint64(max(from.UnixNano(), 0)))); k != nil; k, v = c.Next() {
			out = append(out, append([]byte(nil), v...))
		}
		return nil
	})
	return out, err
}

package metakv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/plumb-dev/plumb/metakv"
)

// A queue's blocks by sequence number, read back from the first one at
// or after 2. With metakv.OpenPostgres in place of OpenBolt the same code
// runs on a database several servers share.
func Example() {
	dir, _ := os.MkdirTemp("", "metakv-example-")
	defer os.RemoveAll(dir)
	db, err := metakv.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	err = db.Update(ctx, func(tx metakv.Tx) error {
		q, err := tx.CreateBucketIfNotExists([]byte("pcap"))
		if err != nil {
			return err
		}
		for _, name := range []string{"lax-1", "lax-2", "lax-3"} {
			seq, err := q.NextSequence()
			if err != nil {
				return err
			}
			if err := q.Put([]byte{byte(seq)}, []byte(name)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	db.View(ctx, func(tx metakv.Tx) error {
		c := tx.Bucket([]byte("pcap")).Cursor()
		for k, v := c.Seek([]byte{2}); k != nil; k, v = c.Next() {
			fmt.Println(k[0], string(v))
		}
		return nil
	})
	// Output:
	// 2 lax-2
	// 3 lax-3
}

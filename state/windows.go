package state

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// WindowRecord is a window a window stage fired: enough to know, after a
// restart, that it must not fire again at that revision, and to show
// operators what it held.
type WindowRecord struct {
	Stage    string    `json:"stage"` // the stage's consumer group
	ID       string    `json:"id"`    // windowing.WindowID as text
	Revision int       `json:"revision"`
	Reason   string    `json:"reason"`
	From     time.Time `json:"from,omitzero"`
	To       time.Time `json:"to,omitzero"`
	Blocks   []string  `json:"blocks"`
	Missing  []string  `json:"missing,omitempty"` // INSTANCE:SEQ
	Late     []string  `json:"late,omitempty"`
	Outputs  []string  `json:"outputs,omitempty"`
	Fired    time.Time `json:"fired"`
	// Error, when set, says the window's program failed on every attempt;
	// the window is set aside like a faulty block.
	Error string `json:"error,omitempty"`
}

var bucketWindows = []byte("windows") // stage → id\x00revision → WindowRecord

func windowKey(id string, revision int) []byte {
	return append(append([]byte(id), 0), u64(uint64(revision))...)
}

// CommitWindow publishes a fired window in one transaction: its outputs,
// its record, and the release of the input blocks it consumed (DONE for
// the group rec.Stage on queue; a record kept for another reader, such as
// a window stream, consumes nothing). A record of the same window and revision
// already there means a repeated run: nothing is published twice, and the
// stored outputs are returned.
func (d *DB) CommitWindow(rec WindowRecord, queue string, consumed []Block, outputs []Block) (bool, error) {
	again := false
	err := d.bolt.Update(func(tx *bolt.Tx) error {
		again = false
		ws, err := sub(tx, bucketWindows, rec.Stage)
		if err != nil {
			return err
		}
		k := windowKey(rec.ID, rec.Revision)
		if ws.Get(k) != nil {
			again = true
			return nil
		}
		for _, b := range outputs {
			if _, _, err := d.commitBlock(tx, b); err != nil {
				return fmt.Errorf("output of window %s: %w", rec.ID, err)
			}
			rec.Outputs = append(rec.Outputs, b.Name)
		}
		if err := putJSON(ws, k, rec); err != nil {
			return err
		}
		dels := mustSub(tx, bucketDeliveries, queue, rec.Stage)
		if dels == nil || len(consumed) == 0 {
			return nil
		}
		for _, b := range consumed {
			if _, _, err := markDone(dels, b.Serial); err != nil {
				return err
			}
		}
		return advanceFloor(tx, queue, rec.Stage)
	})
	if err == nil && !again {
		for _, b := range outputs {
			d.notify(b.Queue)
		}
	}
	return again, err
}

// Windows lists a stage's fired windows, in ID and revision order.
func (d *DB) Windows(stage string) ([]WindowRecord, error) {
	var out []WindowRecord
	err := d.bolt.View(func(tx *bolt.Tx) error {
		var err error
		out, err = listJSON[WindowRecord](mustSub(tx, bucketWindows, stage))
		return err
	})
	return out, err
}

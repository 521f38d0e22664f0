package state

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/metakv"
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
	// Empty, when set, makes the record stand for that many consecutive
	// windows of its site with no block, from ID on, over From to To: a
	// stage skipping empty windows records a stretch of them as one.
	Empty int64 `json:"empty,omitempty"`
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
// stored outputs are returned. carry, for a stage whose state goes from
// window to window, moves its instance's carry with the record (Seq is
// the window's index).
func (d *DB) CommitWindow(rec WindowRecord, queue string, consumed []Block, outputs []Block, carry *CarryUpdate) (bool, error) {
	again := false
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
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
		if err := putRecord(ws, k, rec); err != nil {
			return err
		}
		if carry != nil {
			if err := putCarry(tx, rec.Stage, carry, d.now()); err != nil {
				return fmt.Errorf("window %s: %w", rec.ID, err)
			}
		}
		dels := mustSub(tx, bucketDeliveries, queue, rec.Stage)
		if dels == nil || len(consumed) == 0 {
			return nil
		}
		for _, b := range consumed {
			if _, _, err := markDone(tx, queue, rec.Stage, b.Serial); err != nil {
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
	return d.WindowsWhere(stage, "", nil, 0)
}

// WindowsWhere lists, in ID and revision order, a stage's fired windows
// whose ID starts with prefix and that keep accepts (all when nil),
// stopping at limit of them (0: no limit): the first hundred of 10^5
// windows cost a hundred records read, where reading all took half a
// second, and a site's windows (prefix "SITE/") are found without
// reading the others'.
func (d *DB) WindowsWhere(stage, prefix string, keep func(*WindowRecord) bool, limit int) ([]WindowRecord, error) {
	var out []WindowRecord
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		ws := mustSub(tx, bucketWindows, stage)
		if ws == nil {
			return nil
		}
		c := ws.Cursor()
		for k, v := c.Seek([]byte(prefix)); k != nil && bytes.HasPrefix(k, []byte(prefix)) && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			var rec WindowRecord
			if err := decode(v, &rec); err != nil {
				return err
			}
			if keep == nil || keep(&rec) {
				out = append(out, rec)
			}
		}
		return nil
	})
	return out, err
}

// FiredWindow names a window a stage fired, at a revision.
type FiredWindow struct {
	ID       string
	Revision int
}

// FiredWindows lists a stage's fired windows from the record keys alone:
// a restart needs only which fired, and reading every record's block list
// would grow with the stage's history.
func (d *DB) FiredWindows(stage string) ([]FiredWindow, error) {
	var out []FiredWindow
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		ws := mustSub(tx, bucketWindows, stage)
		if ws == nil {
			return nil
		}
		return ws.ForEach(func(k, _ []byte) error {
			if len(k) < 9 || k[len(k)-9] != 0 {
				return fmt.Errorf("window record key %q of stage %s is not ID\\x00REVISION", k, stage)
			}
			out = append(out, FiredWindow{ID: string(k[:len(k)-9]), Revision: int(bytesU64(k[len(k)-8:]))})
			return nil
		})
	})
	return out, err
}

// Tails is what a window stage replays after a restart.
type Tails struct {
	// Blocks, in arrival order: per site, from below its lowest owed
	// block (as far down as the caller's needed accepts, and one more)
	// to its newest.
	Blocks []Block
	// Newest is the queue's newest serial when they were read: later
	// blocks are fed as they come.
	Newest uint64
	// Owed is each site's lowest sequence number the group still owes
	// (blocks below it are all done); a site that owes none is absent.
	Owed map[string]uint64
}

// SiteTails reads what a window stage's tracker must see again after a
// restart, without reading the queue's history: the blocks each site
// still owes the group, those below them that needed(lowest owed, b)
// accepts walking down (the tracker's late horizon), and one more for a
// bracket. A site that owes nothing is walked down from its newest block.
// Blocks at or before serial start (the group's start) are left out. Its
// cost follows the open windows and the horizon, not the history.
func (d *DB) SiteTails(queue, group string, start uint64, needed func(low, b Block) bool) (Tails, error) {
	out := Tails{Owed: map[string]uint64{}}
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		arrivals := mustSub(tx, bucketArrivals, queue)
		blocks := mustSub(tx, bucketBlocks, queue)
		if arrivals == nil || blocks == nil {
			return nil
		}
		out.Newest = arrivals.Sequence()
		err := eachUnsettled(tx, queue, group, func(k []byte, del Delivery) (bool, error) {
			if del.State == Done || del.State == Lost { // a LOST block is gone
				return false, nil
			}
			key := arrivals.Get(k)
			i := bytes.IndexByte(key, 0)
			if i < 0 || len(key) != i+9 {
				return false, fmt.Errorf("arrival %d of queue %s names no block (%q)", bytesU64(k), queue, key)
			}
			inst, seq := string(key[:i]), bytesU64(key[i+1:])
			if low, ok := out.Owed[inst]; !ok || seq < low {
				out.Owed[inst] = seq
			}
			return false, nil
		})
		if err != nil {
			return err
		}
		c := blocks.Cursor()
		for site, _ := c.First(); site != nil; {
			i := bytes.IndexByte(site, 0)
			if i < 0 {
				return fmt.Errorf("block key %q of queue %s has no instance", site, queue)
			}
			inst, prefix := string(site[:i]), bytes.Clone(site[:i+1])
			// The pivot: the lowest owed block, or the newest.
			var pk, pv []byte
			if low, ok := out.Owed[inst]; ok {
				pk, pv = c.Seek(blockKey(inst, low))
			} else if pk, _ = c.Seek(append(bytes.Clone(prefix), 0xff)); pk == nil {
				pk, pv = c.Last()
			} else {
				pk, pv = c.Prev()
			}
			if pk == nil || !bytes.HasPrefix(pk, prefix) {
				return fmt.Errorf("queue %s: site %s's lowest owed block is not stored", queue, inst)
			}
			var low Block
			if err := decode(pv, &low); err != nil {
				return err
			}
			// Down from the pivot while needed; the first block not
			// needed is kept too, as a bracket.
			k, v := c.Prev()
			for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
				var b Block
				if err := decode(v, &b); err != nil {
					return err
				}
				if !needed(low, b) {
					break
				}
			}
			if k == nil || !bytes.HasPrefix(k, prefix) {
				k, v = c.Seek(prefix) // every block of the site is needed
			}
			// Up from there to the site's newest.
			for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				var b Block
				if err := decode(v, &b); err != nil {
					return err
				}
				if b.Serial > start {
					out.Blocks = append(out.Blocks, b)
				}
			}
			site = k // the next site's first block, if any
		}
		return nil
	})
	slices.SortFunc(out.Blocks, func(a, b Block) int { return cmp.Compare(a.Serial, b.Serial) })
	return out, err
}

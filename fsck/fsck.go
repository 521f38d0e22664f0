// Package fsck checks that metadata and blobs agree, online, while blocks
// arrive and stages run: every block's blob is there with its size (and,
// when asked, its SHA-256), and every blob belongs to a block. Repair
// deletes orphan blobs older than a grace period (younger ones may be
// uploads whose metadata is about to commit) and marks blocks whose bytes
// are gone as lost, telling their subscribers.
package fsck

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/internal/every"
	"github.com/plumb-dev/plumb/state"
)

// Options say how deep to look and what to mend.
type Options struct {
	// Repair deletes orphan blobs past Grace and marks missing or corrupt
	// blocks lost; without it fsck only reports.
	Repair bool
	// Verify reads every blob and checks its SHA-256, not only its size.
	Verify bool
	// Grace is how old an orphan blob must be before it is deleted; an
	// hour when zero.
	Grace time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Progress, when set, is called now and then with blocks checked.
	Progress func(checked int)
	// Scratch, when set, finds what dead stage runs left in scratch (and
	// with remove deletes it), leaving live runs' alone.
	Scratch func(remove bool) (entries int, bytes int64, err error)
	// Recompute, when set, makes a broken block's bytes again (derived
	// blocks, from their inputs); repair marks a block lost only when it
	// fails.
	Recompute func(ctx context.Context, b state.Block) error
}

// Report is what fsck found and did.
type Report struct {
	Blocks      int      `json:"blocks"`  // blocks checked
	Blobs       int      `json:"blobs"`   // blobs listed
	Missing     []string `json:"missing"` // blocks whose blob is gone
	Corrupt     []string `json:"corrupt"` // blocks whose blob has the wrong size or checksum
	Orphans     int      `json:"orphans"` // blobs no block names, past the grace period
	OrphanBytes int64    `json:"orphan_bytes"`
	Young       int      `json:"young_orphans"` // within the grace period: left alone
	// Repairs made.
	OrphansDeleted int `json:"orphans_deleted"`
	Recomputed     int `json:"recomputed"` // derived blocks made again from their inputs
	MarkedLost     int `json:"marked_lost"`
	// What runs killed with their process left in scratch; removed with
	// repair.
	Scratch        int   `json:"scratch_left,omitempty"`
	ScratchBytes   int64 `json:"scratch_bytes,omitempty"`
	ScratchRemoved bool  `json:"scratch_removed,omitempty"`
}

// Clean reports whether fsck found nothing wrong.
func (r Report) Clean() bool { return len(r.Missing) == 0 && len(r.Corrupt) == 0 && r.Orphans == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("%d blocks, %d blobs: %d missing, %d corrupt, %d orphan blobs (%d bytes), %d young orphans left alone; repaired: %d orphans deleted, %d blocks recomputed, %d blocks marked lost",
		r.Blocks, r.Blobs, len(r.Missing), len(r.Corrupt), r.Orphans, r.OrphanBytes, r.Young, r.OrphansDeleted, r.Recomputed, r.MarkedLost)
	if r.Scratch > 0 {
		verb := "left (repair removes it)"
		if r.ScratchRemoved {
			verb = "removed"
		}
		s += fmt.Sprintf("; dead runs' scratch: %d entries, %d bytes %s", r.Scratch, r.ScratchBytes, verb)
	}
	return s
}

// Check runs one pass.
func Check(ctx context.Context, db *state.DB, store blob.Store, opt Options) (Report, error) {
	if opt.Grace <= 0 {
		opt.Grace = time.Hour
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	var rep Report
	if err := checkBlocks(ctx, db, store, opt, &rep); err != nil {
		return rep, err
	}
	if opt.Scratch != nil {
		var err error
		if rep.Scratch, rep.ScratchBytes, err = opt.Scratch(opt.Repair); err != nil {
			return rep, fmt.Errorf("scratch: %w", err)
		}
		rep.ScratchRemoved = opt.Repair && rep.Scratch > 0
	}
	return rep, checkBlobs(ctx, db, store, opt, &rep)
}

// checkBlocks looks for each block's blob.
func checkBlocks(ctx context.Context, db *state.DB, store blob.Store, opt Options, rep *Report) error {
	qs, err := db.Queues()
	if err != nil {
		return err
	}
	for _, q := range qs {
		for after := uint64(0); ; {
			bs, err := db.Blocks(q.Name, after, 1000)
			if err != nil {
				return err
			}
			if len(bs) == 0 {
				break
			}
			for _, b := range bs {
				after = b.Serial
				if err := ctx.Err(); err != nil {
					return err
				}
				rep.Blocks++
				if opt.Progress != nil && rep.Blocks%10000 == 0 {
					opt.Progress(rep.Blocks)
				}
				why := problem(ctx, store, b, opt.Verify)
				switch {
				case why == "":
					continue
				case strings.HasPrefix(why, "missing"):
					rep.Missing = append(rep.Missing, b.Name)
				default:
					rep.Corrupt = append(rep.Corrupt, b.Name)
				}
				if opt.Repair && opt.Recompute != nil {
					rerr := opt.Recompute(ctx, b)
					if rerr == nil {
						rep.Recomputed++
						continue
					}
					why += "; not recomputed: " + rerr.Error()
				}
				if opt.Repair {
					ok, err := db.MarkLost(b.ID(), b.Key, "fsck: blob "+why)
					if err != nil {
						return err
					}
					if ok {
						rep.MarkedLost++
						if !strings.HasPrefix(why, "missing") {
							store.Delete(ctx, b.Key) // known bad bytes; no one may read them again
						}
					}
				}
			}
		}
	}
	return nil
}

// problem says what is wrong with a block's blob, or "".
func problem(ctx context.Context, store blob.Store, b state.Block, verify bool) string {
	info, err := store.Stat(ctx, b.Key)
	if errors.Is(err, blob.ErrNotFound) {
		return "missing"
	}
	if err != nil {
		return "" // unreachable store: not evidence of loss
	}
	if info.Size != b.Size {
		return fmt.Sprintf("has %d bytes, not %d", info.Size, b.Size)
	}
	if !verify {
		return ""
	}
	r, err := store.Open(ctx, b.Key)
	if err != nil {
		return ""
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return ""
	}
	if sum := fmt.Sprintf("%x", h.Sum(nil)); sum != b.SHA256 {
		return "sha256 " + sum + " does not match " + b.SHA256
	}
	return ""
}

// checkBlobs looks for blobs no block names.
func checkBlobs(ctx context.Context, db *state.DB, store blob.Store, opt Options, rep *Report) error {
	now := opt.Now()
	multi, _ := store.(*blob.Multi)
	// A copy on a store other than the block's (left by a move the
	// deadline interrupted) is an orphan too.
	here := func(info blob.Info) bool {
		if multi == nil || info.Store == "" {
			return true
		}
		at, err := multi.Where(info.Key)
		return err != nil || at == info.Store
	}
	return store.List(ctx, func(info blob.Info) error {
		rep.Blobs++
		if named(db, info.Key) && here(info) {
			return nil
		}
		if now.Sub(info.ModTime) < opt.Grace {
			rep.Young++
			return nil
		}
		rep.Orphans++
		rep.OrphanBytes += info.Size
		if !opt.Repair {
			return nil
		}
		// Look again: the block may have been committed since.
		if named(db, info.Key) && here(info) {
			rep.Orphans--
			rep.OrphanBytes -= info.Size
			return nil
		}
		del := store.Delete
		if multi != nil && info.Store != "" {
			del = func(ctx context.Context, key string) error { return multi.DeleteFrom(ctx, info.Store, key) }
		}
		if err := del(ctx, info.Key); err != nil {
			return fmt.Errorf("delete orphan blob %s: %w", info.Key, err)
		}
		rep.OrphansDeleted++
		return nil
	})
}

// named reports whether a block's metadata names the blob key (see
// blob.BlockKey).
func named(db *state.DB, key string) bool {
	if group, instance, ok := blob.ParseCarryKey(key); ok {
		// A sequential stage's carried state: named by its site's carry.
		c, ok, err := db.GetCarry(group, instance)
		return err != nil || ok && c.StateKey == key
	}
	name, _, err := blob.ParseBlockKey(key)
	if err != nil {
		return false
	}
	n, err := block.Parse(name)
	if err != nil {
		return false
	}
	b, err := db.Lookup(n.ID())
	if errors.Is(err, state.ErrNotFound) {
		return false
	}
	return err != nil || b.Key == key // on a metadata error, keep the blob
}

// Run checks every interval until ctx ends, repairing orphans and lost
// blocks (but not reading every blob), and logs what it found.
func Run(ctx context.Context, db *state.DB, store blob.Store, period time.Duration, recompute func(context.Context, state.Block) error, log *slog.Logger) {
	every.Run(ctx, period, func() {
		rep, err := Check(ctx, db, store, Options{Repair: true, Recompute: recompute})
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("fsck failed; it runs again next time", "err", err)
		case err == nil && !rep.Clean():
			log.Warn("fsck found problems", "report", rep.String(), "missing", rep.Missing, "corrupt", rep.Corrupt)
		}
	})
}

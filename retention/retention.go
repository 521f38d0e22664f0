// Package retention lets blocks go when their queue's retention says so:
// a sweep that deletes, queue by queue, the blocks past their age or
// beyond their queue's byte cap (never one a subscriber still owes,
// unless the queue drops unconsumed blocks), metadata first, then blobs.
package retention

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/internal/every"
	"github.com/plumb-dev/plumb/state"
)

// Report counts what a sweep let go.
type Report struct {
	Deleted int   `json:"deleted"`
	Bytes   int64 `json:"bytes"`
	Lost    int   `json:"lost"` // deliveries dropped unconsumed
	Kept    int   `json:"kept"` // past the limits but still owed
}

// batch bounds one metadata transaction.
const batch = 1000

// Sweep runs one pass over every queue with a retention policy. A blob
// whose delete fails stays behind as an orphan, for fsck to collect.
func Sweep(ctx context.Context, db *state.DB, store blob.Store, log *slog.Logger) (Report, error) {
	var rep Report
	policies, err := db.Policies()
	if err != nil {
		return rep, err
	}
	for queue := range policies {
		for {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			res, err := db.Expire(queue, batch)
			if err != nil {
				return rep, err
			}
			rep.Kept += res.Kept
			rep.Lost += len(res.Lost)
			for _, l := range res.Lost {
				log.Warn("block dropped before its subscriber was done", "queue", l.Queue, "group", l.Group, "block", l.Block, "why", l.Why)
			}
			for _, b := range res.Deleted {
				if err := store.Delete(ctx, b.Key); err != nil && !errors.Is(err, blob.ErrNotFound) {
					log.Warn("expired block's blob not deleted; fsck will collect it", "block", b.Name, "key", b.Key, "err", err)
				}
				rep.Deleted++
				rep.Bytes += b.Size
			}
			if len(res.Deleted) < batch {
				break
			}
		}
	}
	return rep, nil
}

// Run sweeps every interval until ctx ends.
func Run(ctx context.Context, db *state.DB, store blob.Store, period time.Duration, log *slog.Logger) {
	every.Run(ctx, period, func() {
		rep, err := Sweep(ctx, db, store, log)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("retention sweep failed; it runs again next time", "err", err)
		case rep.Deleted > 0 || rep.Lost > 0:
			log.Info("retention sweep", "deleted", rep.Deleted, "bytes", rep.Bytes, "lost", rep.Lost, "kept_owed", rep.Kept)
		}
	})
}

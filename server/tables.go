package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/plumb-dev/plumb/laketable"
)

// syncTables keeps the lake queues' Iceberg tables in step with them
// until ctx ends; an error is logged when it changes, not every time.
// Every compactEvery (0: never) it also compacts the tables' past days
// and applies each table's TTL and privacy age (laketable.Retire).
func syncTables(ctx context.Context, tables *laketable.Tables, every, compactEvery time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last string
	compacted := time.Now()
	for {
		res, err := tables.SyncAll(ctx)
		for _, r := range res {
			log.Info("iceberg table in step with its queue", "table", r.Table, "files_added", r.Added, "files_dropped", r.Dropped)
		}
		if compactEvery > 0 && time.Since(compacted) >= compactEvery && err == nil {
			compacted = time.Now()
			var cs []laketable.Compacted
			cs, err = tables.CompactAll(ctx, time.Now())
			for _, c := range cs {
				log.Info("iceberg table compacted", "table", c.Table, "block_files", c.Files, "files_written", c.Written)
			}
			rs, rerr := tables.RetireAll(ctx, time.Now())
			for _, r := range rs {
				log.Info("iceberg table retired its old days", "table", r.Table, "files_past_ttl", r.Dropped,
					"files_purged_of_addresses", r.Purged, "files_written", r.Written, "unkept_files_deleted", r.Removed)
			}
			err = errors.Join(err, rerr)
		}
		if msg := fmt.Sprint(err); err != nil && msg != last && ctx.Err() == nil {
			log.Warn("an Iceberg table could not follow its lake queue; it is tried again", "err", err)
		}
		last = fmt.Sprint(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/plumb-dev/plumb/laketable"
)

// syncTables keeps the lake queues' Iceberg tables in step with them
// until ctx ends; an error is logged when it changes, not every time.
func syncTables(ctx context.Context, tables *laketable.Tables, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last string
	for {
		res, err := tables.SyncAll(ctx)
		for _, r := range res {
			log.Info("iceberg table in step with its queue", "table", r.Table, "files_added", r.Added, "files_dropped", r.Dropped)
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

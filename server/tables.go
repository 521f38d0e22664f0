package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/laketable"
	"github.com/plumb-dev/plumb/pipeline"
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

// ownersMayUseKey is the lake's check of a table's plumb.privacy-key:
// every owner of the stage that writes the table's queue must hold a
// grant of the key under anon_keys, as a job naming it in
// builtin:anonymize must. Without users (authz nil) any key is used.
func ownersMayUseKey(g *pipeline.Graph, authz *auth.Authority, queue, key string) error {
	if authz == nil {
		return nil
	}
	if g == nil {
		g = &pipeline.Graph{}
	}
	var owners []pipeline.Owner
	for _, n := range g.Stages {
		if slices.Contains(n.Outputs, queue) {
			owners = n.Owners
		}
	}
	if len(owners) == 0 {
		return fmt.Errorf("no stage writes %s, so no owner of the table holds key %s; the table's addresses are purged with a key only while its stage runs", queue, key)
	}
	for _, o := range owners {
		id, err := authz.Identify(o.User, "lake")
		if err != nil {
			return fmt.Errorf("the owner of job %s, which writes %s: %w", o.Job, queue, err)
		}
		if !authz.MayUseKey(id, key) {
			return fmt.Errorf("user %s, who owns job %s writing %s, may not use anonymization key %s; an admin grants it under anon_keys in the users file", o.User, o.Job, queue, key)
		}
	}
	return nil
}

package laketable

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/pcap/anon"
	"github.com/plumb-dev/plumb/pipeline"
)

// A table's owner says how long its days live, and when they lose the
// addresses of the people who asked, with table properties: any engine
// sets them (pyiceberg's set_properties, Spark's ALTER TABLE … SET
// TBLPROPERTIES), and the table carries them wherever it goes.
const (
	// PropTTL is how long a day stays in the table ("400d"): older days'
	// files leave it, and a sync never adds their blocks back.
	PropTTL = "plumb.ttl"
	// PropPrivacyAfter is the age ("30d") from which a day's rows are
	// rewritten without addresses: src, dst, client, server and the
	// client subnet (ecs_address, and the option in edns_options) become
	// null, or with PropPrivacyKey are anonymized.
	PropPrivacyAfter = "plumb.privacy-after"
	// PropPrivacyKey names a key of the server's --anon-keys directory:
	// the purge then rewrites the addresses with Crypto-PAn under that
	// key, prefix-preserving and the same as builtin:anonymize?key=NAME
	// makes them, instead of nulling them, so that a client's queries
	// can still be followed and networks counted, but not named.
	PropPrivacyKey = "plumb.privacy-key"
	// propDroppedBefore is the first day the TTL kept (2006-01-02): the
	// days before it are gone for good, whatever the lake still holds.
	propDroppedBefore = "plumb.dropped-before"
)

// privateColumns are the columns a privacy purge empties: the addresses
// of records and of transactions, and the EDNS client subnet (its
// address, and the option's bytes among the others).
var privateColumns = []string{"src", "dst", "client", "server", "ecs_address", "edns_options"}

// privateSuffix ends the name of a file a purge wrote: its rows hold no
// addresses, and no later purge reads it again.
const privateSuffix = "-private.parquet"

// SetProperties sets table properties of the table of a lake queue; the
// TTL and privacy age are checked first, and an empty value removes a
// property.
func (t *Tables) SetProperties(ctx context.Context, queue string, props map[string]string) error {
	name := Namespace + "." + TableName(queue)
	set, unset := iceberg.Properties{}, []string{}
	for k, v := range props {
		if v == "" {
			unset = append(unset, k)
		} else {
			set[k] = v
		}
	}
	pol, err := tablePolicy(set)
	if err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	if err := t.checkKey(queue, pol.key); err != nil {
		return fmt.Errorf("table %s: %s: %w", name, PropPrivacyKey, err)
	}
	tbl, err := t.cat.LoadTable(ctx, table.Identifier{Namespace, TableName(queue)})
	if err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	tx := tbl.NewTransaction()
	if err := tx.SetProperties(set); err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	if len(unset) > 0 {
		if err := tx.RemoveProperties(unset); err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
	}
	_, err = tx.Commit(ctx)
	return err
}

// Retired is what one retirement of a table did.
type Retired struct {
	Table   string
	Dropped int // files of days past the TTL let go
	Purged  int // files rewritten without addresses
	Written int // files the purge wrote
	Removed int // compacted files no snapshot kept, deleted
}

// policy is a table's TTL, privacy age and key, zero when unset.
type policy struct {
	ttl, privacyAfter time.Duration
	key               string
}

func tablePolicy(props iceberg.Properties) (policy, error) {
	p := policy{key: props[PropPrivacyKey]}
	for key, d := range map[string]*time.Duration{PropTTL: &p.ttl, PropPrivacyAfter: &p.privacyAfter} {
		v := props[key]
		if v == "" {
			continue
		}
		pd, err := pipeline.ParseDuration(v)
		if err != nil || pd <= 0 {
			return p, fmt.Errorf("table property %s=%q: want days such as 30d; nothing is retired until it is set right", key, v)
		}
		*d = time.Duration(pd)
	}
	return p, nil
}

// fileDay is the day and site a table's file holds (…/date=D/site=S/F),
// as date=D/site=S; false for a file laid out otherwise.
func fileDay(loc string) (day, key string, ok bool) {
	parts := strings.Split(loc, "/")
	if len(parts) < 3 {
		return "", "", false
	}
	date, site := parts[len(parts)-3], parts[len(parts)-2]
	if !strings.HasPrefix(date, "date=") || !strings.HasPrefix(site, "site=") {
		return "", "", false
	}
	return strings.TrimPrefix(date, "date="), date + "/" + site, true
}

// cutoff is the first day (UTC) younger than age at now.
func cutoff(now time.Time, age time.Duration) string {
	return now.UTC().Add(-age).Format(time.DateOnly)
}

// Retire applies the table's own TTL and privacy age at now: the files
// of days past the TTL leave the table, and the days past the privacy
// age are rewritten without addresses, each day and site into files of
// up to the target size, swapped in one commit. Compacted files that no
// snapshot kept holds any more are then deleted, so an address purged
// leaves the disk once the snapshots before the purge expire.
//
// The lake's own block files are the lake queue's: its retention, not
// the table's, deletes them.
func (t *Tables) Retire(ctx context.Context, queue string, now time.Time) (Retired, error) {
	name := TableName(queue)
	res := Retired{Table: Namespace + "." + name}
	tbl, err := t.cat.LoadTable(ctx, table.Identifier{Namespace, name})
	if err != nil {
		return res, fmt.Errorf("table %s: %w", res.Table, err)
	}
	pol, err := tablePolicy(tbl.Properties())
	if err != nil {
		return res, fmt.Errorf("table %s: %w", res.Table, err)
	}
	if pol.ttl > 0 {
		if tbl, err = t.dropDays(ctx, tbl, cutoff(now, pol.ttl), &res); err != nil {
			return res, fmt.Errorf("table %s: dropping the days past its %s: %w", res.Table, PropTTL, err)
		}
	}
	var purgeErr error
	if pol.privacyAfter > 0 {
		if err := t.checkKey(queue, pol.key); err != nil {
			purgeErr = fmt.Errorf("table %s: %s %s: %w; nothing is purged until it may be used", res.Table, PropPrivacyKey, pol.key, err)
		} else if tbl, err = t.purge(ctx, tbl, name, cutoff(now, pol.privacyAfter), pol.key, &res); err != nil {
			purgeErr = fmt.Errorf("table %s: purging the addresses past its %s: %w", res.Table, PropPrivacyAfter, err)
		}
	}
	if tbl, err = t.expire(ctx, tbl); err != nil {
		return res, errors.Join(purgeErr, fmt.Errorf("table %s: expiring snapshots: %w", res.Table, err))
	}
	if res.Removed, err = t.removeUnkept(ctx, tbl, name); err != nil {
		return res, errors.Join(purgeErr, fmt.Errorf("table %s: removing the compacted files no snapshot holds: %w", res.Table, err))
	}
	return res, purgeErr
}

// dropDays lets go of every file of the days before first, and records
// first so that a sync adds none of them back, in one commit.
func (t *Tables) dropDays(ctx context.Context, tbl *table.Table, first string, res *Retired) (*table.Table, error) {
	var drop []string
	err := eachFile(ctx, tbl, func(f iceberg.DataFile) {
		if day, _, ok := fileDay(f.FilePath()); ok && day < first {
			drop = append(drop, f.FilePath())
		}
	})
	if err != nil {
		return tbl, err
	}
	if len(drop) == 0 && tbl.Properties()[propDroppedBefore] >= first {
		return tbl, nil
	}
	tx := tbl.NewTransaction()
	if tbl.Properties()[propDroppedBefore] < first {
		if err := tx.SetProperties(iceberg.Properties{propDroppedBefore: first}); err != nil {
			return tbl, err
		}
	}
	if len(drop) > 0 {
		if err := tx.ReplaceDataFiles(ctx, drop, nil, iceberg.Properties{"plumb.ttl-dropped-files": fmt.Sprint(len(drop))}); err != nil {
			return tbl, err
		}
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		return tbl, err
	}
	res.Dropped += len(drop)
	return tbl, nil
}

// purge rewrites the files of each day and site before first that still
// hold addresses into files without them, and makes those columns
// optional in the table's schema (a compatible change), in one commit
// per run of files. With a key the addresses are anonymized under it
// instead; a key that cannot be read purges nothing, since nulling would
// lose what the operator chose to keep.
func (t *Tables) purge(ctx context.Context, tbl *table.Table, name, first, keyName string, res *Retired) (*table.Table, error) {
	var transform func(arrow.RecordBatch) (arrow.RecordBatch, error)
	if keyName != "" {
		key, err := anon.ReadKey(t.keys, keyName)
		if err != nil {
			return tbl, fmt.Errorf("%s: %w; nothing is purged until it can be read", PropPrivacyKey, err)
		}
		a, err := anon.New(anon.Config{Key: key})
		if err != nil {
			return tbl, err
		}
		transform = a.Records
	}
	groups := map[string][]src{}
	err := eachFile(ctx, tbl, func(f iceberg.DataFile) {
		day, key, ok := fileDay(f.FilePath())
		if ok && day < first && !strings.HasSuffix(f.FilePath(), privateSuffix) {
			groups[key] = append(groups[key], src{f.FilePath(), f.FileSizeBytes(), f.Count()})
		}
	})
	if err != nil || len(groups) == 0 {
		return tbl, err
	}
	var private []string
	for _, f := range tbl.Schema().Fields() {
		if slices.Contains(privateColumns, f.Name) {
			private = append(private, f.Name)
		}
	}
	if len(private) == 0 {
		return tbl, nil // a table of other rows: nothing to purge
	}
	compacted := t.compactedDir(name) + "/"
	var skipped []error
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		for _, run := range runs(groups[key], t.target, t.memory) {
			if why := overBudget(run, t.memory); why != "" {
				// The other days go on; this one is named until the
				// budget is raised.
				skipped = append(skipped, fmt.Errorf("%s: %s", key, why))
				continue
			}
			locs := make([]string, 0, len(run))
			var sources []string // the lake's block files the run holds
			for _, f := range run {
				locs = append(locs, f.loc)
				if !strings.HasPrefix(f.loc, compacted) {
					sources = append(sources, f.loc)
					continue
				}
				s, err := t.sources(f.loc)
				if err != nil {
					return tbl, err
				}
				sources = append(sources, s...)
			}
			out := t.compactedFile(name, key, locs[0], fmt.Sprintf("-%d%s", len(locs), privateSuffix))
			nulled := private
			if transform != nil {
				nulled = nil
			}
			if err := t.rewrite(ctx, locs, sources, out, nulled, transform); err != nil {
				return tbl, fmt.Errorf("%s: %w", key, err)
			}
			tx := tbl.NewTransaction()
			us := tx.UpdateSchema(true, false)
			for _, c := range nulled {
				if f, ok := tbl.Schema().FindFieldByName(c); ok && f.Required {
					us.UpdateColumn([]string{c}, table.ColumnUpdate{Required: iceberg.Optional[bool]{Valid: true}})
				}
			}
			if err := us.Commit(); err != nil {
				return tbl, fmt.Errorf("%s: making the address columns optional: %w", key, err)
			}
			props := iceberg.Properties{"plumb.purged-files": fmt.Sprint(len(locs))}
			if err := tx.ReplaceDataFiles(ctx, locs, []string{out}, props); err != nil {
				return tbl, fmt.Errorf("%s: %w", key, err)
			}
			if tbl, err = tx.Commit(ctx); err != nil {
				return tbl, fmt.Errorf("%s: commit: %w", key, err)
			}
			res.Purged += len(locs)
			res.Written++
		}
	}
	return tbl, errors.Join(skipped...)
}

// expire expires the snapshots the table need not keep (those older than
// a week beyond the last 100) and deletes their manifest lists and the
// manifests no kept snapshot reads. Data files are left where they are:
// Iceberg's own clean-up would delete the lake's block files, which are
// the queue's, and compacted files go when removeUnkept finds them.
func (t *Tables) expire(ctx context.Context, tbl *table.Table) (*table.Table, error) {
	if len(tbl.Metadata().Snapshots()) <= t.keepSnapshots {
		return tbl, nil
	}
	tx := tbl.NewTransaction()
	if err := tx.ExpireSnapshots(table.WithOlderThan(t.keepFor), table.WithRetainLast(t.keepSnapshots), table.WithPostCommit(false)); err != nil {
		return tbl, err
	}
	after, err := tx.Commit(ctx)
	if err != nil {
		return tbl, err
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return after, err
	}
	kept := map[string]bool{}
	for _, snap := range after.Metadata().Snapshots() {
		kept[snap.ManifestList] = true
		manifests, err := snap.Manifests(fs)
		if err != nil {
			return after, err
		}
		for _, m := range manifests {
			kept[m.FilePath()] = true
		}
	}
	gone := map[string]bool{}
	for _, snap := range tbl.Metadata().Snapshots() {
		if kept[snap.ManifestList] {
			continue
		}
		manifests, err := snap.Manifests(fs)
		if err != nil {
			return after, err
		}
		gone[snap.ManifestList] = true
		for _, m := range manifests {
			if !kept[m.FilePath()] {
				gone[m.FilePath()] = true
			}
		}
	}
	var errs []error
	for f := range gone {
		if err := fs.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return after, errors.Join(errs...)
}

// removeUnkept deletes the compacted files (and their sidecars) that no
// snapshot the table keeps holds: those compaction, a purge or the TTL
// replaced, once their last snapshot expired. A file younger than an
// hour (unkeptAfter) is left: it may be one a compaction wrote and has
// yet to commit.
func (t *Tables) removeUnkept(ctx context.Context, tbl *table.Table, name string) (int, error) {
	kept := map[string]bool{}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return 0, err
	}
	for _, snap := range tbl.Metadata().Snapshots() {
		manifests, err := snap.Manifests(fs)
		if err != nil {
			return 0, err
		}
		for _, m := range manifests {
			entries, err := m.FetchEntries(fs, true)
			if err != nil {
				return 0, err
			}
			for _, e := range entries {
				kept[e.DataFile().FilePath()] = true
			}
		}
	}
	removed := 0
	err = t.files.walk(ctx, t.compactedDir(name), func(loc string, mod time.Time) error {
		if !strings.HasSuffix(loc, ".parquet") || kept[loc] || time.Since(mod) < t.unkeptAfter {
			return nil
		}
		if err := t.files.remove(ctx, loc); err != nil {
			return err
		}
		t.files.remove(ctx, loc+".sources")
		t.mu.Lock()
		delete(t.sidecars, loc)
		t.mu.Unlock()
		removed++
		return nil
	})
	return removed, err
}

// RetireAll retires the table of every lake queue that has one.
func (t *Tables) RetireAll(ctx context.Context, now time.Time) ([]Retired, error) {
	qs, err := t.db.Queues()
	if err != nil {
		return nil, err
	}
	var out []Retired
	var errs []error
	for _, q := range qs {
		if !blob.IsLake(q.Name) {
			continue
		}
		res, err := t.Retire(ctx, q.Name, now)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
		}
		if res.Dropped+res.Purged+res.Removed > 0 {
			out = append(out, res)
		}
	}
	return out, errors.Join(errs...)
}

// Package laketable keeps Apache Iceberg tables in step with the lake
// queues (QUEUE.parquet) of a server: each table holds every Parquet file
// its queue holds, once, and nothing else. Query engines (pyiceberg,
// Spark, Trino, DuckDB) load the tables from a SQL catalog in one SQLite
// file beside the server's data, and read the files where the blob store
// keeps them.
//
// The queue's metadata is the truth and the table follows it: a sync adds
// the files of blocks the table lacks and drops those of blocks the queue
// no longer holds (retention), in one Iceberg commit. A sync that dies
// before its commit leaves the table as it was; one that dies after it
// finds the files there the next time. Neither a retried nor a repeated
// stage run can put a block in twice, since a block has one file.
package laketable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	_ "github.com/jackc/pgx/v5/stdlib" // the shared catalog's database/sql driver
	_ "modernc.org/sqlite"             // the catalog's database/sql driver, pure Go

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/state"
)

// Namespace is the catalog namespace of the tables.
const Namespace = "plumb"

// CatalogName is the name of the SQL catalog (pyiceberg's SqlCatalog
// name, which keys its rows).
const CatalogName = "plumb"

// TableName is the table of a lake queue: the queue's name without
// .parquet, dots as underscores (dns.parquet is plumb.dns,
// pairs.v2.parquet is plumb.pairs_v2).
func TableName(queue string) string {
	return strings.ReplaceAll(strings.TrimSuffix(queue, ".parquet"), ".", "_")
}

// Tables are the Iceberg tables of a server's lake queues.
type Tables struct {
	db        *state.DB
	store     blob.Store
	files     files  // where the tables' files are
	storeID   string // how iceberg-go's s3 IO finds the store (propStore), if it does
	cat       *sqlcat.Catalog
	sqldb     *sql.DB
	warehouse string // URL of the tables' metadata

	mu   sync.Mutex
	seen map[string]state.Queue // each queue as its last sync found it

	keepFor       time.Duration
	keepSnapshots int
	target        int64               // compacted files' size
	sidecars      map[string][]string // compacted file → the block files it holds
	unkeptAfter   time.Duration       // age from which a compacted file no snapshot holds is deleted
	memory        int64               // a compaction's or purge's decoded rows at once
	keys          string              // the directory of the keys a privacy purge may name
	keyCheck      KeyCheck            // whether a table's owners may name a key; nil: any
}

// Open opens (creating if needed) the catalog in dir: dir/catalog.db.
// The tables' metadata and compacted files go where the store keeps the
// lake's files, so that a query engine reaching the store reaches the
// tables: under dir/warehouse beside a directory store, under
// s3://BUCKET/plumb-iceberg/warehouse (blob.TablesPrefix) in an S3
// store's bucket.
func Open(ctx context.Context, dir string, db *state.DB, store blob.Store) (*Tables, error) {
	return open(ctx, dir, "", db, store)
}

// OpenShared is Open with the catalog in the PostgreSQL database at
// catalogURL (postgres://...), beside the metadata that several servers
// share: whichever server holds the Iceberg duty finds the tables whole,
// and query engines read them through a JDBC catalog on that database.
// dir holds only files spooled for a bucket. The tables' metadata is
// shared too only where the store is (S3).
func OpenShared(ctx context.Context, dir, catalogURL string, db *state.DB, store blob.Store) (*Tables, error) {
	return open(ctx, dir, catalogURL, db, store)
}

func open(ctx context.Context, dir, catalogURL string, db *state.DB, store blob.Store) (*Tables, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	where := routedFiles{store: store, tmp: abs}
	var warehouse string
	props := iceberg.Properties{}
	home := store
	if m, ok := store.(*blob.Multi); ok {
		home = m.Primary()
	}
	switch s := home.(type) {
	case *blob.S3:
		warehouse = "s3://" + s.Bucket() + "/" + blob.TablesPrefix + "warehouse"
		props[propStore] = fmt.Sprintf("%s#%p", s, where.store)
		useStore(props[propStore], where)
	case blob.Locator:
		warehouse = (&url.URL{Scheme: "file", Path: filepath.Join(abs, "warehouse")}).String()
		if err := os.MkdirAll(filepath.Join(abs, "warehouse"), 0o750); err != nil {
			return nil, fmt.Errorf("iceberg catalog directory: %w", err)
		}
	default:
		return nil, fmt.Errorf("the blob store %s cannot give query engines its files in place; Iceberg tables need a directory or S3 store", home)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("iceberg catalog directory: %w", err)
	}
	// Files a killed server was spooling for a bucket: never put, never named.
	if stale, err := filepath.Glob(filepath.Join(abs, "plumb-iceberg-*.tmp")); err == nil {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	path := filepath.Join(abs, "catalog.db")
	driver, dsn, dialect := "sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)", sqlcat.SQLite
	if catalogURL != "" {
		// Named without its password in errors.
		driver, dsn, dialect, path = "pgx", catalogURL, sqlcat.Postgres, "in PostgreSQL "+redactURL(catalogURL)
	}
	sqldb, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("iceberg catalog %s: %w", path, err)
	}
	props["warehouse"] = warehouse
	cat, err := sqlcat.NewCatalog(CatalogName, sqldb, dialect, props)
	if err != nil {
		sqldb.Close()
		return nil, fmt.Errorf("iceberg catalog %s: %w", path, err)
	}
	if err := cat.CreateSQLTables(ctx); err != nil {
		sqldb.Close()
		return nil, fmt.Errorf("iceberg catalog %s: %w", path, err)
	}
	if err := cat.CreateNamespace(ctx, table.Identifier{Namespace}, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		sqldb.Close()
		return nil, fmt.Errorf("iceberg catalog %s: namespace %s: %w", path, Namespace, err)
	}
	return &Tables{db: db, store: store, files: where, storeID: props[propStore], cat: cat, sqldb: sqldb, warehouse: warehouse, seen: map[string]state.Queue{},
		keepFor: keepSnapshotsFor, keepSnapshots: keepSnapshots, target: DefaultTarget, sidecars: map[string][]string{}, unkeptAfter: time.Hour, memory: DefaultMemory}, nil
}

// Warehouse is the location of the tables' metadata: a file or s3 URL.
func (t *Tables) Warehouse() string { return t.warehouse }

// Close closes the catalog.
func (t *Tables) Close() error {
	if t.storeID != "" {
		storesMu.Lock()
		delete(stores, t.storeID)
		storesMu.Unlock()
	}
	return t.sqldb.Close()
}

// Synced is what one sync of a table did.
type Synced struct {
	Table          string
	Added, Dropped int
}

// SyncAll syncs the table of every lake queue that changed since its
// last sync.
func (t *Tables) SyncAll(ctx context.Context) ([]Synced, error) {
	qs, err := t.db.Queues()
	if err != nil {
		return nil, err
	}
	var out []Synced
	var errs []error
	for _, q := range qs {
		if !blob.IsLake(q.Name) {
			continue
		}
		t.mu.Lock()
		same := t.seen[q.Name] == q
		t.mu.Unlock()
		if same {
			continue
		}
		res, err := t.Sync(ctx, q.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t.mu.Lock()
		t.seen[q.Name] = q
		t.mu.Unlock()
		if res.Added+res.Dropped > 0 {
			out = append(out, res)
		}
	}
	return out, errors.Join(errs...)
}

// Sync brings the table of a lake queue in step with the blocks the
// queue holds now, creating it from the first file's schema.
func (t *Tables) Sync(ctx context.Context, queue string) (Synced, error) {
	res := Synced{Table: Namespace + "." + TableName(queue)}
	want := map[string]string{} // file → block
	var first string
	for after := uint64(0); ; {
		bs, err := t.db.Blocks(queue, after, 1000)
		if err != nil {
			return res, err
		}
		if len(bs) == 0 {
			break
		}
		for _, b := range bs {
			loc, err := t.store.(blob.Locator).Location(b.Key)
			if err != nil {
				return res, fmt.Errorf("table %s: block %s: %w", res.Table, b.Name, err)
			}
			want[loc] = b.Name
			if first == "" {
				first = loc
			}
			after = b.Serial
		}
	}
	id := table.Identifier{Namespace, TableName(queue)}
	tbl, err := t.cat.LoadTable(ctx, id)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		if first == "" {
			return res, nil // nothing to make it of yet
		}
		if tbl, err = t.create(ctx, id, first); err != nil {
			return res, fmt.Errorf("table %s: %w", res.Table, err)
		}
	} else if err != nil {
		return res, fmt.Errorf("table %s: %w", res.Table, err)
	}
	// The table's block files, and the blocks its compacted files hold.
	have, absorbed := map[string]bool{}, map[string]bool{}
	compacted := t.compactedDir(TableName(queue)) + "/"
	var compactedFiles []string
	if err := eachFile(ctx, tbl, func(f iceberg.DataFile) {
		if strings.HasPrefix(f.FilePath(), compacted) {
			compactedFiles = append(compactedFiles, f.FilePath())
		} else {
			have[f.FilePath()] = true
		}
	}); err != nil {
		return res, fmt.Errorf("table %s: listing its files: %w", res.Table, err)
	}
	for _, c := range compactedFiles {
		srcs, err := t.sources(c)
		if err != nil {
			return res, fmt.Errorf("table %s: %w", res.Table, err)
		}
		for _, s := range srcs {
			absorbed[s] = true
		}
	}
	var add, drop []string
	gone := tbl.Properties()[propDroppedBefore] // days the table's TTL let go
	for f := range want {
		if day, _, ok := fileDay(f); ok && day < gone {
			continue
		}
		if !have[f] && !absorbed[f] {
			add = append(add, f)
		}
	}
	for f := range have {
		if _, ok := want[f]; !ok {
			drop = append(drop, f)
		}
	}
	if len(add)+len(drop) == 0 {
		return res, nil
	}
	props := iceberg.Properties{"plumb.queue": queue, "plumb.blocks-added": strconv.Itoa(len(add)), "plumb.blocks-dropped": strconv.Itoa(len(drop))}
	tx := tbl.NewTransaction()
	if _, ok := tbl.Properties()[table.MetadataDeleteAfterCommitEnabledKey]; !ok {
		// A table made before Plumb set this at creation.
		if err := tx.SetProperties(metadataProps); err != nil {
			return res, fmt.Errorf("table %s: %w", res.Table, err)
		}
	}
	if err := t.widen(ctx, tx, tbl.Schema(), add); err != nil {
		return res, fmt.Errorf("table %s: %w", res.Table, err)
	}
	if len(drop) > 0 {
		err = tx.ReplaceDataFiles(ctx, drop, add, props)
	} else {
		err = tx.AddFiles(ctx, add, props, false) // and refused if one is there: never twice
	}
	if err != nil {
		return res, fmt.Errorf("table %s: %w", res.Table, err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("table %s: commit: %w", res.Table, err)
	}
	res.Added, res.Dropped = len(add), len(drop)
	if len(tbl.Metadata().Snapshots()) > t.keepSnapshots+t.keepSnapshots/2 {
		// A commit a sync adds up: keep what time travel needs.
		if _, err := t.expire(ctx, tbl); err != nil {
			return res, fmt.Errorf("table %s: expiring snapshots: %w", res.Table, err)
		}
	}
	return res, nil
}

// The snapshots a table keeps: those of the last week, and at least the
// last 100; older ones are expired once there are half as many again.
const (
	keepSnapshotsFor = 7 * 24 * time.Hour
	keepSnapshots    = 100
)

// create makes a table of the schema of the Parquet file at loc.
func (t *Tables) create(ctx context.Context, id table.Identifier, loc string) (*table.Table, error) {
	isc, err := t.fileSchema(ctx, loc)
	if err != nil {
		return nil, err
	}
	return t.cat.CreateTable(ctx, id, isc, catalog.WithLocation(t.warehouse+"/"+Namespace+"/"+id[1]), catalog.WithProperties(metadataProps))
}

// metadataProps make each commit delete the table's metadata files
// beyond the last 100: a sync commits every --iceberg-every while blocks
// flow, thousands of commits a day, each writing a metadata file.
var metadataProps = iceberg.Properties{
	table.MetadataDeleteAfterCommitEnabledKey: "true",
	table.MetadataPreviousVersionsMaxKey:      "100",
}

// fileSchema is the schema of the Parquet file at loc, as an Iceberg
// schema (its ids fresh: a table's own are matched by name).
func (t *Tables) fileSchema(ctx context.Context, loc string) (*iceberg.Schema, error) {
	src, err := t.files.open(ctx, loc)
	if err != nil {
		return nil, fmt.Errorf("reading the schema of %s: %w", loc, err)
	}
	f, err := file.NewParquetReader(src)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("reading the schema of %s: %w", loc, err)
	}
	defer f.Close()
	r, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("reading the schema of %s: %w", loc, err)
	}
	sc, err := r.Schema()
	if err != nil {
		return nil, fmt.Errorf("reading the schema of %s: %w", loc, err)
	}
	isc, err := table.ArrowSchemaToIcebergWithFreshIDs(sc, false)
	if err != nil {
		return nil, fmt.Errorf("the schema of %s as an Iceberg table: %w", loc, err)
	}
	return isc, nil
}

// widen adds to the table's schema, in tx, the columns the files at locs
// have and it lacks, as optional columns (the older files lack them): a
// stage whose records gained a column gets it in the table without a
// rewrite, and readers see it from the files that have it. A file's
// footer is read for this; a table's files mostly share one schema, so
// the union is made once per schema met.
func (t *Tables) widen(ctx context.Context, tx *table.Transaction, cur *iceberg.Schema, locs []string) error {
	seen := map[string]bool{}
	for _, loc := range locs {
		fs, err := t.fileSchema(ctx, loc)
		if err != nil {
			return err
		}
		wider := false
		for _, f := range fs.Fields() {
			have, ok := cur.FindFieldByName(f.Name)
			if !ok || have.Required && !f.Required {
				wider = true
				break
			}
		}
		if !wider || seen[fs.String()] {
			continue
		}
		seen[fs.String()] = true
		if err := tx.UpdateSchema(true, false).UnionByNameWith(fs).Commit(); err != nil {
			return fmt.Errorf("adding the columns of %s to the table: %w", loc, err)
		}
	}
	return nil
}

// Sizes is how many data files, rows and bytes of files the table of a
// lake queue reads now, as its metadata says (no file is read); zero
// before the table exists.
func (t *Tables) Sizes(ctx context.Context, queue string) (files int, rows, bytes int64, err error) {
	tbl, err := t.cat.LoadTable(ctx, table.Identifier{Namespace, TableName(queue)})
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return 0, 0, 0, nil
	}
	if err != nil {
		return 0, 0, 0, err
	}
	err = eachFile(ctx, tbl, func(f iceberg.DataFile) {
		files++
		rows += f.Count()
		bytes += f.FileSizeBytes()
	})
	return files, rows, bytes, err
}

// eachFile calls fn with every data file of the table's current snapshot,
// from its manifests: a scan's plan would leave out the files of blocks
// with no rows, which are the table's too.
func eachFile(ctx context.Context, tbl *table.Table, fn func(iceberg.DataFile)) error {
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	manifests, err := snap.Manifests(fs)
	if err != nil {
		return err
	}
	for _, m := range manifests {
		if m.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		entries, err := m.FetchEntries(fs, true)
		if err != nil {
			return err
		}
		for _, e := range entries {
			fn(e.DataFile())
		}
	}
	return nil
}

// redactURL is a database URL without its password.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(an unreadable URL)"
	}
	return u.Redacted()
}

package laketable_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/laketable"
)

// TestCatalogInPostgres: with the catalog in PostgreSQL, as several
// servers sharing their metadata keep it, tables a server synced are
// whole for another server's Tables, with its own directory: the second
// finds the first's files, adds only the new block, and the rows count
// both.
func TestCatalogInPostgres(t *testing.T) {
	ctx := context.Background()
	url := testenv.StartPostgres(t)
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	dir, db, store, putAt := lake(t, &now)
	put := func(seq uint64) { putAt(seq, "lax", time.Date(2016, 5, 18, 0, 0, int(seq), 0, time.UTC)) }
	first, err := laketable.OpenShared(ctx, filepath.Join(dir, "a"), url, db, store)
	if err != nil {
		t.Fatal(err)
	}
	put(1)
	put(2)
	if res, err := first.SyncAll(ctx); err != nil || len(res) != 1 || res[0].Added != 2 {
		t.Fatalf("first server's sync: %+v %v", res, err)
	}
	first.Close()

	second, err := laketable.OpenShared(ctx, filepath.Join(dir, "b"), url, db, store)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	put(3)
	if res, err := second.SyncAll(ctx); err != nil || len(res) != 1 || res[0].Added != 1 || res[0].Dropped != 0 {
		t.Fatalf("second server's sync: %+v %v; want the one new block added", res, err)
	}
	if n := rows(t, second, "dns.parquet"); n != 3*85 {
		t.Fatalf("%d rows; three blocks of 85", n)
	}
	if _, err := laketable.OpenShared(ctx, filepath.Join(dir, "c"), "postgres://plumb:s3cret@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", db, store); err == nil {
		t.Fatal("a catalog on an unreachable database opened")
	} else if got := err.Error(); !containsAll(got, "iceberg catalog in PostgreSQL", "127.0.0.1:1") || containsAll(got, "s3cret") {
		t.Fatalf("error %q: want it to name the database without its password", got)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

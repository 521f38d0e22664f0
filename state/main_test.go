package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/metakv"
)

// pgURL is the PostgreSQL server the tests run on, when
// PLUMB_TEST_META=postgres (make test runs them both ways): each test
// gets a database of its own.
var pgURL string

func TestMain(m *testing.M) {
	if os.Getenv("PLUMB_TEST_META") != "postgres" {
		os.Exit(m.Run())
	}
	url, stop, err := testenv.PostgresServer()
	if errors.Is(err, testenv.ErrNoPostgres) && !testenv.InCI() {
		fmt.Fprintln(os.Stderr, "state tests on PostgreSQL skipped:", err)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "state tests on PostgreSQL:", err)
		os.Exit(1)
	}
	pgURL = url
	code := m.Run()
	stop()
	os.Exit(code)
}

var databases atomic.Int64

// openKV returns a fresh store: a PostgreSQL database when the tests run
// on PostgreSQL, else nil (a bbolt file).
func openKV(t *testing.T) metakv.DB {
	t.Helper()
	if pgURL == "" {
		return nil
	}
	ctx := context.Background()
	name := fmt.Sprintf("t%d", databases.Add(1))
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	kv, err := metakv.OpenPostgres(ctx, strings.Replace(pgURL, "/postgres?", "/"+name+"?", 1))
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// onBolt skips a test of what only a bbolt file has.
func onBolt(t *testing.T) {
	if pgURL != "" {
		t.Skip("the metadata is in PostgreSQL: no bbolt file")
	}
}

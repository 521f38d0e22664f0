package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	kv, err := metakv.OpenPostgres(context.Background(), newDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// newDatabase makes a database and returns its URL.
func newDatabase(t *testing.T) string {
	t.Helper()
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
	return strings.Replace(pgURL, "/postgres?", "/"+name+"?", 1)
}

// onBolt skips a test of what only a bbolt file has.
func onBolt(t *testing.T) {
	if pgURL != "" {
		t.Skip("the metadata is in PostgreSQL: no bbolt file")
	}
}

// TestChangedAcrossServers: a reader waiting on one server's metadata is
// woken by a block committed through another's, on one PostgreSQL
// database (LISTEN/NOTIFY).
func TestChangedAcrossServers(t *testing.T) {
	if pgURL == "" {
		t.Skip("one bbolt file has one server: run with PLUMB_TEST_META=postgres (make test does)")
	}
	ctx := context.Background()
	url := newDatabase(t)
	var dbs [2]*DB
	for i := range dbs {
		kv, err := metakv.OpenPostgres(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if dbs[i], err = OpenKV(ctx, kv, Options{}); err != nil {
			t.Fatal(err)
		}
		defer dbs[i].Close()
	}
	// The listener may not be listening yet: commit until the waiter on
	// the other server is woken, a block each half second.
	changed := dbs[1].Changed("pcap.sz")
	other := dbs[1].Changed("dns.arrow")
	for seq := uint64(1); ; seq++ {
		if _, _, err := dbs[0].CommitBlock(mk(seq, "aa")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
			select {
			case <-other:
				t.Fatal("a reader of another queue was woken too")
			default:
			}
			return
		case <-time.After(500 * time.Millisecond):
			if seq == 20 {
				t.Fatal("a reader on the other server was not woken in 10 s")
			}
		}
	}
}

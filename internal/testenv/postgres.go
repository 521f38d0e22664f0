package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// StartPostgres starts a PostgreSQL server (Debian's, from
// /usr/lib/postgresql/VERSION/bin) in a fresh data directory on a free
// loopback port, waits until it takes connections, stops it when the test
// ends, and returns its URL: user plumb, no password, database postgres.
func StartPostgres(t testing.TB) string {
	t.Helper()
	url, stop, err := PostgresServer()
	if errors.Is(err, ErrNoPostgres) {
		Missing(t, err.Error())
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// ErrNoPostgres is PostgresServer's error when PostgreSQL is not
// installed.
var ErrNoPostgres = errors.New("PostgreSQL is not installed (.ci/run installs Debian's postgresql)")

// PostgresServer starts a server as StartPostgres does, for a TestMain
// that shares one among its tests; stop stops it and removes its data.
// PostgreSQL refuses to run as root, so as root it runs as the postgres
// user the Debian package makes.
func PostgresServer() (url string, stop func(), err error) {
	pg, err := startPostgres()
	if err != nil {
		return "", nil, err
	}
	return pg.URL, pg.stop, nil
}

// Postgres is a PostgreSQL server a test started.
type Postgres struct {
	URL     string
	stop    func()
	restart func() error
}

// Restart stops the server (a fast shutdown: every connection is cut)
// and starts it again on the same port with the same data.
func (p *Postgres) Restart() error { return p.restart() }

// StartPostgresServer is StartPostgres for a test that restarts the
// server.
func StartPostgresServer(t testing.TB) *Postgres {
	t.Helper()
	pg, err := startPostgres()
	if errors.Is(err, ErrNoPostgres) {
		Missing(t, err.Error())
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.stop)
	return pg
}

func startPostgres() (*Postgres, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		return nil, ErrNoPostgres
	}
	bin := filepath.Dir(bins[len(bins)-1])
	// Not a test's TempDir: its parents are root's alone, and the server
	// may run as postgres.
	dir, err := os.MkdirTemp("", "plumb-pg-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Postgres, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	var prefix []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("running as root, PostgreSQL needs the postgres user (Debian's postgresql package makes it): %w", err))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(err)
		}
		prefix = []string{"runuser", "-u", "postgres", "--"}
	}
	command := func(name string, args ...string) *exec.Cmd {
		argv := append(append(slices.Clone(prefix), filepath.Join(bin, name)), args...)
		return exec.Command(argv[0], argv[1:]...)
	}
	data := filepath.Join(dir, "data")
	if out, err := command("initdb", "-D", data, "-U", "plumb", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	logPath := filepath.Join(dir, "postgres.log")
	log, err := os.Create(logPath)
	if err != nil {
		return fail(err)
	}
	var cmd *exec.Cmd
	start := func() error {
		cmd = command("postgres", "-D", data, "-p", port, "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start postgres: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for {
			out, err := exec.CommandContext(ctx, filepath.Join(bin, "pg_isready"), "-h", "127.0.0.1", "-p", port).CombinedOutput()
			if err == nil {
				return nil
			}
			select {
			case <-ctx.Done():
				l, _ := os.ReadFile(logPath)
				return fmt.Errorf("postgres on port %s did not take connections in 60s: %s\n%s", port, out, l)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	halt := func() {
		cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	pg := &Postgres{URL: fmt.Sprintf("postgres://plumb@127.0.0.1:%s/postgres?sslmode=disable", port)}
	pg.stop = func() {
		halt()
		log.Close()
		os.RemoveAll(dir)
	}
	pg.restart = func() error {
		halt()
		return start()
	}
	if err := start(); err != nil {
		pg.stop()
		return nil, err
	}
	return pg, nil
}

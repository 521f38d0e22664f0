package testenv

import (
	"context"
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
// PostgreSQL refuses to run as root, so as root it runs as the postgres
// user the Debian package makes.
func StartPostgres(t testing.TB) string {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		Missing(t, "PostgreSQL is not installed (.ci/run installs Debian's postgresql)")
		return ""
	}
	bin := filepath.Dir(bins[len(bins)-1])
	// Not t.TempDir: its parents are root's alone, and the server may
	// run as postgres.
	dir, err := os.MkdirTemp("", "plumb-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var prefix []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs the postgres user (Debian's postgresql package makes it): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		prefix = []string{"runuser", "-u", "postgres", "--"}
	}
	command := func(name string, args ...string) *exec.Cmd {
		argv := append(append(slices.Clone(prefix), filepath.Join(bin, name)), args...)
		return exec.Command(argv[0], argv[1:]...)
	}
	data := filepath.Join(dir, "data")
	if out, err := command("initdb", "-D", data, "-U", "plumb", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	log, err := os.Create(filepath.Join(t.TempDir(), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := command("postgres", "-D", data, "-p", port, "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "pg_isready"), "-h", "127.0.0.1", "-p", port).CombinedOutput()
		if err == nil {
			return fmt.Sprintf("postgres://plumb@127.0.0.1:%s/postgres?sslmode=disable", port)
		}
		select {
		case <-ctx.Done():
			l, _ := os.ReadFile(log.Name())
			t.Fatalf("postgres on port %s did not take connections in 60s: %s\n%s", port, out, l)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

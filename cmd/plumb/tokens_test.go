package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/server"
)

// TestLoginGoodOnEveryServer is issue 61's second server: a login token
// worked only on the server that issued it, so with that server killed,
// `plumb import` with a user and secret got UNAUTHENTICATED from the
// other and left its blocks in the spool. Servers sharing the metadata
// now sign with one key kept there: a token from one is good on the
// other, also once the first is gone; a server on other metadata still
// refuses it.
func TestLoginGoodOnEveryServer(t *testing.T) {
	pg := testenv.StartPostgresServer(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users.yaml")
	secret, errOut, code := plumbExec(t, "user", "add", "ana", "--group", "analysts", "--users", users)
	if code != 0 {
		t.Fatalf("user add: %s", errOut)
	}
	secret = strings.TrimSpace(secret)
	testenv.EditUsers(t, users, func(f *auth.File) {
		f.Rules = []auth.Rule{{Queues: "*", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read, auth.Write}}}
	})
	store := "file://" + filepath.Join(dir, "blobs")
	var addrs []string
	var procs []*plumbProc
	for i := range 2 {
		addr := testenv.FreeAddr(t)
		procs = append(procs, startPlumb(t, "serve", "--data", filepath.Join(dir, "server"+string(rune('a'+i))), "--listen", addr,
			"--meta", pg.URL, "--store", store, "--users", users, "--log-level", "warn"))
		waitListening(t, addr)
		addrs = append(addrs, addr)
	}
	ctx := context.Background()
	a, err := client.Dial(addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tok, err := a.Login(ctx, "ana", secret)
	if err != nil {
		t.Fatalf("login on the first server: %v", err)
	}
	tokFile := filepath.Join(dir, "token")
	os.WriteFile(tokFile, []byte(tok), 0o600)
	onB := func() error {
		b, err := client.DialSecure(addrs[1], client.Security{TokenFile: tokFile})
		if err != nil {
			return err
		}
		defer b.Close()
		_, err = b.Blocks(ctx, "pcap")
		if status.Code(err) == codes.NotFound {
			err = nil
		}
		return err
	}
	if err := onB(); err != nil {
		t.Fatalf("the first server's token on the second: %v", err)
	}
	procs[0].cmd.Process.Kill()
	procs[0].cmd.Wait()
	if err := onB(); err != nil {
		t.Fatalf("the first server's token on the second, the first killed: %v\n%s", err, procs[1].log)
	}
	// A server on other metadata signs with a key of its own.
	other := testenv.FreeAddr(t)
	startPlumb(t, "serve", "--data", filepath.Join(dir, "other"), "--listen", other, "--users", users, "--log-level", "warn")
	waitListening(t, other)
	o, err := client.DialSecure(other, client.Security{TokenFile: tokFile})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Blocks(ctx, "pcap"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the token on a server of other metadata: %v; want Unauthenticated", err)
	}
}

// TestTokenKeyRotation: `plumb rotate-token-key` on one server reaches
// every server sharing the metadata. With --keep, tokens signed before
// stay good on both and new ones are signed with the new key; without
// it, every token signed before is refused on both and a new login
// works on both. A non-admin may not rotate.
func TestTokenKeyRotation(t *testing.T) {
	pg := testenv.StartPostgresServer(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users.yaml")
	secrets := map[string]string{}
	for _, u := range []string{"ana", "root"} {
		out, errOut, code := plumbExec(t, "user", "add", u, "--group", u+"s", "--users", users)
		if code != 0 {
			t.Fatalf("user add %s: %s", u, errOut)
		}
		secrets[u] = strings.TrimSpace(out)
	}
	testenv.EditUsers(t, users, func(f *auth.File) {
		f.Rules = []auth.Rule{{Queues: "*", Groups: []string{"anas"}, Allow: []auth.Perm{auth.Read}},
			{Queues: "*", Groups: []string{"roots"}, Allow: []auth.Perm{auth.Admin}}}
	})
	store := "file://" + filepath.Join(dir, "blobs")
	var addrs []string
	for i := range 2 {
		addr := testenv.FreeAddr(t)
		startPlumb(t, "serve", "--data", filepath.Join(dir, "server"+string(rune('a'+i))), "--listen", addr,
			"--meta", pg.URL, "--store", store, "--users", users, "--log-level", "warn")
		waitListening(t, addr)
		addrs = append(addrs, addr)
	}
	ctx := context.Background()
	login := func(addr, user string) string {
		t.Helper()
		c, err := client.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		tok, err := c.Login(ctx, user, secrets[user])
		if err != nil {
			t.Fatalf("login of %s on %s: %v", user, addr, err)
		}
		return tok
	}
	// good says whether the token is accepted on the server at addr.
	good := func(addr, tok string) bool {
		f := filepath.Join(t.TempDir(), "token")
		os.WriteFile(f, []byte(tok), 0o600)
		c, err := client.DialSecure(addr, client.Security{TokenFile: f})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Blocks(ctx, "pcap")
		return status.Code(err) != codes.Unauthenticated
	}
	// within waits for every server to agree, at most a few of their
	// rereads of the keys.
	within := func(what string, tok string, want bool) {
		t.Helper()
		for deadline := time.Now().Add(6 * server.TokenKeysEvery); ; time.Sleep(100 * time.Millisecond) {
			if good(addrs[0], tok) == want && good(addrs[1], tok) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the token is not %v on both servers after %v", what, map[bool]string{true: "accepted", false: "refused"}[want], 6*server.TokenKeysEvery)
			}
		}
	}
	rotate := func(addr, user string, args ...string) (string, int) {
		f := filepath.Join(t.TempDir(), "token")
		os.WriteFile(f, []byte(login(addr, user)), 0o600)
		_, errOut, code := plumbExec(t, append([]string{"rotate-token-key", "--server", addr, "--token-file", f}, args...)...)
		return errOut, code
	}

	old := login(addrs[0], "ana")
	within("before any rotation", old, true)
	if errOut, code := rotate(addrs[1], "ana"); code == 0 || !strings.Contains(errOut, "PermissionDenied") && !strings.Contains(strings.ToLower(errOut), "permission") {
		t.Fatalf("ana rotated the key: exit %d: %s", code, errOut)
	}
	if errOut, code := rotate(addrs[1], "root", "--keep"); code != 0 {
		t.Fatalf("rotate-token-key --keep: exit %d: %s", code, errOut)
	}
	kept := login(addrs[0], "ana")
	within("a token signed before a rotation with --keep", old, true)
	within("a token signed after a rotation with --keep", kept, true)
	if errOut, code := rotate(addrs[0], "root"); code != 0 || !strings.Contains(errOut, "refused") {
		t.Fatalf("rotate-token-key: exit %d: %s", code, errOut)
	}
	within("a token signed before a rotation without --keep", old, false)
	within("a token signed before the last rotation", kept, false)
	within("a token signed after the last rotation", login(addrs[1], "ana"), true)
}

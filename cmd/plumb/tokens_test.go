package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
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

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestUsersLoginAndDefaults: users made with `plumb user`, a server with
// --users, the CLI logging in with PLUMB_USER/PLUMB_SECRET or an API key
// file, and the refusal to serve a non-loopback address without auth.
func TestUsersLoginAndDefaults(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users.yaml")
	anaSecret, errOut, code := plumbExec(t, "user", "add", "ana", "--group", "analysts", "--users", users)
	if code != 0 || !strings.Contains(errOut, "shown only now") {
		t.Fatalf("user add: %d %s", code, errOut)
	}
	plumbExec(t, "user", "add", "lax-agent", "--group", "capture", "--users", users)
	key, _, code := plumbExec(t, "user", "key", "lax-agent", "--users", users)
	if code != 0 || !strings.HasPrefix(key, "pk.") {
		t.Fatalf("user key: %d %q", code, key)
	}
	if _, errOut, code := plumbExec(t, "user", "add", "bob", "--users", users); code == 0 || !strings.Contains(errOut, "--group") {
		t.Errorf("a user without a group: %d %s", code, errOut)
	}
	if out, _, _ := plumbExec(t, "user", "list", "--users", users); !strings.Contains(out, "ana\tgroups: analysts\tkeys: 0") ||
		!strings.Contains(out, "lax-agent\tgroups: capture\tkeys: 1") {
		t.Errorf("user list:\n%s", out)
	}
	f, err := auth.Load(users)
	if err != nil {
		t.Fatal(err)
	}
	f.Rules = []auth.Rule{
		{Queues: "pcap.sz", Groups: []string{"capture"}, Allow: []auth.Perm{auth.Write}},
		{Queues: "pcap.sz", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read}},
	}
	f.Save(users)

	addr := testenv.FreeAddr(t)
	startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr, "--users", users, "--log-level", "warn")
	waitListening(t, addr)
	if _, errOut, code := plumbExec(t, "queues", "--server", addr); code == 0 || !strings.Contains(errOut, "unauthenticated: no credentials") {
		t.Errorf("queues without a login: %d %s", code, errOut)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(key), 0o600)
	capture := filepath.Join(t.TempDir(), "20250505-151105-00000001.lax.pcap.sz")
	os.WriteFile(capture, []byte("not really snappy"), 0o644)
	if out, errOut, code := plumbExec(t, "put", "--server", addr, "--token-file", keyFile, capture); code != 0 {
		t.Fatalf("put with the agent's key: %d %s %s", code, out, errOut)
	}
	// The agent's path: an import with the API key, asking last-seq first.
	pcaps, _ := filepath.Glob("../../testdata/pcaps/*.pcap")
	if out, errOut, code := plumbExec(t, "import", "--quiet", "--server", addr, "--token-file", keyFile, "--site", "lax",
		"--spool", filepath.Join(t.TempDir(), "spool"), "--block-size", "64KiB", pcaps[0]); code != 0 {
		t.Fatalf("import with the agent's key: %d %s %s", code, out, errOut)
	}
	t.Setenv("PLUMB_USER", "ana")
	t.Setenv("PLUMB_SECRET", strings.TrimSpace(anaSecret))
	if out, errOut, code := plumbExec(t, "queues", "--server", addr); code != 0 || !strings.Contains(out, "pcap.sz") {
		t.Errorf("queues as ana: %d %s %s", code, out, errOut)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	if _, errOut, code := plumbExec(t, "login", "--server", addr, "-o", tokFile); code != 0 {
		t.Fatalf("login: %d %s", code, errOut)
	}
	t.Setenv("PLUMB_USER", "")
	if out, errOut, code := plumbExec(t, "blocks", "pcap.sz", "--server", addr, "--token-file", tokFile); code != 0 || !strings.Contains(out, "00000001.lax.pcap.sz") {
		t.Errorf("blocks with ana's token: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := plumbExec(t, "put", "--server", addr, "--token-file", tokFile, capture); code == 0 || !strings.Contains(errOut, "no write permission on queue pcap.sz") {
		t.Errorf("ana uploads: %d %s", code, errOut)
	}

	// No users file: loopback only.
	_, errOut, code = plumbExec(t, "serve", "--data", t.TempDir(), "--listen", "0.0.0.0:0")
	if code == 0 || !strings.Contains(errOut, "refusing to serve on 0.0.0.0:0") || !strings.Contains(errOut, "plumb user add") {
		t.Errorf("serve on 0.0.0.0 without --users: exit %d\n%s", code, errOut)
	}
}

// addUsers adds users, each with one group ({name, group} pairs), to a
// users file with `plumb user add`, and returns their secrets by name.
func addUsers(t *testing.T, users string, pairs [][2]string) map[string]string {
	t.Helper()
	secret := map[string]string{}
	for _, u := range pairs {
		out, errOut, code := plumbExec(t, "user", "add", u[0], "--group", u[1], "--users", users)
		if code != 0 {
			t.Fatalf("user add %s: %s", u[0], errOut)
		}
		secret[u[0]] = strings.TrimSpace(out)
	}
	return secret
}

package auth

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// setup writes a users file with an analyst, an agent with a key, and an
// operator, and rules as the README shows them.
func setup(t *testing.T) (*Authority, *clock, string, map[string]string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "users.yaml")
	f, err := LoadOrNew(file)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{}
	for name, groups := range map[string][]string{"ana": {"analysts"}, "lax-agent": {"capture"}, "ops": {"operators"}} {
		if secrets[name], err = f.AddUser(name, groups); err != nil {
			t.Fatal(err)
		}
	}
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if secrets["key"], err = f.AddKey("lax-agent", c.t); err != nil {
		t.Fatal(err)
	}
	f.Rules = []Rule{
		{Queues: "pcap.sz", Groups: []string{"capture"}, Allow: []Perm{Write}},
		{Queues: "dns.*", Groups: []string{"analysts"}, Allow: []Perm{Read}},
		{Queues: "*", Groups: []string{"operators"}, Allow: []Perm{Admin}},
	}
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	a, err := NewAuthority(file, []byte(strings.Repeat("k", 32)), time.Hour, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return a, c, file, secrets
}

func TestLoginTokensKeysAndRules(t *testing.T) {
	a, c, file, secrets := setup(t)
	raw, _ := os.ReadFile(file)
	for _, s := range secrets {
		if strings.Contains(string(raw), s) || strings.Contains(string(raw), strings.TrimPrefix(s, "pk.")) {
			t.Fatal("the users file holds a secret in clear")
		}
	}

	tok, id, err := a.Login("ana", secrets["ana"])
	if err != nil || id.User != "ana" || id.Via != "password" {
		t.Fatalf("login = %v, %+v", err, id)
	}
	if _, _, err := a.Login("ana", secrets["ops"]); !errors.Is(err, ErrDenied) {
		t.Fatalf("wrong secret: %v", err)
	}
	if _, _, err := a.Login("nobody", "x"); !errors.Is(err, ErrDenied) {
		t.Fatalf("unknown user: %v", err)
	}
	if id, err := a.Verify(tok); err != nil || id.User != "ana" || id.Groups[0] != "analysts" {
		t.Fatalf("verify token = %+v, %v", id, err)
	}
	// A token changed by one character, or another server's, fails.
	forged := []byte(tok)
	forged[3] ^= 1
	if _, err := a.Verify(string(forged)); !errors.Is(err, ErrDenied) {
		t.Fatalf("forged token: %v", err)
	}
	// One spelling per token: the decoder's tolerance of line breaks and
	// padding is not a second way in.
	for _, bad := range []string{tok[:10] + "\r" + tok[10:], tok[:10] + "\n" + tok[10:], tok + "=", " " + tok} {
		if _, err := a.Verify(bad); !errors.Is(err, ErrDenied) {
			t.Errorf("Verify(%q) = %v; want denied", bad, err)
		}
	}
	other, _ := NewAuthority(file, []byte(strings.Repeat("x", 32)), time.Hour, c.now)
	if _, err := other.Verify(tok); !errors.Is(err, ErrDenied) {
		t.Fatalf("token of another key: %v", err)
	}
	if id, err := a.Verify(secrets["key"]); err != nil || id.User != "lax-agent" || id.Via != "key" {
		t.Fatalf("API key = %+v, %v", id, err)
	}
	if _, err := a.Verify(secrets["key"] + "x"); !errors.Is(err, ErrDenied) {
		t.Fatalf("wrong API key: %v", err)
	}
	c.t = c.t.Add(time.Hour)
	if _, err := a.Verify(tok); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: %v", err)
	}

	for _, tc := range []struct {
		user  string
		perm  Perm
		queue string
		want  bool
	}{
		{"ana", Read, "dns.arrow", true},
		{"ana", Read, "pcap.sz", false},
		{"ana", Write, "dns.arrow", false},
		{"ana", Admin, "", false},
		{"lax-agent", Write, "pcap.sz", true},
		{"lax-agent", Read, "pcap.sz", false},
		{"lax-agent", Write, "pcap.sz2", false},
		{"ops", Read, "pcap.sz", true}, // admin implies read
		{"ops", Admin, "", true},
	} {
		id, _ := a.Identify(tc.user, "test")
		if got := a.Allowed(id, tc.perm, tc.queue); got != tc.want {
			t.Errorf("%s %s %q = %v, want %v", tc.user, tc.perm, tc.queue, got, tc.want)
		}
	}

	// A reload removes a user: its tokens and keys stop working.
	f, _ := Load(file)
	delete(f.Users, "lax-agent")
	f.Save(file)
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Verify(secrets["key"]); !errors.Is(err, ErrDenied) {
		t.Fatalf("removed user's key: %v", err)
	}
}

func TestLoadRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		body string
		mode os.FileMode
		want string
	}{
		"world-readable": {"users: {}\n", 0o644, "chmod 600"},
		"clear secret":   {"users:\n  bob: {secret: hunter2, groups: [a]}\n", 0o600, "not a bcrypt hash"},
		"bad perm":       {"rules:\n  - {queues: '*', groups: [a], allow: [delete]}\n", 0o600, "want read, write or admin"},
		"bad pattern":    {"rules:\n  - {queues: '[', groups: [a], allow: [read]}\n", 0o600, "not a valid pattern"},
		"unknown field":  {"users: {}\nrulez: []\n", 0o600, "rulez"},
		"bad user name":  {"users:\n  '../x': {secret: x}\n", 0o600, "user name"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(p, []byte(tc.body), tc.mode)
		os.Chmod(p, tc.mode)
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", name, err, tc.want)
		}
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	if f, err := Load(empty); err != nil || len(f.Users) != 0 {
		t.Errorf("an empty file: %v", err)
	}
}

// FuzzVerify: no credential the fuzzer makes up is accepted, and none
// makes Verify panic.
func FuzzVerify(f *testing.F) {
	file := filepath.Join(f.TempDir(), "users.yaml")
	uf, _ := LoadOrNew(file)
	uf.AddUser("ana", []string{"analysts"})
	key, _ := uf.AddKey("ana", time.Now())
	uf.Save(file)
	// A fixed clock: the fuzzer's worker processes each run this setup,
	// and with the real one a worker a second later mints another valid
	// token than the seed's, which it would take for made up.
	fixed := func() time.Time { return time.Unix(1_900_000_000, 0) }
	a, err := NewAuthority(file, []byte(strings.Repeat("k", 32)), time.Hour, fixed)
	if err != nil {
		f.Fatal(err)
	}
	ana, _ := a.identity("ana", "")
	tok := a.token("ana", ana.Stamp)
	f.Add(tok)
	f.Add(key)
	f.Add("pk..")
	f.Add(".")
	f.Fuzz(func(t *testing.T, cred string) {
		id, err := a.Verify(cred)
		if err == nil && cred != tok && cred != key {
			t.Fatalf("made-up credential %q accepted as %+v", cred, id)
		}
	})
}

// FuzzAllowed: a queue name never gets a permission no rule pattern
// matches, whatever it holds ("..", "/", "%2e").
func FuzzAllowed(f *testing.F) {
	file := filepath.Join(f.TempDir(), "users.yaml")
	uf, _ := LoadOrNew(file)
	uf.AddUser("ana", []string{"analysts"})
	uf.Rules = []Rule{{Queues: "dns.*", Groups: []string{"analysts"}, Allow: []Perm{Read}}}
	uf.Save(file)
	a, _ := NewAuthority(file, []byte(strings.Repeat("k", 32)), time.Hour, nil)
	id, _ := a.Identify("ana", "test")
	for _, s := range []string{"dns.arrow", "dns.", "dns./../pcap.sz", "pcap.sz", "dns.%2e%2e", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, queue string) {
		got := a.Allowed(id, Read, queue)
		want := strings.HasPrefix(queue, "dns.") && !strings.Contains(queue, "/")
		if got != want {
			t.Fatalf("Allowed(read %q) = %v, want %v", queue, got, want)
		}
		if a.Allowed(id, Write, queue) || a.Allowed(id, Admin, queue) {
			t.Fatalf("read-only user may write or administer %q", queue)
		}
	})
}

// TestKeyTimesFromOtherTools: a users file rewritten by PyYAML (which
// writes times as "2026-12-01 07:12:06+00:00") still loads, with the same
// key times.
func TestKeyTimesFromOtherTools(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.yaml")
	f, _ := LoadOrNew(file)
	f.AddUser("agent", []string{"capture"})
	created := time.Date(2026, 12, 1, 7, 12, 6, 0, time.UTC)
	if _, err := f.AddKey("agent", created); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(file)
	for _, form := range []string{"2026-12-01 07:12:06+00:00", "2026-12-01 07:12:06 +00:00", "2026-12-01 07:12:06"} {
		edited := strings.Replace(string(raw), "2026-12-01T07:12:06Z", form, 1)
		if edited == string(raw) {
			t.Fatalf("no RFC 3339 time in the saved file:\n%s", raw)
		}
		os.WriteFile(file, []byte(edited), 0o600)
		g, err := Load(file)
		if err != nil {
			t.Fatalf("%s: %v", form, err)
		}
		if got := g.Users["agent"].Keys[0].Created; !got.Equal(created) {
			t.Errorf("%s: created %v, want %v", form, got, created)
		}
	}
	os.WriteFile(file, []byte(strings.Replace(string(raw), "2026-12-01T07:12:06Z", "yesterday", 1)), 0o600)
	if _, err := Load(file); err == nil || !strings.Contains(err.Error(), `created "yesterday" is not a time`) {
		t.Errorf("a bad time: %v", err)
	}
}

// TestSaveKeepsTheFilesOwner: root adding a user to the users file that
// the server's own user reads made the file root's, mode 600, and the
// server could no longer read it.
func TestSaveKeepsTheFilesOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	file := filepath.Join(t.TempDir(), "users.yaml")
	f, _ := LoadOrNew(file)
	if _, err := f.AddUser("ana", []string{"analysts"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(file, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := f.AddUser("bob", []string{"analysts"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after a save by root: owner %d:%d mode %v; want 65534:65534 600", st.Uid, st.Gid, fi.Mode().Perm())
	}
}

// TestBrokenUsersFileIsReported is issue 62's silent users file: one
// changed on disk that does not load was ignored without a word until
// SIGHUP (and parsed again at every call). Now the users before stay in
// force, the log says once why the new file does not load, and a fixed
// file is taken at the next call.
func TestBrokenUsersFileIsReported(t *testing.T) {
	a, _, file, secrets := setup(t)
	var logs bytes.Buffer
	a.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	fixed, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	delete(fixed.Users, "ops") // the fix also removes a user
	good, _ := os.ReadFile(file)
	if err := os.WriteFile(file, append(good, "\nrules: [oops\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, _, err := a.Login("ops", secrets["ops"]); err != nil {
			t.Fatalf("with a broken users file, the users before stay in force: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "does not load"); n != 1 || !strings.Contains(logs.String(), file) {
		t.Errorf("the log says %d times that the users file does not load, want once naming it:\n%s", n, logs.String())
	}
	if err := fixed.Save(file); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	os.Chtimes(file, later, later) // a new version, whatever the clock's grain
	if _, _, err := a.Login("ops", secrets["ops"]); err == nil {
		t.Error("the fixed file removes ops, who still logs in: it was not taken")
	}
	if _, _, err := a.Login("ana", secrets["ana"]); err != nil {
		t.Errorf("after the fix: %v", err)
	}
}

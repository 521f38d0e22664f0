// Package auth holds who may do what on a Plumb server: users and their
// groups from a users file (secrets kept only as hashes), the bearer
// tokens a login returns, the API keys agents use, and the rules that give
// groups read, write or admin on queues by name pattern. It knows nothing
// of Flight or HTTP; the servers call it.
package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"
)

// Perm is what a rule allows on a queue.
type Perm string

// The permissions. Read covers blocks, records, windows, streams and the
// queue's listing; write is uploading blocks to a queue (agents) and
// producing it from a job; admin is retrying faulty blocks, firing
// windows, and (on every queue, "*") managing jobs of others.
const (
	Read  Perm = "read"
	Write Perm = "write"
	Admin Perm = "admin"
)

// Identity is an authenticated caller.
type Identity struct {
	User string `json:"user"`
	// ID is the user's stable id from the users file ("" in a file
	// written before ids): what owners are recorded by, since a name
	// removed and added again is another user.
	ID     string   `json:"-"`
	Groups []string `json:"groups"`
	// Via says how the caller proved it: password, token, key or cert.
	Via string `json:"via"`
	// Sites, for a call made with an API key bound to sites, are the
	// only sites (QUEUE/INSTANCE patterns) it may put blocks into.
	Sites []string `json:"sites,omitempty"`
	// Stamp is the user's id and credential generation: it changes when
	// the user is removed and added again, revoked, or given a new
	// secret, so anything cached on a login can tell it is stale.
	Stamp string `json:"-"`
}

// Rule gives groups permissions on the queues whose names match a
// pattern (path.Match syntax: "*", "dns.*", "pcap.?z").
type Rule struct {
	Queues string   `yaml:"queues"`
	Groups []string `yaml:"groups"`
	Allow  []Perm   `yaml:"allow"`
}

// User is one entry of the users file.
type User struct {
	// ID tells this user from an earlier one of the same name: a user
	// removed and added again does not inherit its tokens.
	ID string `yaml:"id,omitempty"`
	// Generation counts revocations: a new secret, `plumb user revoke`.
	// Tokens carry it, and one of an older generation is refused.
	Generation uint64 `yaml:"generation,omitempty"`
	// Secret is the bcrypt hash of the user's secret.
	Secret string   `yaml:"secret"`
	Groups []string `yaml:"groups"`
	// Keys are long-lived API keys, for agents: an ID and the SHA-256 of
	// the key (the keys are random, so a fast hash is enough).
	Keys []Key `yaml:"keys,omitempty"`
}

// Key is an API key as the users file keeps it.
type Key struct {
	ID      string    `yaml:"id"`
	SHA256  string    `yaml:"sha256"`
	Created time.Time `yaml:"created"`
	// Sites, when set, are the only sites (QUEUE/INSTANCE, path.Match
	// patterns) a call made with the key may put blocks into: a stolen
	// agent key writes its own site's blocks, not every site of the queues
	// its user may write.
	Sites []string `yaml:"sites,omitempty"`
}

// UnmarshalYAML reads a key, taking its created time in the forms YAML
// tools write besides RFC 3339: PyYAML, for one, writes a time it read
// back as "2026-12-01 07:12:06+00:00", which yaml.v3 will not parse, and
// an operator who edits the rules with such a tool must not lock every
// user out.
func (k *Key) UnmarshalYAML(n *yaml.Node) error {
	var raw struct {
		ID      string    `yaml:"id"`
		SHA256  string    `yaml:"sha256"`
		Created yaml.Node `yaml:"created"`
		Sites   []string  `yaml:"sites"`
	}
	if err := n.Decode(&raw); err != nil {
		return err
	}
	k.ID, k.SHA256, k.Sites = raw.ID, raw.SHA256, raw.Sites
	if raw.Created.Kind == 0 {
		return nil
	}
	if raw.Created.Decode(&k.Created) == nil {
		return nil
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999 Z07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, raw.Created.Value); err == nil {
			k.Created = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("line %d: key %s: created %q is not a time (want RFC 3339, such as 2026-12-01T07:12:06Z)", raw.Created.Line, raw.ID, raw.Created.Value)
}

// File is the users file.
type File struct {
	Users map[string]*User `yaml:"users"`
	Rules []Rule           `yaml:"rules"`
	// AnonKeys grants anonymization keys (builtin:anonymize?key=NAME) to
	// groups. A job may name a key only when its owner is in a group
	// granted it, or is an admin on "*": anyone else could run a key over
	// captures of their own choosing, an oracle for its mapping.
	AnonKeys []KeyGrant `yaml:"anon_keys,omitempty"`
}

// KeyGrant lets groups' jobs use the anonymization keys whose names match
// a pattern (path.Match, as a rule's queues).
type KeyGrant struct {
	Keys   string   `yaml:"keys"`
	Groups []string `yaml:"groups"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ValidName checks a user or group name.
func ValidName(what, n string) error {
	if !nameRE.MatchString(n) {
		return fmt.Errorf("%s name %q: use 1-64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", what, n)
	}
	return nil
}

// Load reads and checks a users file. A file readable by others is
// refused: it holds the hashes.
func Load(file string) (*File, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("users file %s is readable by others (mode %v); chmod 600 it", file, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // an empty file has no users
		return nil, fmt.Errorf("users file %s: %w", file, err)
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("users file %s: %w", file, err)
	}
	return &f, nil
}

func (f *File) check() error {
	if f.Users == nil {
		f.Users = map[string]*User{}
	}
	keys := map[string]string{}
	for name, u := range f.Users {
		if err := ValidName("user", name); err != nil {
			return err
		}
		if u == nil {
			return fmt.Errorf("user %s has no entry", name)
		}
		if _, err := bcrypt.Cost([]byte(u.Secret)); err != nil {
			return fmt.Errorf("user %s: secret is not a bcrypt hash (create users with `plumb user add`)", name)
		}
		for _, g := range u.Groups {
			if err := ValidName("group", g); err != nil {
				return fmt.Errorf("user %s: %w", name, err)
			}
		}
		for _, k := range u.Keys {
			if other, dup := keys[k.ID]; dup {
				return fmt.Errorf("key %s belongs to both %s and %s", k.ID, other, name)
			}
			if len(k.SHA256) != 64 {
				return fmt.Errorf("user %s: key %s has no SHA-256", name, k.ID)
			}
			keys[k.ID] = name
		}
	}
	for i, g := range f.AnonKeys {
		if _, err := path.Match(g.Keys, ""); err != nil || g.Keys == "" {
			return fmt.Errorf("anon_keys %d: keys %q is not a valid pattern", i+1, g.Keys)
		}
		if len(g.Groups) == 0 {
			return fmt.Errorf("anon_keys %d (%s): needs groups", i+1, g.Keys)
		}
	}
	for i, r := range f.Rules {
		if _, err := path.Match(r.Queues, ""); err != nil || r.Queues == "" {
			return fmt.Errorf("rule %d: queues %q is not a valid pattern", i+1, r.Queues)
		}
		if len(r.Groups) == 0 || len(r.Allow) == 0 {
			return fmt.Errorf("rule %d (%s): needs groups and allow", i+1, r.Queues)
		}
		for _, p := range r.Allow {
			if p != Read && p != Write && p != Admin {
				return fmt.Errorf("rule %d (%s): allow %q: want read, write or admin", i+1, r.Queues, p)
			}
		}
	}
	return nil
}

// Save writes the file atomically, readable by its owner only.
func (f *File) Save(file string) error {
	raw, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".users-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	// The file stays its owner's: root adding a user to the file the
	// server's own user reads (/etc/plumb/users.yaml, owned by plumb)
	// made it root's, and the server could no longer read it.
	if fi, err := os.Stat(file); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
			if err := tmp.Chown(int(st.Uid), int(st.Gid)); err != nil {
				tmp.Close()
				return fmt.Errorf("keep %s its owner's (uid %d): %w", file, st.Uid, err)
			}
		}
	}
	hdr := "# Plumb users: secrets are bcrypt hashes, keys SHA-256. Edit rules by hand;\n# add users with `plumb user add`. The server rereads this file on SIGHUP.\n"
	if _, err := tmp.WriteString(hdr + string(raw)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// LoadOrNew loads a users file, or returns an empty one if it does not
// exist yet.
func LoadOrNew(file string) (*File, error) {
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		return &File{Users: map[string]*User{}}, nil
	}
	return Load(file)
}

// randomText returns n random bytes as unpadded base64url.
func randomText(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// AddUser creates a user (or replaces its secret and groups) and returns
// the new secret, which is shown once and kept only as a hash.
func (f *File) AddUser(name string, groups []string) (string, error) {
	if err := ValidName("user", name); err != nil {
		return "", err
	}
	for _, g := range groups {
		if err := ValidName("group", g); err != nil {
			return "", err
		}
	}
	secret := randomText(24)
	hash, err := bcrypt.GenerateFromPassword([]byte(secret), bcrypt.DefaultCost)
	if err != nil {
		return "", err
	}
	u := f.Users[name]
	if u == nil {
		u = &User{ID: randomText(9)}
		f.Users[name] = u
	} else {
		// A new secret ends the sessions of the old one.
		u.Generation++
	}
	if u.ID == "" {
		u.ID = randomText(9)
	}
	u.Secret, u.Groups = string(hash), slices.Clone(groups)
	return secret, nil
}

// Revoke ends every token the user holds now (its keys stay: revoke
// those one by one with RevokeKey).
func (f *File) Revoke(name string) error {
	u := f.Users[name]
	if u == nil {
		return fmt.Errorf("no user %q", name)
	}
	u.Generation++
	if u.ID == "" {
		u.ID = randomText(9)
	}
	return nil
}

// RevokeKey removes an API key by its id; it stops working at once on a
// server that sees the file.
func (f *File) RevokeKey(id string) (user string, err error) {
	for name, u := range f.Users {
		for i, k := range u.Keys {
			if k.ID == id {
				u.Keys = slices.Delete(u.Keys, i, i+1)
				return name, nil
			}
		}
	}
	return "", fmt.Errorf("no API key %q; `plumb user keys NAME` lists a user's keys", id)
}

// keyPrefix starts every API key, so a key is told from a token at once.
const keyPrefix = "pk."

// AddKey creates an API key for a user and returns it, shown once.
func (f *File) AddKey(name string, now time.Time, sites ...string) (string, error) {
	u := f.Users[name]
	if u == nil {
		return "", fmt.Errorf("no user %q; create it with `plumb user add %s --group G`", name, name)
	}
	for _, site := range sites {
		if q, inst, ok := strings.Cut(site, "/"); !ok || q == "" || inst == "" || strings.Contains(inst, "/") {
			return "", fmt.Errorf("site %q: want QUEUE/INSTANCE, such as pcap.sz/lax (patterns as in rules: pcap.*/lax)", site)
		}
		if _, err := path.Match(site, ""); err != nil {
			return "", fmt.Errorf("site %q: %w", site, err)
		}
	}
	idb := make([]byte, 6)
	rand.Read(idb)
	id := hex.EncodeToString(idb)
	secret := randomText(32)
	sum := sha256.Sum256([]byte(secret))
	u.Keys = append(u.Keys, Key{ID: id, SHA256: hex.EncodeToString(sum[:]), Created: now.UTC().Truncate(time.Second), Sites: slices.Clone(sites)})
	return keyPrefix + id + "." + secret, nil
}

// ErrDenied is returned for a failed login or an invalid token or key; it
// says no more, so a caller cannot tell a wrong user from a wrong secret.
var ErrDenied = errors.New("authentication failed")

// Authority checks logins, tokens and keys and answers permission
// questions, against a users file it can reload.
type Authority struct {
	path string
	ttl  time.Duration
	now  func() time.Time

	mu sync.RWMutex
	// sign signs new tokens and verifies them; previous, when set, still
	// verifies the tokens signed before a rotation (see SetKeys).
	sign, previous []byte
	file           *File
	seen           fileStamp // of the users file as last loaded
	bad            fileStamp // of a version of it that did not load
	version        uint64    // counts loads
	log            *slog.Logger
}

// SetLogger says where a users file changed on disk that does not load
// is reported, once per version of the file (nowhere when unset).
func (a *Authority) SetLogger(log *slog.Logger) {
	a.mu.Lock()
	a.log = log
	a.mu.Unlock()
}

// fileStamp tells whether the users file changed since it was read.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if sys, ok := fi.Sys().(interface{ Ino() uint64 }); ok {
		st.ino = sys.Ino()
	}
	return st
}

// TokenTTL is how long a login's token lasts unless configured.
const TokenTTL = 12 * time.Hour

// NewAuthority loads the users file. signKey signs tokens (keep it across
// restarts so tokens survive them); ttl 0 means TokenTTL; now nil means
// time.Now.
func NewAuthority(usersFile string, signKey []byte, ttl time.Duration, now func() time.Time) (*Authority, error) {
	if len(signKey) < 32 {
		return nil, errors.New("token signing key must be at least 32 bytes")
	}
	if ttl <= 0 {
		ttl = TokenTTL
	}
	if now == nil {
		now = time.Now
	}
	a := &Authority{path: usersFile, sign: signKey, ttl: ttl, now: now}
	return a, a.Reload()
}

// SetKeys changes the token signing key: sign signs from now on, and
// tokens signed with previous (nil: none) are still good until they
// expire, so a rotation that keeps the old key logs no one out, and one
// that drops it ends every token signed before.
func (a *Authority) SetKeys(sign, previous []byte) error {
	if len(sign) < 32 {
		return errors.New("token signing key must be at least 32 bytes")
	}
	a.mu.Lock()
	a.sign, a.previous = bytes.Clone(sign), bytes.Clone(previous)
	a.mu.Unlock()
	return nil
}

// signed reports whether mac is body's HMAC under the signing key or the
// previous one.
func (a *Authority) signed(body, mac []byte) bool {
	a.mu.RLock()
	sign, previous := a.sign, a.previous
	a.mu.RUnlock()
	for _, k := range [][]byte{sign, previous} {
		if k == nil {
			continue
		}
		m := hmac.New(sha256.New, k)
		m.Write(body)
		if hmac.Equal(mac, m.Sum(nil)) {
			return true
		}
	}
	return false
}

// SignKey reads the token signing key from file, creating a random one
// (mode 600) the first time.
func SignKey(file string) ([]byte, error) {
	raw, err := os.ReadFile(file)
	if err == nil && len(raw) >= 32 {
		return raw, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, key, 0o600); err != nil {
		return nil, err
	}
	return key, nil
}

// Reload rereads the users file; on error the old one stays in force.
func (a *Authority) Reload() error {
	fi, err := os.Stat(a.path)
	if err != nil {
		return fmt.Errorf("users file: %w", err)
	}
	f, err := Load(a.path)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.file, a.seen = f, stampOf(fi)
	a.version++
	a.mu.Unlock()
	return nil
}

// Refresh rereads the users file if it changed on disk and returns a
// number that changes with every load, so a caller can tell that rights
// may have changed (and recheck what it granted on them).
func (a *Authority) Refresh() uint64 {
	a.fresh()
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.version
}

// fresh rereads the users file when it changed on disk, so that a
// revocation (`plumb user revoke`, a new secret, a removed user or key)
// takes effect on the next call, without waiting for SIGHUP. A stat per
// call is cheap next to the call; a file that no longer loads keeps the
// old one in force, and is reported once (SetLogger).
func (a *Authority) fresh() {
	fi, err := os.Stat(a.path)
	if err != nil {
		return
	}
	st := stampOf(fi)
	a.mu.RLock()
	same, known := a.seen == st, a.bad == st
	a.mu.RUnlock()
	if same || known {
		return // loaded, or known not to load: not parsed again per call
	}
	if err := a.Reload(); err != nil {
		a.mu.Lock()
		a.bad = st
		log := a.log
		a.mu.Unlock()
		if log != nil {
			log.Error("the users file changed on disk but does not load; the users and rules before stay in force until it is fixed", "file", a.path, "err", err)
		}
	}
}

// UserID returns a user's stable id ("" in a file written before ids),
// and false when the file has no such user.
func (a *Authority) UserID(name string) (string, bool) {
	a.fresh()
	a.mu.RLock()
	defer a.mu.RUnlock()
	u := a.file.Users[name]
	if u == nil {
		return "", false
	}
	return u.ID, true
}

// Users returns how many users the file holds.
func (a *Authority) Users() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.file.Users)
}

func (a *Authority) identity(name, via string) (Identity, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	u := a.file.Users[name]
	if u == nil {
		return Identity{}, false
	}
	return Identity{User: name, ID: u.ID, Groups: slices.Clone(u.Groups), Via: via, Stamp: stamp(u)}, true
}

func stamp(u *User) string { return u.ID + ":" + strconv.FormatUint(u.Generation, 10) }

// Login checks a user's secret and returns a bearer token.
func (a *Authority) Login(user, secret string) (string, Identity, error) {
	a.fresh()
	a.mu.RLock()
	u := a.file.Users[user]
	var hash []byte
	if u != nil {
		hash = []byte(u.Secret)
	} else {
		hash = dummyHash() // the same work for an unknown user
	}
	a.mu.RUnlock()
	if bcrypt.CompareHashAndPassword(hash, []byte(secret)) != nil || u == nil {
		return "", Identity{}, ErrDenied
	}
	id, ok := a.identity(user, "password")
	if !ok {
		return "", Identity{}, ErrDenied // removed meanwhile
	}
	return a.token(user, id.Stamp), id, nil
}

var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte(randomText(24)), bcrypt.DefaultCost)
	return h
})

// token is base64url(expiry as 8 bytes, the user's stamp, NUL, user)
// "." base64url(HMAC). The stamp (id and generation) ties the token to
// this user as it is now.
func (a *Authority) token(user, stamp string) string {
	body := binary.BigEndian.AppendUint64(nil, uint64(a.now().Add(a.ttl).Unix()))
	body = append(body, stamp...)
	body = append(body, 0)
	body = append(body, user...)
	a.mu.RLock()
	m := hmac.New(sha256.New, a.sign)
	a.mu.RUnlock()
	m.Write(body)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a bearer credential: a token from Login or an API key.
// The user's groups are those of the users file now, so a reload takes
// effect on tokens already given out, and a removed user's tokens fail.
func (a *Authority) Verify(cred string) (Identity, error) {
	a.fresh()
	if rest, ok := strings.CutPrefix(cred, keyPrefix); ok {
		return a.verifyKey(rest)
	}
	// Only the token's own alphabet: the decoder would skip \r and \n,
	// giving one token several spellings.
	if strings.IndexFunc(cred, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) >= 0 {
		return Identity{}, ErrDenied
	}
	b64body, b64mac, ok := strings.Cut(cred, ".")
	if !ok {
		return Identity{}, ErrDenied
	}
	body, err1 := base64.RawURLEncoding.Strict().DecodeString(b64body)
	mac, err2 := base64.RawURLEncoding.Strict().DecodeString(b64mac)
	if err1 != nil || err2 != nil || len(body) < 9 {
		return Identity{}, ErrDenied
	}
	if !a.signed(body, mac) {
		return Identity{}, ErrDenied
	}
	if exp := int64(binary.BigEndian.Uint64(body)); a.now().Unix() >= exp {
		return Identity{}, fmt.Errorf("%w: the token expired; log in again", ErrDenied)
	}
	tokStamp, user, ok := strings.Cut(string(body[8:]), "\x00")
	if !ok {
		return Identity{}, ErrDenied
	}
	id, ok := a.identity(user, "token")
	if !ok || subtle.ConstantTimeCompare([]byte(id.Stamp), []byte(tokStamp)) != 1 {
		return Identity{}, fmt.Errorf("%w: the token was revoked; log in again", ErrDenied)
	}
	return id, nil
}

func (a *Authority) verifyKey(rest string) (Identity, error) {
	kid, secret, ok := strings.Cut(rest, ".")
	if !ok {
		return Identity{}, ErrDenied
	}
	sum := sha256.Sum256([]byte(secret))
	want := hex.EncodeToString(sum[:])
	a.mu.RLock()
	var owner string
	var sites []string
	for name, u := range a.file.Users {
		for _, k := range u.Keys {
			if k.ID == kid && subtle.ConstantTimeCompare([]byte(k.SHA256), []byte(want)) == 1 {
				owner, sites = name, slices.Clone(k.Sites)
			}
		}
	}
	a.mu.RUnlock()
	if owner == "" {
		return Identity{}, ErrDenied
	}
	id, _ := a.identity(owner, "key")
	id.Sites = sites
	return id, nil
}

// Identify returns the identity of a user named by something already
// verified (a client certificate's common name).
func (a *Authority) Identify(user, via string) (Identity, error) {
	a.fresh()
	id, ok := a.identity(user, via)
	if !ok {
		return Identity{}, fmt.Errorf("%w: no user %q in the users file", ErrDenied, user)
	}
	return id, nil
}

// MayUseKey reports whether a user's jobs may name an anonymization key:
// a grant in anon_keys to one of its groups, or admin on "*".
func (a *Authority) MayUseKey(id Identity, key string) bool {
	if a.Allowed(id, Admin, "") {
		return true
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, g := range a.file.AnonKeys {
		if ok, _ := path.Match(g.Keys, key); ok && slices.ContainsFunc(g.Groups, func(g string) bool { return slices.Contains(id.Groups, g) }) {
			return true
		}
	}
	return false
}

// MayPutSite reports whether a call may put blocks into a site: always,
// unless it was made with an API key bound to other sites.
func (id Identity) MayPutSite(queue, instance string) bool {
	if len(id.Sites) == 0 {
		return true
	}
	for _, s := range id.Sites {
		if ok, _ := path.Match(s, queue+"/"+instance); ok {
			return true
		}
	}
	return false
}

// Allowed reports whether id may do p on queue. Admin on a queue implies
// read and write on it. queue "" asks about the whole server: only rules
// for "*" give it.
func (a *Authority) Allowed(id Identity, p Perm, queue string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, r := range a.file.Rules {
		if !slices.ContainsFunc(r.Groups, func(g string) bool { return slices.Contains(id.Groups, g) }) {
			continue
		}
		if queue == "" && r.Queues != "*" {
			continue
		}
		if ok, _ := path.Match(r.Queues, queue); !ok {
			continue
		}
		if slices.Contains(r.Allow, p) || slices.Contains(r.Allow, Admin) {
			return true
		}
	}
	return false
}

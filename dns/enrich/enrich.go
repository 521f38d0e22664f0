// Package enrich says who an address in DNS records or transactions
// belongs to: its country and autonomous system, from MaxMind-format
// databases an operator provides, and whether it is a public resolver,
// from a shipped, dated list. It adds these as columns to Arrow record
// batches, beside a column naming the database versions used, so a
// row says what enriched it.
package enrich

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/oschwald/maxminddb-golang/v2"
	"golang.org/x/sync/singleflight"
)

// DB is one MaxMind-format database, read whole into memory: a file
// replaced on disk never changes a DB in use.
type DB struct {
	r *maxminddb.Reader
	// Type is the database's own name for its kind (GeoLite2-City,
	// GeoLite2-ASN, GeoIP2-Enterprise...).
	Type string
	// Built is when the database was built, its version.
	Built time.Time
}

// MaxDBBytes bounds a database file read (MaxMind's largest, Enterprise,
// is about 500 MB).
const MaxDBBytes = 1 << 30

// OpenDB reads the database at path and checks its structure, so a
// truncated or corrupt file is refused before a row depends on it.
func OpenDB(path string) (*DB, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxDBBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxDBBytes {
		return nil, fmt.Errorf("over %d bytes", MaxDBBytes)
	}
	return openBytes(data)
}

func openBytes(data []byte) (*DB, error) {
	r, err := maxminddb.OpenBytes(data)
	if err != nil {
		return nil, fmt.Errorf("not a MaxMind database: %w", err)
	}
	if err := r.Verify(); err != nil {
		return nil, fmt.Errorf("a damaged MaxMind database: %w", err)
	}
	return &DB{r: r, Type: capString(r.Metadata.DatabaseType, maxType), Built: r.Metadata.BuildTime().UTC()}, nil
}

// Bounds of what a database may add to a row: a row carries each string
// looked up, and enriched_by names the databases in every row, so a
// database whose strings run to megabytes (under the decoder's record
// bound, past every check) made a 400-row block take 2.2 GB.
const (
	// MaxString bounds an organisation's or resolver's name: longer ones
	// are cut at a character's end (real AS names are under 100 bytes).
	MaxString = 256
	// maxType bounds a database's type as enriched_by names it.
	maxType = 64
)

// capString cuts s to at most max bytes, at the end of a character, in
// a copy of its own: a slice would keep the whole string alive.
func capString(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return strings.Clone(s)
}

// isCountry says whether s is an ISO 3166-1 alpha-2 code: a database's
// country of any other form is not one.
func isCountry(s string) bool {
	return len(s) == 2 && 'A' <= s[0] && s[0] <= 'Z' && 'A' <= s[1] && s[1] <= 'Z'
}

// Version is how rows name the database: its type and build time.
func (d *DB) Version() string {
	return d.Type + " " + d.Built.Format(time.RFC3339)
}

// geoRecord is what a lookup reads of a record: the fields of MaxMind's
// Country, City, ASN, ISP and Enterprise databases that rows carry.
type geoRecord struct {
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
	RegisteredCountry struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"registered_country"`
	ASN   uint32 `maxminddb:"autonomous_system_number"`
	ASOrg string `maxminddb:"autonomous_system_organization"`
}

// Info is what is known of an address.
type Info struct {
	Country  string // ISO 3166-1 alpha-2; "" unknown
	ASN      uint32 // 0 unknown
	ASOrg    string
	Resolver string // the public resolver it is a service address of
}

// Databases opens the databases of a directory by name and reopens one
// when its file changes, so an operator replaces a database (by renaming
// a new file over the old) without a restart. A run takes the versions
// current when it starts and keeps them to its end.
type Databases struct {
	dir     string
	log     *slog.Logger
	mu      sync.Mutex
	m       map[string]*loaded
	bad     map[string]loaded // a changed file that did not open, and why
	loading singleflight.Group
}

type loaded struct {
	db      *DB
	err     error // why a version did not open (Databases.bad)
	size    int64
	modTime time.Time
	ino     uint64
}

// same says whether l is the version of a file fi and ino describe.
func (l loaded) same(fi os.FileInfo, ino uint64) bool {
	return l.size == fi.Size() && l.modTime.Equal(fi.ModTime()) && l.ino == ino
}

// NewDatabases serves the databases in dir. A changed database that does
// not open is logged on log, once per version of its file, and the one
// before stays in use.
func NewDatabases(dir string, log *slog.Logger) *Databases {
	if log == nil {
		log = slog.Default()
	}
	return &Databases{dir: dir, log: log, m: map[string]*loaded{}, bad: map[string]loaded{}}
}

// Path is where the file name of the directory is, for the reference
// files beside the databases (resolver and name lists): false for a
// name that is not a plain file name (a path, a hidden file), or when
// no directory is set. A job names such files; it cannot point outside.
func (d *Databases) Path(name string) (string, bool) {
	if !plainName(name) || d.dir == "" {
		return "", false
	}
	return d.dir + string(os.PathSeparator) + name, true
}

func plainName(name string) bool {
	return name != "" && !strings.ContainsAny(name, `/\`) && !strings.HasPrefix(name, ".") && len(name) <= 128
}

// ErrNoDatabase is returned for a name that is not a database in the
// directory.
var ErrNoDatabase = errors.New("no such database")

// Get returns the database file name of the directory, reopened if the
// file changed since it was last read. If the file changed but does not
// open (an operator's copy still being written in place), the version
// read before stays in use and the error is returned beside it.
func (d *Databases) Get(name string) (*DB, error) {
	if !plainName(name) {
		return nil, fmt.Errorf("database %q: name a plain file of the databases directory", name)
	}
	path, ok := d.Path(name)
	if !ok {
		return nil, fmt.Errorf("database %s: no databases directory is set (plumb serve --geoip DIR)", name)
	}
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("database %s: %w in the databases directory; an admin copies it there", name, ErrNoDatabase)
		}
		return nil, fmt.Errorf("database %s: %v", name, errors.Unwrap(err))
	}
	ino := inode(fi)
	d.mu.Lock()
	old, bad := d.m[name], d.bad[name]
	d.mu.Unlock()
	if old != nil && old.same(fi, ino) {
		return old.db, nil
	}
	if bad.err != nil && bad.same(fi, ino) {
		// This version failed before: not read again for every block.
		if old != nil {
			return old.db, bad.err
		}
		return nil, bad.err
	}
	// Read outside the lock (a large database takes seconds, and runs
	// using the others go on), once however many runs ask at a time.
	v, err, _ := d.loading.Do(name, func() (any, error) {
		db, err := OpenDB(path)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.m[name] = &loaded{db: db, size: fi.Size(), modTime: fi.ModTime(), ino: ino}
		d.mu.Unlock()
		return db, nil
	})
	if err != nil {
		err = fmt.Errorf("database %s: %v", name, err)
		d.mu.Lock()
		d.bad[name] = loaded{err: err, size: fi.Size(), modTime: fi.ModTime(), ino: ino}
		d.mu.Unlock()
		if old != nil {
			d.log.Warn("a changed enrichment database does not open; the version before stays in use until it does", "db", name, "in_use", old.db.Version(), "err", err)
			return old.db, err
		}
		d.log.Warn("an enrichment database does not open", "db", name, "err", err)
		return nil, err
	}
	return v.(*DB), nil
}

// Resolvers are the service addresses of public resolvers.
type Resolvers struct {
	exact    map[netip.Addr]string
	prefixes []netip.Prefix
	names    []string
	// Version names the list in rows: "resolvers" and its date.
	Version string
}

//go:embed resolvers.txt
var shipped []byte

// ShippedResolvers is the list shipped with Plumb; see resolvers.txt for
// its sources and date.
func ShippedResolvers() *Resolvers {
	r, err := ReadResolvers(bytes.NewReader(shipped), "resolvers 2026-12-03")
	if err != nil {
		panic("enrich: the shipped resolver list: " + err.Error())
	}
	return r
}

// ReadResolvers reads a list of "PREFIX NAME" lines (# starts a comment).
func ReadResolvers(r io.Reader, version string) (*Resolvers, error) {
	res := &Resolvers{exact: map[netip.Addr]string{}, Version: version}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want PREFIX NAME, got %q", n, strings.TrimSpace(line))
		}
		p, err := netip.ParsePrefix(f[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		if p.IsSingleIP() {
			res.exact[p.Addr()] = f[1]
		} else {
			res.prefixes, res.names = append(res.prefixes, p.Masked()), append(res.names, f[1])
		}
	}
	return res, sc.Err()
}

// Add adds the entries of o, which win over r's.
func (r *Resolvers) Add(o *Resolvers) {
	for a, n := range o.exact {
		r.exact[a] = n
	}
	r.prefixes, r.names = append(o.prefixes, r.prefixes...), append(o.names, r.names...)
	r.Version += "; " + o.Version
}

// Lookup returns the resolver an address is a service address of.
func (r *Resolvers) Lookup(a netip.Addr) string {
	if r == nil {
		return ""
	}
	a = a.Unmap()
	if n, ok := r.exact[a]; ok {
		return n
	}
	for i, p := range r.prefixes {
		if p.Contains(a) {
			return r.names[i]
		}
	}
	return ""
}

// Enricher looks addresses up in databases and a resolver list,
// remembering the answers for the addresses a run sees again. It is not
// for concurrent use: a run makes its own.
type Enricher struct {
	dbs       []*DB
	resolvers *Resolvers
	seen      map[string]Info
	by        string
}

// maxSeen bounds the answers an Enricher remembers; past it they are
// forgotten and looked up again.
const maxSeen = 1 << 16

// NewEnricher looks addresses up in dbs, the first database that knows a
// field giving it, and in resolvers (nil for none).
func NewEnricher(dbs []*DB, resolvers *Resolvers) *Enricher {
	var by []string
	for _, d := range dbs {
		by = append(by, d.Version())
	}
	if resolvers != nil {
		by = append(by, resolvers.Version)
	}
	return &Enricher{dbs: dbs, resolvers: resolvers, seen: map[string]Info{}, by: strings.Join(by, "; ")}
}

// By names what enriches: each database's type and build time, and the
// resolver list's date.
func (e *Enricher) By() string { return e.by }

// Lookup returns what is known of an address in text form; nothing for
// text that is not an address.
func (e *Enricher) Lookup(addr string) Info {
	if info, ok := e.seen[addr]; ok {
		return info
	}
	var info Info
	if a, err := netip.ParseAddr(addr); err == nil {
		info = e.lookup(a)
	}
	if len(e.seen) >= maxSeen {
		clear(e.seen)
	}
	e.seen[addr] = info
	return info
}

func (e *Enricher) lookup(a netip.Addr) Info {
	var info Info
	a = a.Unmap()
	for _, d := range e.dbs {
		var rec geoRecord
		if err := d.r.Lookup(a).Decode(&rec); err != nil {
			continue // a damaged record: the fields stay unknown
		}
		if info.Country == "" {
			if isCountry(rec.Country.ISOCode) {
				info.Country = rec.Country.ISOCode
			} else if isCountry(rec.RegisteredCountry.ISOCode) {
				info.Country = rec.RegisteredCountry.ISOCode
			}
		}
		if info.ASN == 0 && rec.ASN != 0 {
			info.ASN, info.ASOrg = rec.ASN, capString(rec.ASOrg, MaxString)
		}
	}
	info.Resolver = capString(e.resolvers.Lookup(a), MaxString)
	return info
}

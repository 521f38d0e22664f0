// Package blob holds the blob stores that keep block bytes: a local
// directory (the embedded default) and S3-compatible object storage through
// minio-go. Metadata about blocks lives in package state; a blob store only
// knows keys and bytes.
//
// Every store keeps the same contract, checked by one acceptance test run on
// each backend:
//
//   - Put is atomic: a key names either nothing or all of its bytes. An
//     interrupted or refused Put leaves nothing visible under the key.
//   - Put verifies: the bytes must match the declared size and SHA-256, or
//     Put fails with ErrMismatch and stores nothing.
//   - Put is durable: when it returns nil the blob survives a crash, so
//     metadata may name it (the blob is durable before the metadata names it).
//   - Put is idempotent: the same bytes under the same key again succeed.
//   - Blobs are immutable; keys are written once and read many times.
//   - Delete of a missing key is not an error.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/block"
)

// Errors a store returns; test with errors.Is.
var (
	ErrNotFound = errors.New("blob not found")
	ErrMismatch = errors.New("blob does not match its declared size or checksum")
	ErrBadKey   = errors.New("invalid blob key")
)

// Linker is a store whose blobs are local files that can be hard-linked.
type Linker interface {
	Link(key, dst string) error
}

// Locator is a store whose blobs readers outside Plumb can open in
// place (a query engine reading a lake's Parquet files).
type Locator interface {
	// Location is the URL of key's blob, such as file:///DATA/blobs/blobs/KEY.
	Location(key string) (string, error)
}

// BlockKey is where a block's bytes live in a store: one key per identity
// and checksum, so a different upload (or a repeated stage run) of the same
// identity can never overwrite stored bytes.
//
// Most queues keep QUEUE/INSTANCE/NAME.sha256-SUM. A queue named
// *.parquet is a lake that query engines read in place, so its blocks go
// under Hive partitions, QUEUE/date=YYYY-MM-DD/site=INSTANCE/, the date
// being the block's (UTC, of its first packet), and end in .parquet.
func BlockKey(n block.Name, sum Sum) string {
	if IsLake(n.Queue) {
		return n.Queue + "/date=" + n.Time.UTC().Format("2006-01-02") + "/site=" + n.Instance + "/" + n.String() +
			".sha256-" + sum.String() + lakeExt
	}
	return n.Queue + "/" + n.Instance + "/" + n.String() + ".sha256-" + sum.String()
}

const lakeExt = ".parquet"

// carryPrefix starts the keys of sequential stages' carried state.
const carryPrefix = "carries/"

// CarryKey names the blob of the state a stage (its consumer group)
// carries for a site after the site's block seq.
func CarryKey(group, instance string, seq uint64, sum Sum) string {
	return carryPrefix + group + "/" + instance + "/" + fmt.Sprintf("%020d", seq) + ".sha256-" + sum.String()
}

// ParseCarryKey returns the group and instance a key made by CarryKey
// names.
func ParseCarryKey(key string) (group, instance string, ok bool) {
	rest, ok := strings.CutPrefix(key, carryPrefix)
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// IsLake reports whether a queue's blocks are laid out as a lake.
func IsLake(queue string) bool { return strings.HasSuffix(queue, lakeExt) }

// ParseBlockKey returns the block name and checksum a key made by
// BlockKey holds.
func ParseBlockKey(key string) (name string, sum Sum, err error) {
	base := key[strings.LastIndexByte(key, '/')+1:]
	name, rest, ok := strings.Cut(base, ".sha256-")
	if !ok {
		return "", sum, fmt.Errorf("key %s names no checksum", key)
	}
	sum, err = ParseSum(strings.TrimSuffix(rest, lakeExt))
	return name, sum, err
}

// Sum is a SHA-256 digest.
type Sum [sha256.Size]byte

// ParseSum parses a hex SHA-256 digest.
func ParseSum(s string) (Sum, error) {
	var sum Sum
	if len(s) != 2*len(sum) {
		return sum, fmt.Errorf("sha256 %q is not 64 hex digits", s)
	}
	if _, err := hex.Decode(sum[:], []byte(s)); err != nil {
		return sum, fmt.Errorf("sha256 %q is not hex: %v", s, err)
	}
	return sum, nil
}

func (s Sum) String() string { return hex.EncodeToString(s[:]) }

// Info describes a stored blob.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
	Store   string // the member of a Multi holding it; "" otherwise
}

// Store holds immutable blobs under keys. See the package comment for the
// rules every implementation keeps.
type Store interface {
	// Put reads exactly size bytes from r and stores them under key once
	// they match sum.
	Put(ctx context.Context, key string, r io.Reader, size int64, sum Sum) error
	// Open returns a reader of the whole blob, or an error wrapping
	// ErrNotFound.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes the blob, or returns an error wrapping ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the blob; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every blob, in no particular order; not for the
	// store's owner record (OwnerKey).
	List(ctx context.Context, fn func(Info) error) error
	// String names the store for errors and logs (a URL without secrets).
	String() string
	// Close releases the store's resources.
	Close() error
}

// CheckKey validates a key: '/'-separated parts of letters, digits, '.', '_',
// '-' and '=', none empty, none "." or "..", at most 900 bytes. Keys are
// built from validated block names; this is the last line of defence before
// a key becomes a path or an object name.
func CheckKey(key string) error {
	if key == "" || len(key) > 900 {
		return fmt.Errorf("%w %q: empty or longer than 900 bytes", ErrBadKey, key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("%w %q: empty, '.' or '..' path part", ErrBadKey, key)
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == '=') {
				return fmt.Errorf("%w %q: byte %q is not allowed", ErrBadKey, key, c)
			}
		}
	}
	return nil
}

// Open opens the store a URL names: file:///DIR (or a plain path) for a
// local directory, s3://BUCKET?endpoint=HOST:PORT for S3 (see OpenS3).
func Open(ctx context.Context, rawURL string) (Store, error) {
	if !strings.Contains(rawURL, "://") {
		return OpenDir(rawURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %v", rawURL, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			// file://plumb-data/blobs is host "plumb-data", path /blobs:
			// a store at the root, shared by every server that makes it.
			return nil, fmt.Errorf("store URL %q names host %q: a file store's URL needs an absolute path after three slashes (file:///var/lib/plumb/blobs), or give a plain path", rawURL, u.Host)
		}
		return OpenDir(u.Path)
	case "s3":
		return OpenS3(ctx, u)
	}
	return nil, fmt.Errorf("store URL %q: scheme %q is not known (use file:///DIR or s3://BUCKET?endpoint=HOST:PORT)", rawURL, u.Scheme)
}

// verifier hashes and counts what is read through it, and fails the read
// that would go past the declared size, so a store never writes more than
// it was told to expect.
type verifier struct {
	ctx  context.Context
	r    io.Reader
	size int64
	n    int64
	err  error // the first error Read returned
	h    interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func newVerifier(ctx context.Context, r io.Reader, size int64) *verifier {
	return &verifier{ctx: ctx, r: r, size: size, h: sha256.New()}
}

func (v *verifier) Read(p []byte) (n int, err error) {
	defer func() {
		if err != nil && v.err == nil {
			v.err = err
		}
	}()
	if err := v.ctx.Err(); err != nil {
		return 0, err
	}
	if v.n >= v.size {
		return 0, io.EOF // what follows was looked for with the last bytes
	}
	if rem := v.size - v.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err = v.r.Read(p)
	if err == nil && v.n+int64(n) == v.size {
		// The last declared bytes: whatever follows is looked for before
		// they are handed over. An S3 server commits an object once its
		// body is whole, so a source longer than declared must fail the
		// upload before the body is, not after (the object then appeared
		// though Put said it was refused).
		var one [1]byte
		k, perr := io.ReadFull(v.r, one[:])
		switch {
		case k > 0:
			return 0, fmt.Errorf("%w: more than the declared %d bytes", ErrMismatch, v.size)
		case perr != io.EOF:
			return 0, perr
		}
		err = io.EOF
	}
	v.n += int64(n)
	v.h.Write(p[:n])
	if err == io.EOF && v.n < v.size {
		err = fmt.Errorf("%w: got %d of the declared %d bytes", ErrMismatch, v.n, v.size)
	}
	return n, err
}

// check reports whether everything read matched the declaration.
func (v *verifier) check(sum Sum) error {
	if v.n != v.size {
		return fmt.Errorf("%w: got %d of the declared %d bytes", ErrMismatch, v.n, v.size)
	}
	var got Sum
	v.h.Sum(got[:0])
	if got != sum {
		return fmt.Errorf("%w: sha256 is %s, declared %s", ErrMismatch, got, sum)
	}
	return nil
}

// Spacer is a store that knows how much room it has left (a directory on
// a file system); object stores that grow on demand do not.
type Spacer interface {
	Space() (free, total int64, err error)
}

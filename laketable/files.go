package laketable

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/parquet"
	iceio "github.com/apache/iceberg-go/io"

	"github.com/plumb-dev/plumb/blob"
)

// files are where a server's tables keep what Plumb writes (compacted
// files and their sidecars) and read: this machine's filesystem beside
// a directory store, or the bucket of an S3 store, so that every file a
// table names is where the store keeps its blocks and any query engine
// that reaches the store reaches the table. Locations are URLs, as the
// table names its files: file:///PATH or s3://BUCKET/KEY.
type files interface {
	// open opens the file at loc for reads anywhere in it.
	open(ctx context.Context, loc string) (readAtFile, error)
	// read returns the file at loc.
	read(ctx context.Context, loc string) ([]byte, error)
	// write makes the file at loc of what fill writes: whole, or not at
	// all when fill or the write fails.
	write(ctx context.Context, loc string, fill func(io.Writer) error) error
	// remove deletes the file at loc; one not there is not an error.
	remove(ctx context.Context, loc string) error
	// walk calls fn with each file under the location dir and when it
	// was written.
	walk(ctx context.Context, dir string, fn func(loc string, mod time.Time) error) error
}

// readAtFile is a file open for reads anywhere in it.
type readAtFile interface {
	parquet.ReaderAtSeeker
	io.Closer
}

// routedFiles reach each file where its location says: file:// on this
// machine, s3://BUCKET/ in the bucket of the server's S3 store (or
// member store) that has it. The lake's block files may be in several
// member stores; the tables' own files are where the primary store is.
type routedFiles struct {
	store blob.Store
	tmp   string // where a file for a bucket is spooled (beside the catalog)
}

func (r routedFiles) pick(loc string) (files, error) {
	if strings.HasPrefix(loc, "file://") {
		return localFiles{}, nil
	}
	bucket, ok := strings.CutPrefix(loc, "s3://")
	if !ok {
		return nil, fmt.Errorf("%s: neither a file:// nor an s3:// location", loc)
	}
	bucket, _, _ = strings.Cut(bucket, "/")
	stores := []blob.Store{r.store}
	if m, ok := r.store.(*blob.Multi); ok {
		stores = m.Stores()
	}
	for _, s := range stores {
		if s3, ok := s.(*blob.S3); ok && s3.Bucket() == bucket {
			return bucketFiles{s3, r.tmp}, nil
		}
	}
	return nil, fmt.Errorf("%s: %w %s", loc, errNoBucket, bucket)
}

func (r routedFiles) open(ctx context.Context, loc string) (readAtFile, error) {
	f, err := r.pick(loc)
	if err != nil {
		return nil, err
	}
	return f.open(ctx, loc)
}

func (r routedFiles) read(ctx context.Context, loc string) ([]byte, error) {
	f, err := r.pick(loc)
	if err != nil {
		return nil, err
	}
	return f.read(ctx, loc)
}

func (r routedFiles) write(ctx context.Context, loc string, fill func(io.Writer) error) error {
	f, err := r.pick(loc)
	if err != nil {
		return err
	}
	return f.write(ctx, loc, fill)
}

func (r routedFiles) remove(ctx context.Context, loc string) error {
	f, err := r.pick(loc)
	if err != nil {
		return err
	}
	return f.remove(ctx, loc)
}

func (r routedFiles) walk(ctx context.Context, dir string, fn func(string, time.Time) error) error {
	f, err := r.pick(dir)
	if err != nil {
		return err
	}
	return f.walk(ctx, dir, fn)
}

// localFiles are files on this machine, beside a directory store.
type localFiles struct{}

func localPath(loc string) (string, error) {
	u, err := url.Parse(loc)
	if err != nil || u.Scheme != "file" {
		return "", fmt.Errorf("%s is not a file URL", loc)
	}
	return u.Path, nil
}

func (localFiles) open(_ context.Context, loc string) (readAtFile, error) {
	p, err := localPath(loc)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

func (localFiles) read(_ context.Context, loc string) ([]byte, error) {
	p, err := localPath(loc)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// write writes a file beside the one at loc and renames it there once it
// is whole and on disk.
func (localFiles) write(_ context.Context, loc string, fill func(io.Writer) error) error {
	p, err := localPath(loc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return err
	}
	tmp := p + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	return syncFile(filepath.Dir(p))
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (localFiles) remove(_ context.Context, loc string) error {
	p, err := localPath(loc)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (localFiles) walk(_ context.Context, dir string, fn func(string, time.Time) error) error {
	root, err := localPath(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, os.ErrNotExist) {
			return nil // fn removed it (a sidecar)
		}
		if err != nil {
			return err
		}
		return fn((&url.URL{Scheme: "file", Path: path}).String(), info.ModTime())
	})
}

// bucketFiles are files in the bucket of an S3 store, under
// blob.TablesPrefix.
type bucketFiles struct {
	s3  *blob.S3
	tmp string // where a file is spooled before its PUT
}

// key returns the object key of the location s3://BUCKET/KEY.
func (b bucketFiles) key(loc string) (string, error) {
	rest, ok := strings.CutPrefix(loc, "s3://"+b.s3.Bucket()+"/")
	if !ok {
		return "", fmt.Errorf("%s is not in the bucket of the store %s", loc, b.s3)
	}
	return rest, nil
}

func (b bucketFiles) open(ctx context.Context, loc string) (readAtFile, error) {
	k, err := b.key(loc)
	if err != nil {
		return nil, err
	}
	return b.s3.OpenObject(ctx, k)
}

func (b bucketFiles) read(ctx context.Context, loc string) ([]byte, error) {
	k, err := b.key(loc)
	if err != nil {
		return nil, err
	}
	r, err := b.s3.Open(ctx, k)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// write spools what fill writes to a temporary file, then puts it in
// one PUT with its SHA-256, which the bucket checks before the object
// appears: a compaction dying midway leaves nothing.
func (b bucketFiles) write(ctx context.Context, loc string, fill func(io.Writer) error) error {
	k, err := b.key(loc)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(b.tmp, "plumb-iceberg-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	if err := fill(io.MultiWriter(f, h)); err != nil {
		return err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return b.s3.Put(ctx, k, f, size, blob.Sum(h.Sum(nil)))
}

func (b bucketFiles) remove(ctx context.Context, loc string) error {
	k, err := b.key(loc)
	if err != nil {
		return err
	}
	return b.s3.Delete(ctx, k)
}

func (b bucketFiles) walk(ctx context.Context, dir string, fn func(string, time.Time) error) error {
	k, err := b.key(strings.TrimSuffix(dir, "/") + "/")
	if err != nil {
		return err
	}
	return b.s3.Walk(ctx, k, func(i blob.Info) error {
		return fn("s3://"+b.s3.Bucket()+"/"+i.Key, i.ModTime)
	})
}

// The stores whose tables iceberg-go reads and writes through bucketIO,
// by the id a Tables puts in its catalog's properties (propStore):
// iceberg-go finds a table's files by the scheme of its location, and
// Plumb's S3 stores already hold the endpoint and credentials, which
// must not go into table properties every reader of the catalog sees.
// The id, not the bucket, keys them: two servers in one process (tests)
// may use buckets of one name on two endpoints.
var (
	storesMu   sync.Mutex
	stores     = map[string]routedFiles{}
	registerIO sync.Once
)

// propStore is the catalog property naming the store a Tables reaches
// s3:// locations through. Catalog properties stay in the process; they
// are not written to the catalog.
const propStore = "plumb.store"

// useStore makes iceberg-go reach the s3:// locations of the catalog
// whose propStore is id through the store's files (the lake's block
// files may be in any member store; the tables' own are in the primary).
func useStore(id string, files routedFiles) {
	registerIO.Do(func() {
		iceio.Register("s3", func(_ context.Context, u *url.URL, props map[string]string) (iceio.IO, error) {
			storesMu.Lock()
			defer storesMu.Unlock()
			files, ok := stores[props[propStore]]
			if !ok {
				return nil, fmt.Errorf("s3://%s: %w %s", u.Host, errNoBucket, u.Host)
			}
			return bucketIO{files: files}, nil
		})
	})
	storesMu.Lock()
	stores[id] = files
	storesMu.Unlock()
}

var errNoBucket = errors.New("no S3 store of this server (plumb store list) holds the bucket")

// bucketIO is iceberg-go's view of the tables' files: their metadata,
// manifest lists and manifests, and the files it reads the footers of
// when a sync adds them.
type bucketIO struct{ files routedFiles }

var _ iceio.WriteFileIO = bucketIO{}

func (b bucketIO) Open(name string) (iceio.File, error) {
	f, err := b.files.open(context.Background(), name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: notExist(err)}
	}
	o, ok := f.(*blob.Object)
	if !ok {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return objectFile{o, name}, nil
}

func (b bucketIO) ReadFile(name string) ([]byte, error) {
	data, err := b.files.read(context.Background(), name)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: notExist(err)}
	}
	return data, nil
}

func (b bucketIO) Remove(name string) error {
	if err := b.files.remove(context.Background(), name); err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}

func (b bucketIO) WriteFile(name string, p []byte) error {
	return b.files.write(context.Background(), name, func(w io.Writer) error {
		_, err := w.Write(p)
		return err
	})
}

// Create returns a writer whose bytes are put when it is closed.
func (b bucketIO) Create(name string) (iceio.FileWriter, error) {
	return &bufferedWriter{name: name, io: b}, nil
}

type bufferedWriter struct {
	bytes.Buffer
	name string
	io   bucketIO
}

func (w *bufferedWriter) Close() error { return w.io.WriteFile(w.name, w.Bytes()) }

// notExist makes a missing object read as fs.ErrNotExist, as iceberg-go
// expects of a file not there.
func notExist(err error) error {
	if errors.Is(err, blob.ErrNotFound) {
		return fs.ErrNotExist
	}
	return err
}

// objectFile is an object as an fs.File.
type objectFile struct {
	*blob.Object
	name string
}

func (o objectFile) Stat() (fs.FileInfo, error) { return objectInfo(o), nil }

type objectInfo objectFile

func (o objectInfo) Name() string       { return o.name[strings.LastIndex(o.name, "/")+1:] }
func (o objectInfo) Size() int64        { return o.Object.Size() }
func (o objectInfo) Mode() fs.FileMode  { return 0o444 }
func (o objectInfo) ModTime() time.Time { return o.Object.ModTime() }
func (o objectInfo) IsDir() bool        { return false }
func (o objectInfo) Sys() any           { return nil }

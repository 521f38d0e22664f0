package blob

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// Dir is a Store in a local directory. Blobs live under DIR/blobs/KEY; a
// Put writes DIR/tmp/* while hashing, fsyncs it, renames it into place and
// fsyncs the directory, so nothing half-written is ever visible under a key.
// Every access goes through an os.Root on DIR, so a symbolic link planted
// in the store can never lead a key outside it.
type Dir struct {
	root string
	r    *os.Root
}

var _ Store = (*Dir)(nil)

// OpenDir opens (creating if needed) a directory store. Temp files left by a
// crashed process are removed: their Put never returned, so no metadata can
// name them.
func OpenDir(root string) (*Dir, error) {
	if root == "" {
		return nil, errors.New("store directory is empty; give a path such as file:///var/lib/plumb/blobs")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"blobs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(abs, sub), 0o750); err != nil {
			return nil, fmt.Errorf("create store directory: %w", err)
		}
	}
	r, err := os.OpenRoot(abs)
	if err != nil {
		return nil, err
	}
	d := &Dir{root: abs, r: r}
	tmps, err := fs.ReadDir(r.FS(), "tmp")
	if err != nil {
		r.Close()
		return nil, err
	}
	for _, e := range tmps {
		r.Remove("tmp/" + e.Name())
	}
	return d, nil
}

func (d *Dir) String() string { return (&url.URL{Scheme: "file", Path: d.root}).String() }

// Location implements Locator: the blob's file, as a file URL.
func (d *Dir) Location(key string) (string, error) {
	p, err := d.path(key)
	if err != nil {
		return "", err
	}
	return (&url.URL{Scheme: "file", Path: filepath.Join(d.root, p)}).String(), nil
}

// Close releases the store's directory.
func (d *Dir) Close() error { return d.r.Close() }

// path is a key's name inside the root.
func (d *Dir) path(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if key == OwnerKey {
		return key, nil // beside blobs/, which holds blobs only
	}
	return "blobs/" + key, nil
}

// Put implements Store.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64, sum Sum) (err error) {
	final, err := d.path(key)
	if err != nil {
		return err
	}
	tmp := "tmp/put-" + rand.Text()
	f, err := d.r.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("store %s: create temp file for %s: %w", d, key, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			d.r.Remove(tmp)
		}
	}()
	v := newVerifier(ctx, r, size)
	// *os.File reads from v itself (ReadFrom), with a buffer of its own.
	if _, err := io.Copy(f, v); err != nil {
		return fmt.Errorf("store %s: write %s: %w", d, key, err)
	}
	if err := v.check(sum); err != nil {
		return fmt.Errorf("store %s: %s: %w", d, key, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store %s: fsync %s: %w", d, key, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := d.mkdirs(path.Dir(final)); err != nil {
		return fmt.Errorf("store %s: directory for %s: %w", d, key, err)
	}
	if err := d.r.Rename(tmp, final); err != nil {
		return fmt.Errorf("store %s: rename %s into place: %w", d, key, err)
	}
	return d.syncDir(path.Dir(final))
}

// mkdirs creates dir and its missing parents inside the root, fsyncing
// each parent so the new directory entries survive a crash.
func (d *Dir) mkdirs(dir string) error {
	if fi, err := d.r.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	parent := path.Dir(dir)
	if parent != "." && parent != dir {
		if err := d.mkdirs(parent); err != nil {
			return err
		}
	}
	if err := d.r.Mkdir(dir, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return d.syncDir(parent)
}

func (d *Dir) syncDir(dir string) error {
	f, err := d.r.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", filepath.Join(d.root, dir), err)
	}
	return nil
}

// Open implements Store. The reader is an *os.File, so it also seeks.
func (d *Dir) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := d.r.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("store %s: %s: %w", d, key, ErrNotFound)
	}
	return f, err
}

// Stat implements Store.
func (d *Dir) Stat(ctx context.Context, key string) (Info, error) {
	p, err := d.path(key)
	if err != nil {
		return Info{}, err
	}
	fi, err := d.r.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("store %s: %s: %w", d, key, ErrNotFound)
	}
	if err != nil {
		return Info{}, err
	}
	return Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// Delete implements Store.
func (d *Dir) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := d.r.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// List implements Store; the owner's record (OwnerKey) lies outside blobs/.
func (d *Dir) List(ctx context.Context, fn func(Info) error) error {
	return fs.WalkDir(d.r.FS(), "blobs", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		key := strings.TrimPrefix(p, "blobs/")
		fi, err := e.Info()
		if err != nil {
			return nil // removed while listing
		}
		return fn(Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
	})
}

// Link makes a hard link to a blob at dst, so a reader can have the
// blob as a file without a copy. Blobs are immutable, so the link can
// never see them change; deleting the blob leaves the link's bytes. The
// link is checked to be the very file the root resolves the key to.
func (d *Dir) Link(key, dst string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	f, err := d.r.Open(p)
	if err != nil {
		return err
	}
	want, err := f.Stat()
	f.Close()
	if err != nil {
		return err
	}
	if err := os.Link(filepath.Join(d.root, filepath.FromSlash(p)), dst); err != nil {
		return err
	}
	if got, err := os.Lstat(dst); err != nil || !os.SameFile(got, want) {
		os.Remove(dst)
		return fmt.Errorf("store %s: %s changed while linking it; not linked", d, key)
	}
	return nil
}

// Space reports the free and total bytes of the file system holding the
// store.
func (d *Dir) Space() (free, total int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.root, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}

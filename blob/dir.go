package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Dir is a Store in a local directory. Blobs live under DIR/blobs/KEY; a
// Put writes DIR/tmp/* while hashing, fsyncs it, renames it into place and
// fsyncs the directory, so nothing half-written is ever visible under a key.
type Dir struct {
	root string
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
	d := &Dir{root: abs}
	for _, sub := range []string{"blobs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(abs, sub), 0o750); err != nil {
			return nil, fmt.Errorf("create store directory: %w", err)
		}
	}
	tmps, err := os.ReadDir(filepath.Join(abs, "tmp"))
	if err != nil {
		return nil, err
	}
	for _, e := range tmps {
		os.Remove(filepath.Join(abs, "tmp", e.Name()))
	}
	return d, nil
}

func (d *Dir) String() string { return "file://" + d.root }

// Close does nothing; a directory store holds no resources.
func (d *Dir) Close() error { return nil }

func (d *Dir) path(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, "blobs", filepath.FromSlash(key)), nil
}

// Put implements Store.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64, sum Sum) (err error) {
	final, err := d.path(key)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Join(d.root, "tmp"), "put-*")
	if err != nil {
		return fmt.Errorf("store %s: create temp file for %s: %w", d, key, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	v := newVerifier(ctx, r, size)
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(f, v, buf); err != nil {
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
	if err := d.mkdirs(filepath.Dir(final)); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), final); err != nil {
		return fmt.Errorf("store %s: rename %s into place: %w", d, key, err)
	}
	return syncDir(filepath.Dir(final))
}

// mkdirs creates dir and its missing parents, fsyncing each parent so the
// new directory entries survive a crash.
func (d *Dir) mkdirs(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir && strings.HasPrefix(parent, d.root) {
		if err := d.mkdirs(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// Open implements Store. The reader is an *os.File, so it also seeks.
func (d *Dir) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
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
	fi, err := os.Stat(p)
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
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// List implements Store.
func (d *Dir) List(ctx context.Context, fn func(Info) error) error {
	base := filepath.Join(d.root, "blobs")
	return filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return nil // removed while listing
		}
		rel, _ := filepath.Rel(base, p)
		return fn(Info{Key: filepath.ToSlash(rel), Size: fi.Size(), ModTime: fi.ModTime()})
	})
}

// Link makes a hard link to a blob at dst, so a reader can have the
// blob as a file without a copy. Blobs are immutable, so the link can
// never see them change; deleting the blob leaves the link's bytes.
func (d *Dir) Link(key, dst string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	return os.Link(p, dst)
}

package blob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// forEachStore runs the test on a directory store and on a real MinIO.
func forEachStore(t *testing.T, test func(t *testing.T, s blob.Store)) {
	t.Run("dir", func(t *testing.T) {
		s, err := blob.OpenDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		test(t, s)
	})
	t.Run("s3", func(t *testing.T) {
		m := testenv.StartMinIO(t)
		s, err := blob.NewS3(context.Background(), blob.S3Config{
			Endpoint: m.Endpoint, Bucket: "plumb-test", AccessKey: m.AccessKey, SecretKey: m.SecretKey,
		})
		if err != nil {
			t.Fatal(err)
		}
		test(t, s)
	})
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func read(t *testing.T, s blob.Store, key string) []byte {
	t.Helper()
	rc, err := s.Open(context.Background(), key)
	if err != nil {
		t.Fatalf("open %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

// failingReader returns some bytes, then an error, like a client that
// disconnects mid-upload.
type failingReader struct {
	data []byte
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, errors.New("connection reset by peer")
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// TestAcceptance checks the Store contract of the package comment.
func TestAcceptance(t *testing.T) {
	forEachStore(t, func(t *testing.T, s blob.Store) {
		ctx := context.Background()
		data := randBytes(3<<20+17, 1)
		sum := blob.Sum(sha256.Sum256(data))
		key := "pcap.sz/lax/20250505-151105-00000001.lax.pcap.sz.sha256-" + sum.String()

		// Missing keys.
		if _, err := s.Open(ctx, key); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Open of a missing key = %v, want ErrNotFound", err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Stat of a missing key = %v, want ErrNotFound", err)
		}

		// Refused puts leave nothing visible.
		for name, tc := range map[string]struct {
			r    io.Reader
			size int64
		}{
			"wrong checksum":  {bytes.NewReader(append(bytes.Clone(data[:len(data)-1]), data[len(data)-1]^1)), int64(len(data))},
			"short":           {bytes.NewReader(data[:len(data)-5]), int64(len(data))},
			"long":            {bytes.NewReader(append(bytes.Clone(data), 'x')), int64(len(data))},
			"broken upstream": {&failingReader{data: data[:1<<20]}, int64(len(data))},
		} {
			err := s.Put(ctx, key, tc.r, tc.size, sum)
			if err == nil {
				t.Fatalf("%s: Put succeeded", name)
			}
			if name != "broken upstream" && !errors.Is(err, blob.ErrMismatch) {
				t.Errorf("%s: Put = %v, want ErrMismatch", name, err)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, blob.ErrNotFound) {
				t.Fatalf("%s: after a refused Put the key is visible (%v)", name, err)
			}
		}
		ctxCancelled, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Put(ctxCancelled, key, bytes.NewReader(data), int64(len(data)), sum); err == nil {
			t.Fatal("Put with a cancelled context succeeded")
		}

		// A good put, then the same again (idempotent).
		for i := 0; i < 2; i++ {
			if err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data)), sum); err != nil {
				t.Fatalf("Put #%d: %v", i+1, err)
			}
		}
		if got := read(t, s, key); !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes, not the %d put", len(got), len(data))
		}
		if info, err := s.Stat(ctx, key); err != nil || info.Size != int64(len(data)) {
			t.Fatalf("Stat = %+v, %v", info, err)
		}

		// Empty blobs are blobs.
		empty := blob.Sum(sha256.Sum256(nil))
		if err := s.Put(ctx, "q/i/empty", bytes.NewReader(nil), 0, empty); err != nil {
			t.Fatalf("Put empty: %v", err)
		}
		if got := read(t, s, "q/i/empty"); len(got) != 0 {
			t.Fatalf("empty blob read back as %d bytes", len(got))
		}

		// Concurrent puts of different keys.
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			wg.Go(func() {
				b := randBytes(100_000+i, uint64(i)+10)
				errs <- s.Put(ctx, "q/c/"+string(rune('a'+i)), bytes.NewReader(b), int64(len(b)), sha256.Sum256(b))
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}

		var keys []string
		if err := s.List(ctx, func(i blob.Info) error { keys = append(keys, i.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		sort.Strings(keys)
		if len(keys) != 18 || keys[0] != key {
			t.Fatalf("List = %d keys (%v…), want 18 starting with %s", len(keys), keys[:min(3, len(keys))], key)
		}

		if err := s.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, key); err != nil {
			t.Fatalf("second Delete: %v", err)
		}
		if _, err := s.Open(ctx, key); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Open after Delete = %v", err)
		}

		// Keys that could escape the store are refused before any I/O.
		for _, bad := range []string{"", "../x", "a/../../x", "/abs", "a//b", "a/./b", "a\\b", "a\x00b", "a b", "a%2f..%2fb"} {
			if err := s.Put(ctx, bad, bytes.NewReader(nil), 0, empty); !errors.Is(err, blob.ErrBadKey) {
				t.Errorf("Put(%q) = %v, want ErrBadKey", bad, err)
			}
			if _, err := s.Open(ctx, bad); !errors.Is(err, blob.ErrBadKey) {
				t.Errorf("Open(%q) = %v, want ErrBadKey", bad, err)
			}
		}
	})
}

// TestDirLeavesNoTempFiles checks that refused puts clean up after
// themselves and that a crashed process's temp files are removed on open.
func TestDirLeavesNoTempFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := blob.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(1000, 3)
	s.Put(context.Background(), "q/i/k", bytes.NewReader(data[:10]), 1000, sha256.Sum256(data))
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Fatalf("refused Put left %d temp files", len(ents))
	}
	os.WriteFile(filepath.Join(dir, "tmp", "put-crashed"), data, 0o644)
	if _, err := blob.OpenDir(dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Fatalf("open left %d temp files of a crashed process", len(ents))
	}
}

func TestOpenURL(t *testing.T) {
	dir := t.TempDir()
	for _, u := range []string{dir, "file://" + dir} {
		s, err := blob.Open(context.Background(), u)
		if err != nil || !strings.HasPrefix(s.String(), "file://") {
			t.Errorf("Open(%q) = %v, %v", u, s, err)
		}
	}
	// file://plumb-data/blobs (a relative data directory made into a URL
	// by concatenation) named the host "plumb-data" and the store /blobs.
	for _, u := range []string{"ftp://x", "s3://bucket", "s3://?endpoint=x:1", "file://plumb-data/blobs"} {
		if _, err := blob.Open(context.Background(), u); err == nil {
			t.Errorf("Open(%q) succeeded", u)
		}
	}
}

// TestClaim: a store claimed by one server is refused to another (whose
// fsck would delete the first one's blobs as orphans) unless forced, and
// the owner's record is no blob: listing, draining and fsck never see it.
func TestClaim(t *testing.T) {
	forEachStore(t, func(t *testing.T, s blob.Store) {
		ctx := context.Background()
		if err := blob.Claim(ctx, s, "server-a", false); err != nil {
			t.Fatal(err)
		}
		if err := blob.Claim(ctx, s, "server-a", false); err != nil {
			t.Fatalf("the owner's claim again: %v", err)
		}
		err := blob.Claim(ctx, s, "server-b", false)
		if !errors.Is(err, blob.ErrOwned) || !strings.Contains(err.Error(), "server-a") || !strings.Contains(err.Error(), "--claim-store") {
			t.Fatalf("another server's claim = %v", err)
		}
		n := 0
		s.List(ctx, func(i blob.Info) error { n++; t.Errorf("listed %s", i.Key); return nil })
		if n != 0 {
			t.Fatalf("an empty claimed store lists %d blobs", n)
		}
		if err := blob.Claim(ctx, s, "server-b", true); err != nil {
			t.Fatal(err)
		}
		if owner, err := blob.Owner(ctx, s); owner != "server-b" || err != nil {
			t.Fatalf("owner after a forced claim = %q, %v", owner, err)
		}
	})
}

// TestDirRefusesPlantedSymlinks: links planted in a store directory, to a
// directory or a file outside it, never lead a write, read, stat, delete
// or hard link out of the store.
func TestDirRefusesPlantedSymlinks(t *testing.T) {
	ctx := context.Background()
	dir, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("not plumb's"), 0o644)
	s, err := blob.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A queue directory that points outside, and a blob that does.
	if err := os.Symlink(outside, filepath.Join(dir, "blobs", "pcap.sz")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "blobs", "dns.arrow", "lax"), 0o750)
	if err := os.Symlink(secret, filepath.Join(dir, "blobs", "dns.arrow", "lax", "x")); err != nil {
		t.Fatal(err)
	}
	data := []byte("block bytes")
	sum := blob.Sum(sha256.Sum256(data))
	if err := s.Put(ctx, "pcap.sz/lax/x", bytes.NewReader(data), int64(len(data)), sum); err == nil {
		t.Error("Put wrote through a link that leaves the store")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("the directory outside the store now holds %d entries", len(ents))
	}
	if r, err := s.Open(ctx, "dns.arrow/lax/x"); err == nil {
		got, _ := io.ReadAll(r)
		r.Close()
		t.Errorf("Open followed a link out of the store and read %q", got)
	}
	if _, err := s.Stat(ctx, "pcap.sz/lax/secret"); err == nil {
		t.Error("Stat followed a link out of the store")
	}
	if err := s.Link("dns.arrow/lax/x", filepath.Join(t.TempDir(), "l")); err == nil {
		t.Error("Link followed a link out of the store")
	}
	s.Delete(ctx, "pcap.sz/secret")
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("Delete removed a file outside the store: %v", err)
	}
	for _, key := range []string{"../x", "a/../../x", "/etc/passwd", "a/%2e%2e/x", "a\x00b", "a//b"} {
		if err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data)), sum); !errors.Is(err, blob.ErrBadKey) {
			t.Errorf("Put(%q) = %v; want ErrBadKey", key, err)
		}
	}
}

// TestLakeKeys: a *.parquet queue's blocks go under Hive partitions by
// UTC date and site, ending in .parquet, where query engines find them;
// other queues keep their layout; both read back to name and checksum.
func TestLakeKeys(t *testing.T) {
	sum := sha256.Sum256([]byte("x"))
	for _, c := range []struct{ name, want string }{
		{"20250505-235959-00000007.lax.dns.parquet",
			"dns.parquet/date=2025-05-05/site=lax/20250505-235959-00000007.lax.dns.parquet.sha256-" + hex.EncodeToString(sum[:]) + ".parquet"},
		{"20250505-235959-00000007-x.lax.pcap.sz",
			"pcap.sz/lax/20250505-235959-00000007-x.lax.pcap.sz.sha256-" + hex.EncodeToString(sum[:])},
	} {
		n, err := block.Parse(c.name)
		if err != nil {
			t.Fatal(err)
		}
		key := blob.BlockKey(n, sum)
		if key != c.want {
			t.Errorf("BlockKey(%s) = %s, want %s", c.name, key, c.want)
		}
		if err := blob.CheckKey(key); err != nil {
			t.Errorf("%s: %v", key, err)
		}
		name, got, err := blob.ParseBlockKey(key)
		if err != nil || name != c.name || got != sum {
			t.Errorf("ParseBlockKey(%s) = %s %x %v", key, name, got, err)
		}
	}
	if _, _, err := blob.ParseBlockKey("dns.parquet/date=2025-05-05/site=lax/x.parquet"); err == nil {
		t.Error("a key without a checksum parsed")
	}
}

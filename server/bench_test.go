package server

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/plumb-dev/plumb/client"
)

// BenchmarkPutGet moves 64 MiB blocks through an in-process server; run
// with -cpuprofile to see where a byte's time goes. `make bench` gives the
// figures against baselines.
func BenchmarkPutGet(b *testing.B) {
	data := randBytes(64<<20, 9)
	src := filepath.Join(b.TempDir(), "src")
	os.WriteFile(src, data, 0o644)
	srcInfo := bytesSource("", data)
	ts := startServerB(b)
	ctx := context.Background()
	if _, err := ts.c.Put(ctx, bytesSource(name(1), data)); err != nil {
		b.Fatal(err)
	}
	b.Run("put", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := range b.N {
			s := client.Source{Name: name(i + 2), Size: int64(len(data)), SHA256: srcInfo.SHA256,
				Open: func() (io.ReadCloser, error) { return os.Open(src) }}
			if _, err := ts.c.Put(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for range b.N {
			s, err := ts.c.Get(ctx, name(1))
			if err != nil {
				b.Fatal(err)
			}
			if !s.Next() {
				b.Fatal(s.Err())
			}
			if _, err := io.Copy(io.Discard, s); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
}

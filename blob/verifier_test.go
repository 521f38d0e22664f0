package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
)

// TestLongSourceNeverCompletes: a source longer than its declared size
// fails before the declared bytes are all handed over, so an S3 server,
// which commits an object once its body is whole, never gets a whole
// body from it; a source of exactly the size ends as it should.
func TestLongSourceNeverCompletes(t *testing.T) {
	data := bytes.Repeat([]byte("plumb"), 1000)
	v := newVerifier(context.Background(), bytes.NewReader(append(bytes.Clone(data), 'x')), int64(len(data)))
	got, err := io.ReadAll(v)
	if !errors.Is(err, ErrMismatch) || len(got) >= len(data) {
		t.Fatalf("a source one byte long handed over %d of %d bytes, then %v", len(got), len(data), err)
	}
	v = newVerifier(context.Background(), bytes.NewReader(data), int64(len(data)))
	if got, err := io.ReadAll(v); err != nil || !bytes.Equal(got, data) || v.check(sha256.Sum256(data)) != nil {
		t.Fatalf("a source of exactly the size: %d bytes, %v", len(got), err)
	}
}

package program

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"os"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/stage"
)

// HashFile is a run's output being written: a scratch file, and the
// SHA-256 and size of what was written to it. The server and workers on
// other machines write their outputs the same way.
type HashFile struct {
	F *os.File
	N int64 // bytes written
	// Limit, when positive, fails a write that would pass it: the output
	// of one run may not take the disk (a 99 KB zstd block decoded to
	// 3 GiB).
	Limit int64
	Over  bool // a write was refused for the limit
	h     hash.Hash
}

// ErrOutputLimit marks a run whose output grew past its limit: its
// input is set aside as malformed, since running it again writes as much.
var ErrOutputLimit = fmt.Errorf("%w: output over its limit", stage.ErrMalformed)

// NewHashFile hashes what is written to f.
func NewHashFile(f *os.File) *HashFile { return &HashFile{F: f, h: sha256.New()} }

func (h *HashFile) Write(p []byte) (int, error) {
	if h.Limit > 0 && h.N+int64(len(p)) > h.Limit {
		h.Over = true
		return 0, fmt.Errorf("%w: the run's output passed %d bytes", ErrOutputLimit, h.Limit)
	}
	n, err := h.F.Write(p)
	h.h.Write(p[:n])
	h.N += int64(n)
	return n, err
}

// Sum is the SHA-256 of what was written.
func (h *HashFile) Sum() blob.Sum {
	var sum blob.Sum
	copy(sum[:], h.h.Sum(nil))
	return sum
}

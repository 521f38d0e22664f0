package arrowcol

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Recycler is a memory.Allocator that keeps what is freed for the next
// allocation of its size class. An IPC writer compressing its batches
// allocates every compressed buffer anew (room for the worst case, more
// than the data) and frees it once written; with Go's allocator, which
// ignores Free, that was more bytes allocated than the records read.
// Recycling saved about 5% of plumb dns's CPU and 15% of its resident
// memory on real signed traffic (three alternated runs). Give each
// writer its own Recycler: what it keeps goes when the writer does. It
// is safe for concurrent use, as compressing goroutines need.
type Recycler struct {
	mu   sync.Mutex
	free [maxClass + 1][][]byte
	kept int // bytes in free
}

// Sizes are rounded up to a power of two of at least 2^minClass bytes;
// above 2^maxClass they are neither rounded nor kept.
const (
	minClass  = 12
	maxClass  = 27
	keptBytes = 64 << 20 // the most a Recycler keeps
	alignment = 64       // as arrow's allocators align buffers
)

// NewRecycler returns an empty Recycler.
func NewRecycler() *Recycler { return new(Recycler) }

var _ memory.Allocator = (*Recycler)(nil)

func class(size int) int { return max(bits.Len(uint(size-1)), minClass) }

// Allocate returns size zeroed bytes, as arrow's writers expect (they
// leave padding and unset validity bits as they found them).
func (r *Recycler) Allocate(size int) []byte {
	c := class(size)
	if c > maxClass {
		return aligned(size, size)
	}
	r.mu.Lock()
	if n := len(r.free[c]); n > 0 {
		b := r.free[c][n-1]
		r.free[c] = r.free[c][:n-1]
		r.kept -= cap(b)
		r.mu.Unlock()
		b = b[:size]
		clear(b)
		return b
	}
	r.mu.Unlock()
	return aligned(size, 1<<c)
}

// aligned returns size bytes of a new array of room bytes starting at a
// 64-byte boundary.
func aligned(size, room int) []byte {
	buf := make([]byte, room+alignment)
	shift := int(-uintptr(unsafe.Pointer(unsafe.SliceData(buf))) & (alignment - 1))
	return buf[shift : shift+size : shift+room]
}

// Reallocate returns b resized to size, its bytes kept.
func (r *Recycler) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size]
	}
	n := r.Allocate(size)
	copy(n, b)
	r.Free(b)
	return n
}

// Free keeps b for a later Allocate of its class, up to keptBytes.
func (r *Recycler) Free(b []byte) {
	c := bits.Len(uint(cap(b))) - 1
	if c < minClass || c > maxClass || cap(b) != 1<<c {
		return // not one of ours, or too big to keep
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kept+cap(b) > keptBytes {
		return
	}
	r.kept += cap(b)
	r.free[c] = append(r.free[c], b[:0])
}

// Package ipcguard checks Arrow IPC bytes from outside (uploads, stored
// blocks) before arrow-go reads them, and bounds what reading them may
// allocate. arrow-go trusts the lengths a message states: a schema
// claiming 2^32 fields or a ZSTD buffer claiming 1 GiB is allocated as
// claimed.
package ipcguard

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	fb "github.com/google/flatbuffers/go"
)

// Arrow IPC message header types (format/Message.fbs).
const (
	Schema          byte = 1
	DictionaryBatch byte = 2
	RecordBatch     byte = 3
)

// maxHeader bounds a message header; real ones are hundreds of bytes.
const maxHeader = 256 << 10

// CheckHeader checks an Arrow IPC message header from a client before
// arrow-go reads it: arrow-go sizes slices by the vector lengths a header
// states without checking them against the header's bytes, so a 200-byte
// schema claiming 2^32 fields made the server allocate 94 GB and die (not
// a panic: a fatal out-of-memory). Every vector must fit in the header,
// nesting is bounded, and only the types a stream may hold are taken.
func CheckHeader(buf []byte, allowed ...byte) (err error) {
	defer func() {
		// The flatbuffers accessors index without checks: an offset out of
		// the buffer is malformed input, not a server fault.
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed Arrow IPC message header: %v", p)
		}
	}()
	if len(buf) < 8 || len(buf) > maxHeader {
		return fmt.Errorf("Arrow IPC message header of %d bytes", len(buf))
	}
	c := &fbCheck{buf: buf}
	msg := c.root()
	typ := msg.GetByteSlot(6, 0)
	okType := false
	for _, a := range allowed {
		okType = okType || typ == a
	}
	if !okType {
		return fmt.Errorf("Arrow IPC message of type %d where %v are allowed", typ, allowed)
	}
	c.vector(msg, 12, 4) // custom_metadata
	h, ok := c.table(msg, 8)
	if !ok {
		return fmt.Errorf("Arrow IPC message without a header")
	}
	switch typ {
	case Schema:
		c.vector(h, 8, 4)  // custom_metadata
		c.vector(h, 10, 8) // features
		c.fields(h, 6, 0)
	case RecordBatch:
		c.batch(h)
	case DictionaryBatch:
		if b, ok := c.table(h, 6); ok {
			c.batch(b)
		}
	}
	return c.err
}

type fbCheck struct {
	buf []byte
	err error
}

func (c *fbCheck) root() *fb.Table {
	return &fb.Table{Bytes: c.buf, Pos: fb.GetUOffsetT(c.buf)}
}

// vector checks that the vector in slot holds n elements of size bytes
// inside the buffer, and returns n.
func (c *fbCheck) vector(t *fb.Table, slot fb.VOffsetT, size int) int {
	o := fb.UOffsetT(t.Offset(slot))
	if o == 0 {
		return 0
	}
	start, n := int(t.Vector(o)), t.VectorLen(o)
	if n < 0 || start < 0 || start+n*size > len(c.buf) {
		if c.err == nil {
			c.err = fmt.Errorf("Arrow IPC message header: a vector of %d elements does not fit in its %d bytes", n, len(c.buf))
		}
		return 0
	}
	return n
}

func (c *fbCheck) table(t *fb.Table, slot fb.VOffsetT) (*fb.Table, bool) {
	o := fb.UOffsetT(t.Offset(slot))
	if o == 0 {
		return nil, false
	}
	return &fb.Table{Bytes: c.buf, Pos: t.Indirect(o + t.Pos)}, true
}

// fields checks a vector of Field tables and their children.
func (c *fbCheck) fields(t *fb.Table, slot fb.VOffsetT, depth int) {
	if depth > 32 {
		c.err = fmt.Errorf("Arrow IPC schema nested deeper than 32")
		return
	}
	n := c.vector(t, slot, 4)
	o := fb.UOffsetT(t.Offset(slot))
	for i := 0; i < n && c.err == nil; i++ {
		pos := t.Vector(o) + fb.UOffsetT(i*4)
		f := &fb.Table{Bytes: c.buf, Pos: t.Indirect(pos)}
		if so := fb.UOffsetT(f.Offset(4)); so != 0 { // name
			if start, n := int(f.Vector(so)), f.VectorLen(so); start+n > len(c.buf) {
				c.err = fmt.Errorf("Arrow IPC schema: a field name does not fit in the header")
			}
		}
		c.vector(f, 16, 4) // custom_metadata
		c.fields(f, 14, depth+1)
	}
}

// batch checks a RecordBatch table: its nodes and buffers (16-byte
// structs) and variadic counts fit.
func (c *fbCheck) batch(t *fb.Table) {
	c.vector(t, 6, 16)
	c.vector(t, 8, 16)
	c.vector(t, 12, 8)
}

// CheckFile checks an Arrow IPC file's footer (where arrow-go's file
// reader takes the schema and the batches' places) as checkIPCHeader
// checks a message header: a stored block is a client's upload too.
func CheckFile(data []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed Arrow IPC file footer: %v", p)
		}
	}()
	const magic = "ARROW1"
	if len(data) < 2*len(magic)+4 || string(data[:len(magic)]) != magic || string(data[len(data)-len(magic):]) != magic {
		return fmt.Errorf("not an Arrow IPC file")
	}
	end := len(data) - len(magic) - 4
	n := int(int32(uint32(data[end]) | uint32(data[end+1])<<8 | uint32(data[end+2])<<16 | uint32(data[end+3])<<24))
	if n <= 0 || n > end-8 {
		return fmt.Errorf("Arrow IPC file footer of %d bytes", n)
	}
	c := &fbCheck{buf: data[end-n : end]}
	footer := c.root()
	c.vector(footer, 8, 24)  // dictionaries
	c.vector(footer, 10, 24) // record batches
	c.vector(footer, 12, 4)  // custom_metadata
	schema, ok := c.table(footer, 6)
	if !ok {
		return fmt.Errorf("Arrow IPC file without a schema")
	}
	c.vector(schema, 8, 4)
	c.vector(schema, 10, 8)
	c.fields(schema, 6, 0)
	return c.err
}

// Budget is an arrow allocator that refuses to hand out more than most
// bytes at once: buffers sized by a file's own word (a ZSTD buffer's
// uncompressed length: a 33 KB file claimed 1 GiB) stop there. Allocate
// cannot fail, so it panics with ErrOverBudget; arrow-go's batch loader
// turns the panic into an error, and readers outside it use Under.
type Budget struct {
	most int64
	used atomic.Int64
}

// ErrOverBudget is what a Budget refuses with.
var ErrOverBudget = errors.New("the Arrow data decompresses to more than a reader may hold at once")

// NewBudget returns an allocator that holds at most most bytes at once.
func NewBudget(most int64) *Budget { return &Budget{most: most} }

func (b *Budget) Allocate(size int) []byte {
	if b.used.Add(int64(size)) > b.most {
		b.used.Add(-int64(size))
		panic(fmt.Errorf("%w (%d MiB)", ErrOverBudget, b.most>>20))
	}
	return memory.DefaultAllocator.Allocate(size)
}

func (b *Budget) Reallocate(size int, old []byte) []byte {
	if b.used.Add(int64(size-len(old))) > b.most {
		b.used.Add(-int64(size - len(old)))
		panic(fmt.Errorf("%w (%d MiB)", ErrOverBudget, b.most>>20))
	}
	return memory.DefaultAllocator.Reallocate(size, old)
}

func (b *Budget) Free(p []byte) {
	b.used.Add(-int64(len(p)))
	memory.DefaultAllocator.Free(p)
}

// Under runs fn, which reads Arrow data with arrow-go, turning the
// Budget's panic into ErrOverBudget and any other panic into an error:
// arrow-go's flatbuffer accessors index without bounds checks, so a
// damaged table in a header CheckHeader or CheckFile passed (a key-value
// pair pointing outside the buffer) panics; its own batch loader recovers
// such panics the same way. What no recovery can catch, allocations sized
// by a stated length, the checks above keep out.
func Under(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if e, ok := p.(error); ok && errors.Is(e, ErrOverBudget) {
				err = e
				return
			}
			err = fmt.Errorf("malformed Arrow data: %v", p)
		}
	}()
	return fn()
}

// OpenFile opens an Arrow IPC file from anyone: its footer checked
// (CheckFile), the reader made under Under, and its batches decompressed
// through a Budget of most bytes. Close the reader when done.
func OpenFile(data []byte, most int64) (*ipc.FileReader, error) {
	if err := CheckFile(data); err != nil {
		return nil, err
	}
	var f *ipc.FileReader
	err := Under(func() (err error) {
		f, err = ipc.NewFileReader(bytes.NewReader(data), ipc.WithAllocator(NewBudget(most)))
		return err
	})
	return f, err
}

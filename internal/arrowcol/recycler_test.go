package arrowcol_test

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/plumb-dev/plumb/internal/arrowcol"
)

// A compressed IPC file written through a Recycler is byte for byte the
// one Go's allocator writes, batch after batch, though the later batches
// are compressed into memory the earlier ones freed.
func TestRecyclerWritesTheSameFile(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "qname", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "count", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
	}, nil)
	write := func(mem memory.Allocator) []byte {
		var out bytes.Buffer
		w, err := ipc.NewFileWriter(&out, ipc.WithSchema(schema), ipc.WithZstd(), ipc.WithCompressConcurrency(2), ipc.WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		var names arrowcol.Strs
		var counts arrowcol.Vals[uint32]
		// Batches of falling size: each is compressed into buffers the
		// larger one before it freed, whose bytes are still there.
		for b := 8; b > 0; b-- {
			names.Reset()
			counts.Reset()
			rows := b * 3000
			for i := range rows {
				if i%7 == 0 {
					names.Null()
				} else {
					names.Add(fmt.Sprintf("host-%d-%d.example.com", i*b, i%13))
				}
				counts.AddValid(uint32(i*b), i%5 != 0)
			}
			rec := arrowcol.Record(schema, rows, names.Data(arrow.BinaryTypes.String), arrowcol.Uint32(&counts))
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	want, got := write(memory.NewGoAllocator()), write(arrowcol.NewRecycler())
	if !bytes.Equal(got, want) {
		t.Fatalf("the file written through a Recycler (%d bytes) differs from Go's allocator's (%d bytes)", len(got), len(want))
	}
}

func TestRecyclerReusesFreedMemory(t *testing.T) {
	r := arrowcol.NewRecycler()
	a := r.Allocate(5000)
	if len(a) != 5000 || uintptr(unsafe.Pointer(unsafe.SliceData(a)))%64 != 0 {
		t.Fatalf("Allocate(5000) gave %d bytes at %p; want 5000 at a 64-byte boundary", len(a), unsafe.SliceData(a))
	}
	for i := range a {
		a[i] = 0xff
	}
	a = r.Reallocate(6000, a) // within its class: the same memory
	if a[4999] != 0xff {
		t.Fatal("Reallocate lost the bytes")
	}
	r.Free(a)
	b := r.Allocate(7000)
	if unsafe.SliceData(b) != unsafe.SliceData(a) {
		t.Fatal("an Allocate of the class just freed got new memory")
	}
	if bytes.ContainsFunc(b, func(c rune) bool { return c != 0 }) {
		t.Fatal("recycled memory was not zeroed")
	}
	c := r.Reallocate(100000, b) // beyond its class: copied, b kept
	if len(c) != 100000 || unsafe.SliceData(c) == unsafe.SliceData(b) {
		t.Fatal("Reallocate beyond the class did not move")
	}
	if d := r.Allocate(8000); unsafe.SliceData(d) != unsafe.SliceData(b) {
		t.Fatal("Reallocate did not free what it moved from")
	}
	r.Free(make([]byte, 5000)) // not one of its own: ignored
}

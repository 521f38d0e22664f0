package dnsrec

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The column buffers below hold a batch's values in the layout Arrow
// keeps them in (values, offsets, bitmaps), as plain Go slices that
// become the batch's buffers without a copy. They replace arrow-go's
// builders, whose per-value calls (a reserve, a validity bit, a length
// check) cost more than the values, and whose buffers were allocated and
// zeroed anew for every batch: a Writer reuses its buffers from batch to
// batch.

// bits is a bitmap: a boolean column's values, or a column's validity.
type bits struct {
	b     []byte
	n     int
	unset int
}

func (x *bits) add(v bool) {
	if x.n%8 == 0 {
		x.b = append(x.b, 0)
	}
	if v {
		x.b[x.n/8] |= 1 << (x.n % 8)
	} else {
		x.unset++
	}
	x.n++
}

func (x *bits) reset() { x.b, x.n, x.unset = x.b[:0], 0, 0 }

// valid notes the validity of row i of a column. The bitmap is kept from
// the first null on (the rows before it valid): most columns have none.
func (x *bits) valid(i int, ok bool) {
	if x.n == 0 {
		if ok {
			return
		}
		for range i {
			x.add(true)
		}
	}
	x.add(ok)
}

// buffer is the bitmap as an Arrow buffer; nil when it was never added
// to (a validity bitmap not kept: no nulls).
func (x *bits) buffer() *memory.Buffer {
	if x.n == 0 {
		return nil
	}
	return memory.NewBufferBytes(x.b)
}

// data is a boolean column's array data.
func (x *bits) data() arrow.ArrayData {
	return array.NewData(arrow.FixedWidthTypes.Boolean, x.n, []*memory.Buffer{nil, x.buffer()}, nil, 0, 0)
}

// vals is a column of fixed-width values, and their validity.
type vals[T uint8 | uint16 | uint32 | uint64 | arrow.Timestamp] struct {
	v     []T
	valid bits
}

func (c *vals[T]) add(v T) { c.v = append(c.v, v) }

// addValid adds a value that is null unless ok (the value is stored
// either way: Arrow keeps a slot under a null).
func (c *vals[T]) addValid(v T, ok bool) {
	c.valid.valid(len(c.v), ok)
	c.v = append(c.v, v)
}

func (c *vals[T]) reset() { c.v = c.v[:0]; c.valid.reset() }

func (c *vals[T]) len() int { return len(c.v) }

// data is the column's array data; cast is arrow's view of the values
// as bytes (arrow.Uint16Traits.CastToBytes...).
func (c *vals[T]) data(typ arrow.DataType, cast func([]T) []byte) arrow.ArrayData {
	return array.NewData(typ, len(c.v), []*memory.Buffer{c.valid.buffer(), memory.NewBufferBytes(cast(c.v))}, nil, c.valid.unset, 0)
}

// strs is a string or binary column: offsets into data, and validity.
type strs struct {
	offsets []int32 // one per row, after a first 0
	text    []byte
	valid   bits
}

func (s *strs) add(v string) {
	s.valid.valid(s.rows(), true)
	s.text = append(s.text, v...)
	s.offsets = append(s.offsets, int32(len(s.text)))
}

func (s *strs) addBytes(v []byte) {
	s.valid.valid(s.rows(), true)
	s.text = append(s.text, v...)
	s.offsets = append(s.offsets, int32(len(s.text)))
}

func (s *strs) null() {
	s.valid.valid(s.rows(), false)
	s.offsets = append(s.offsets, int32(len(s.text)))
}

// addOrNull adds v, or a null for "".
func (s *strs) addOrNull(v string) {
	if v == "" {
		s.null()
	} else {
		s.add(v)
	}
}

func (s *strs) reset() { s.offsets, s.text = append(s.offsets[:0], 0), s.text[:0]; s.valid.reset() }

func (s *strs) rows() int { return len(s.offsets) - 1 }

// data is the column's array data, of type typ (String or Binary).
func (s *strs) data(typ arrow.DataType) arrow.ArrayData {
	return array.NewData(typ, s.rows(), []*memory.Buffer{s.valid.buffer(), memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(s.offsets)),
		memory.NewBufferBytes(s.text)}, nil, s.valid.unset, 0)
}

// listOffsets are a list column's: where each row's items start, after
// a first 0. Lists here are never null: a row without items has an empty
// list.
type listOffsets []int32

func (l *listOffsets) add(items int) { *l = append(*l, int32(items)) }

func (l *listOffsets) reset() { *l = append((*l)[:0], 0) }

// data is the list column's array data over its items (released: the
// list holds them).
func (l listOffsets) data(typ arrow.DataType, items arrow.ArrayData) arrow.ArrayData {
	defer items.Release()
	return array.NewData(typ, len(l)-1, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(l))},
		[]arrow.ArrayData{items}, 0, 0)
}

// structData is the array data of a struct column of n rows, never
// null, over its fields (released: the struct holds them).
func structData(typ arrow.DataType, n int, fields ...arrow.ArrayData) arrow.ArrayData {
	d := array.NewData(typ, n, []*memory.Buffer{nil}, fields, 0, 0)
	for _, f := range fields {
		f.Release()
	}
	return d
}

// Package arrowcol builds Arrow record batches from plain Go slices: each
// column is kept in the layout Arrow keeps it in (values, offsets,
// bitmaps) and becomes the batch's buffers without a copy.
//
// It stands in for arrow-go's builders on hot paths (the DNS writers):
// their per-value calls (a reserve, a validity bit, a length check) cost
// more than the values, and their buffers are allocated and zeroed anew
// for every batch, where these are reset and reused. A batch made from
// the columns refers to their slices: write it before resetting them.
// The zero value of every column is ready to use.
package arrowcol

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Bits is a bitmap: a boolean column's values, or a column's validity.
type Bits struct {
	b     []byte
	n     int
	unset int
}

// Add appends a bit.
func (x *Bits) Add(v bool) {
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

// Reset empties the bitmap, keeping its memory.
func (x *Bits) Reset() { x.b, x.n, x.unset = x.b[:0], 0, 0 }

// Len is how many bits were added.
func (x *Bits) Len() int { return x.n }

// Valid notes the validity of row i of a column. The bitmap is kept from
// the first null on (the rows before it valid): most columns have none.
func (x *Bits) Valid(i int, ok bool) {
	if x.n == 0 {
		if ok {
			return
		}
		for range i {
			x.Add(true)
		}
	}
	x.Add(ok)
}

// Buffer is the bitmap as an Arrow buffer; nil when nothing was added (a
// validity bitmap not kept: no nulls).
func (x *Bits) Buffer() *memory.Buffer {
	if x.n == 0 {
		return nil
	}
	return memory.NewBufferBytes(x.b)
}

// Data is the array data of a boolean column of these bits.
func (x *Bits) Data() arrow.ArrayData {
	return array.NewData(arrow.FixedWidthTypes.Boolean, x.n, []*memory.Buffer{nil, x.Buffer()}, nil, 0, 0)
}

// Bools is a boolean column that may hold nulls.
type Bools struct {
	v, valid Bits
}

// Add appends a value.
func (b *Bools) Add(v bool) { b.AddValid(v, true) }

// AddValid appends a value that is null unless ok.
func (b *Bools) AddValid(v, ok bool) {
	b.valid.Valid(b.v.n, ok)
	b.v.Add(v && ok)
}

// Null appends a null.
func (b *Bools) Null() { b.AddValid(false, false) }

// Reset empties the column, keeping its memory.
func (b *Bools) Reset() { b.v.Reset(); b.valid.Reset() }

// Data is the column's array data.
func (b *Bools) Data() arrow.ArrayData {
	return array.NewData(arrow.FixedWidthTypes.Boolean, b.v.n, []*memory.Buffer{b.valid.Buffer(), b.v.Buffer()}, nil, b.valid.unset, 0)
}

// Vals is a column of fixed-width values, and their validity.
type Vals[T uint8 | uint16 | uint32 | uint64 | arrow.Timestamp | arrow.Duration] struct {
	v     []T
	valid Bits
}

// Add appends a value.
func (c *Vals[T]) Add(v T) {
	c.valid.Valid(len(c.v), true)
	c.v = append(c.v, v)
}

// AddValid appends a value that is null unless ok (the value is stored
// either way: Arrow keeps a slot under a null).
func (c *Vals[T]) AddValid(v T, ok bool) {
	c.valid.Valid(len(c.v), ok)
	c.v = append(c.v, v)
}

// Reset empties the column, keeping its memory.
func (c *Vals[T]) Reset() { c.v = c.v[:0]; c.valid.Reset() }

// Len is the number of values.
func (c *Vals[T]) Len() int { return len(c.v) }

// Data is the column's array data of type typ; cast is arrow's view of
// the values as bytes (arrow.Uint16Traits.CastToBytes...).
func (c *Vals[T]) Data(typ arrow.DataType, cast func([]T) []byte) arrow.ArrayData {
	return array.NewData(typ, len(c.v), []*memory.Buffer{c.valid.Buffer(), memory.NewBufferBytes(cast(c.v))}, nil, c.valid.unset, 0)
}

// Uint8 is the array data of a uint8 column.
func Uint8(c *Vals[uint8]) arrow.ArrayData {
	return c.Data(arrow.PrimitiveTypes.Uint8, arrow.Uint8Traits.CastToBytes)
}

// Uint16 is the array data of a uint16 column.
func Uint16(c *Vals[uint16]) arrow.ArrayData {
	return c.Data(arrow.PrimitiveTypes.Uint16, arrow.Uint16Traits.CastToBytes)
}

// Uint32 is the array data of a uint32 column.
func Uint32(c *Vals[uint32]) arrow.ArrayData {
	return c.Data(arrow.PrimitiveTypes.Uint32, arrow.Uint32Traits.CastToBytes)
}

// Uint64 is the array data of a uint64 column.
func Uint64(c *Vals[uint64]) arrow.ArrayData {
	return c.Data(arrow.PrimitiveTypes.Uint64, arrow.Uint64Traits.CastToBytes)
}

// Strs is a string or binary column: its bytes, where each value ends,
// and validity.
type Strs struct {
	offsets []int32 // one per row, after a first 0
	text    []byte
	valid   Bits
}

func (s *Strs) start() {
	if len(s.offsets) == 0 {
		s.offsets = append(s.offsets, 0)
	}
}

// Add appends a value.
func (s *Strs) Add(v string) {
	s.start()
	s.valid.Valid(s.Rows(), true)
	s.text = append(s.text, v...)
	s.offsets = append(s.offsets, int32(len(s.text)))
}

// AddBytes appends a value.
func (s *Strs) AddBytes(v []byte) {
	s.start()
	s.valid.Valid(s.Rows(), true)
	s.text = append(s.text, v...)
	s.offsets = append(s.offsets, int32(len(s.text)))
}

// Null appends a null.
func (s *Strs) Null() {
	s.start()
	s.valid.Valid(s.Rows(), false)
	s.offsets = append(s.offsets, int32(len(s.text)))
}

// AddOrNull appends v, or a null for "".
func (s *Strs) AddOrNull(v string) {
	if v == "" {
		s.Null()
	} else {
		s.Add(v)
	}
}

// Reset empties the column, keeping its memory.
func (s *Strs) Reset() { s.offsets, s.text = s.offsets[:0], s.text[:0]; s.valid.Reset() }

// Bytes is the size of the values' text.
func (s *Strs) Bytes() int { return len(s.text) }

// Rows is the number of values.
func (s *Strs) Rows() int { return max(len(s.offsets)-1, 0) }

// Data is the column's array data, of type typ (String or Binary).
func (s *Strs) Data(typ arrow.DataType) arrow.ArrayData {
	s.start()
	return array.NewData(typ, s.Rows(), []*memory.Buffer{s.valid.Buffer(), memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(s.offsets)),
		memory.NewBufferBytes(s.text)}, nil, s.valid.unset, 0)
}

// ListOffsets are a list column's: where each row's items end, after a
// first 0. A row without items has an empty list; DataValid adds nulls.
type ListOffsets []int32

// Add ends a row at items, the number of items of all rows so far.
func (l *ListOffsets) Add(items int) {
	if len(*l) == 0 {
		*l = append(*l, 0)
	}
	*l = append(*l, int32(items))
}

// Reset empties the column, keeping its memory.
func (l *ListOffsets) Reset() { *l = (*l)[:0] }

// Data is the list column's array data over its items, which it takes
// (the list holds them; the caller's reference is released).
func (l *ListOffsets) Data(typ arrow.DataType, items arrow.ArrayData) arrow.ArrayData {
	return l.DataValid(typ, items, nil)
}

// DataValid is Data with the rows' validity (nil: none is null).
func (l *ListOffsets) DataValid(typ arrow.DataType, items arrow.ArrayData, valid *Bits) arrow.ArrayData {
	defer items.Release()
	if len(*l) == 0 {
		*l = append(*l, 0)
	}
	var vb *memory.Buffer
	nulls := 0
	if valid != nil {
		vb, nulls = valid.Buffer(), valid.unset
	}
	return array.NewData(typ, len(*l)-1, []*memory.Buffer{vb, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(*l))},
		[]arrow.ArrayData{items}, nulls, 0)
}

// StructData is the array data of a struct column of n rows, never
// null, over its fields, which it takes.
func StructData(typ arrow.DataType, n int, fields ...arrow.ArrayData) arrow.ArrayData {
	d := array.NewData(typ, n, []*memory.Buffer{nil}, fields, 0, 0)
	for _, f := range fields {
		f.Release()
	}
	return d
}

// DictData is the array data of a dictionary column: each row's index
// into dict, which the data retains.
func DictData(typ *arrow.DictionaryType, indices []int8, dict arrow.Array) arrow.ArrayData {
	d := array.NewData(typ, len(indices), []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int8Traits.CastToBytes(indices))}, nil, 0, 0)
	d.SetDictionary(dict.Data())
	return d
}

// Record makes a record batch of schema over the columns' data, which
// it takes.
func Record(schema *arrow.Schema, rows int, cols ...arrow.ArrayData) arrow.RecordBatch {
	arrays := make([]arrow.Array, len(cols))
	for i, d := range cols {
		arrays[i] = array.MakeFromData(d)
		d.Release()
	}
	rec := array.NewRecordBatch(schema, arrays, int64(rows))
	for _, a := range arrays {
		a.Release()
	}
	return rec
}

// Strings is an array of vals, for a dictionary of fixed values.
func Strings(vals ...string) arrow.Array {
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	defer sb.Release()
	sb.AppendValues(vals, nil)
	return sb.NewArray()
}

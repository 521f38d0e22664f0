package arrowcol_test

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/plumb-dev/plumb/internal/arrowcol"
)

// A batch of two columns, a name that may be null and a count, built a
// row at a time and made a record batch without copying the values.
func Example() {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "qname", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "count", Type: arrow.PrimitiveTypes.Uint32},
	}, nil)
	var names arrowcol.Strs
	var counts arrowcol.Vals[uint32]
	for i, name := range []string{"example.com", "", "example.net"} {
		names.AddOrNull(name)
		counts.Add(uint32(i * 10))
	}
	rec := arrowcol.Record(schema, 3, names.Data(arrow.BinaryTypes.String),
		counts.Data(arrow.PrimitiveTypes.Uint32, arrow.Uint32Traits.CastToBytes))
	defer rec.Release()
	for i := range int(rec.NumRows()) {
		fmt.Println(rec.Column(0).ValueStr(i), rec.Column(1).ValueStr(i))
	}
	// Output:
	// example.com 0
	// (null) 10
	// example.net 20
}

// A column may mix values added with and without their validity: a null
// keeps the bitmap from there on, and later values are valid in it.
func ExampleVals_AddValid() {
	schema := arrow.NewSchema([]arrow.Field{{Name: "size", Type: arrow.PrimitiveTypes.Uint32, Nullable: true}}, nil)
	var sizes arrowcol.Vals[uint32]
	sizes.Add(60)
	sizes.AddValid(0, false)
	sizes.Add(512)
	rec := arrowcol.Record(schema, 3, sizes.Data(arrow.PrimitiveTypes.Uint32, arrow.Uint32Traits.CastToBytes))
	defer rec.Release()
	fmt.Println(rec.Column(0))
	// Output: [60 (null) 512]
}

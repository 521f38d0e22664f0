package enrich

import (
	"errors"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// AddressColumns are the columns enriched where a table has them: DNS
// records' src and dst, transactions' client and server.
var AddressColumns = []string{"src", "dst", "client", "server"}

// The columns added for an address column X, in this order, and last
// EnrichedBy.
const (
	SuffixCountry  = "_country"  // string: ISO 3166-1 alpha-2 country
	SuffixASN      = "_asn"      // uint32: autonomous system number
	SuffixASOrg    = "_as_org"   // string: the system's organisation
	SuffixResolver = "_resolver" // string: the public resolver it serves
	EnrichedBy     = "enriched_by"
)

// Schema is the schema of in's tables enriched: in's fields, then four
// for each address column it has, then EnrichedBy. A table without an
// address column, or enriched already, is refused.
func Schema(in *arrow.Schema) (*arrow.Schema, []int, error) {
	if in.HasField(EnrichedBy) {
		return nil, nil, fmt.Errorf("the table is enriched already (it has %s)", EnrichedBy)
	}
	fields := slices.Clone(in.Fields())
	var cols []int
	for _, name := range AddressColumns {
		idx := in.FieldIndices(name)
		if len(idx) == 0 {
			continue
		}
		if !arrow.TypeEqual(in.Field(idx[0]).Type, arrow.BinaryTypes.String) {
			return nil, nil, fmt.Errorf("column %s is %s, not an address as a string", name, in.Field(idx[0]).Type)
		}
		cols = append(cols, idx[0])
		fields = append(fields,
			arrow.Field{Name: name + SuffixCountry, Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: name + SuffixASN, Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
			arrow.Field{Name: name + SuffixASOrg, Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: name + SuffixResolver, Type: arrow.BinaryTypes.String, Nullable: true})
	}
	if len(cols) == 0 {
		return nil, nil, fmt.Errorf("the table has none of the address columns %v", AddressColumns)
	}
	fields = append(fields, arrow.Field{Name: EnrichedBy, Type: arrow.BinaryTypes.String})
	md := in.Metadata()
	return arrow.NewSchema(fields, &md), cols, nil
}

// MaxBatchAdded bounds the bytes of strings enrichment adds to one
// batch, checked before each is copied: with each string capped
// (MaxString) a batch of rows of DNS records adds a few MiB, while a
// batch of millions of tiny rows from outside could add gigabytes. A
// block's whole output is bounded on disk by the run's output limit.
const MaxBatchAdded = 256 << 20

// ErrTooMuch is the error of a batch whose enrichment would pass
// MaxBatchAdded.
var ErrTooMuch = errors.New("enrichment would add too much")

// Batch returns rec with the columns Schema adds, for schema and cols as
// Schema returned them for rec's schema. Unknown fields are null.
func (e *Enricher) Batch(schema *arrow.Schema, cols []int, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	mem := memory.DefaultAllocator
	n := int(rec.NumRows())
	added := int64(n) * int64(len(e.by))
	over := func() error {
		return fmt.Errorf("%w: a batch of %d rows would gain more than %d MiB of names (%s); split the batches or enrich fewer columns", ErrTooMuch, n, MaxBatchAdded>>20, e.by)
	}
	if added > MaxBatchAdded {
		return nil, over()
	}
	var release []arrow.Array
	defer func() {
		for _, a := range release {
			a.Release()
		}
	}()
	out := slices.Clone(rec.Columns())
	for _, c := range cols {
		addrs := rec.Column(c).(*array.String)
		country, org, res := array.NewStringBuilder(mem), array.NewStringBuilder(mem), array.NewStringBuilder(mem)
		asn := array.NewUint32Builder(mem)
		for _, b := range []array.Builder{country, org, res, asn} {
			b.Reserve(n)
		}
		str := func(b *array.StringBuilder, v string) {
			if v == "" {
				b.AppendNull()
			} else {
				b.Append(v)
			}
		}
		for i := range n {
			var info Info
			if addrs.IsValid(i) {
				info = e.Lookup(addrs.Value(i))
			}
			if added += int64(len(info.Country) + len(info.ASOrg) + len(info.Resolver)); added > MaxBatchAdded {
				for _, b := range []array.Builder{country, org, res, asn} {
					b.Release()
				}
				return nil, over()
			}
			str(country, info.Country)
			if info.ASN != 0 {
				asn.Append(info.ASN)
			} else {
				asn.AppendNull()
			}
			str(org, info.ASOrg)
			str(res, info.Resolver)
		}
		arrs := []arrow.Array{country.NewArray(), asn.NewArray(), org.NewArray(), res.NewArray()}
		out = append(out, arrs...)
		release = append(release, arrs...)
		for _, b := range []array.Builder{country, org, res, asn} {
			b.Release()
		}
	}
	by := array.NewStringBuilder(mem)
	by.Reserve(n)
	by.ReserveData(n * len(e.by))
	for range n {
		by.Append(e.by)
	}
	byArr := by.NewArray()
	by.Release()
	out = append(out, byArr)
	release = append(release, byArr)
	return array.NewRecordBatch(schema, out, int64(n)), nil
}

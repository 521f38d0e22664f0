package newdomains

import (
	"github.com/apache/arrow-go/v18/arrow"
)

var tsType = &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}

// Schema is the table builtin:newdomains writes: a row for each domain
// a site asked for that it had not asked for within the horizon (or
// since the memory starts, whichever is later), at its first query.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "instance", Type: arrow.BinaryTypes.String}, // the site
	{Name: "seq", Type: arrow.PrimitiveTypes.Uint64},   // the block of the query
	{Name: "time", Type: tsType},                       // the query's event time
	{Name: "domain", Type: arrow.BinaryTypes.String},   // the registered domain (or name) new to the site
	{Name: "qname", Type: arrow.BinaryTypes.String},    // the name the query asked
	{Name: "client", Type: arrow.BinaryTypes.String},   // who asked
	{Name: "since", Type: tsType},                      // from when the site's memory goes back
}, nil)

package dnstop

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// The dimensions a Counter ranks. Requesters, their prefixes, ASNs,
// countries and names count queries; rcodes count responses.
const (
	DimClient           = "client"            // the requester's address
	DimClientPrefix     = "client_prefix"     // its /24 (IPv4) or /48 (IPv6)
	DimASN              = "asn"               // its autonomous system (from builtin:enrich)
	DimCountry          = "country"           // its country (from builtin:enrich)
	DimQname            = "qname"             // the query name
	DimRegisteredDomain = "registered_domain" // the registered domain of the query name
	DimRcode            = "rcode"             // the response code, by name
)

// Dimensions lists every dimension, in the order rows are written.
var Dimensions = []string{DimClient, DimClientPrefix, DimASN, DimCountry, DimQname, DimRegisteredDomain, DimRcode}

// ParseDimensions reads a comma-separated list of dimensions; "" is all.
func ParseDimensions(s string) ([]string, error) {
	if s == "" {
		return slices.Clone(Dimensions), nil
	}
	var out []string
	for _, d := range strings.Split(s, ",") {
		d = strings.TrimSpace(d)
		if !slices.Contains(Dimensions, d) {
			return nil, fmt.Errorf("dimension %q is not one dnstop ranks (known: %s)", d, strings.Join(Dimensions, ", "))
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	// Rows come in the table's order whatever order was asked.
	slices.SortFunc(out, func(a, b string) int { return slices.Index(Dimensions, a) - slices.Index(Dimensions, b) })
	return out, nil
}

// ErrNotDNS is returned for a table that is neither DNS records
// (builtin:dns) nor transactions (builtin:dnspairs), enriched or not.
var ErrNotDNS = errors.New("neither DNS records (builtin:dns) nor transactions (builtin:dnspairs)")

// A Counter ranks the values of DNS rows in each of its dimensions, in a
// Summary of a fixed number of counters per dimension, and notes the
// span of event time it saw.
type Counter struct {
	dims     []string
	sums     map[string]*Summary
	from, to time.Time
}

// NewCounter returns a Counter of the given dimensions, each followed in
// counters counters.
func NewCounter(dims []string, counters int) *Counter {
	c := &Counter{dims: dims, sums: map[string]*Summary{}}
	for _, d := range dims {
		c.sums[d] = NewSummary(counters)
	}
	return c
}

// Summary returns the summary of one of the counter's dimensions; nil
// for one it does not rank.
func (c *Counter) Summary(dim string) *Summary { return c.sums[dim] }

// Dimensions lists the counter's dimensions.
func (c *Counter) Dimensions() []string { return c.dims }

// Span is the first and last event time of the rows counted; zero when
// none were.
func (c *Counter) Span() (from, to time.Time) { return c.from, c.to }

// Merge adds what o counted to c; o's dimensions must be c's.
func (c *Counter) Merge(o *Counter) {
	for _, d := range c.dims {
		if s := o.sums[d]; s != nil {
			c.sums[d].Merge(s)
		}
	}
	c.widen(o.from)
	c.widen(o.to)
}

func (c *Counter) widen(t time.Time) {
	if t.IsZero() {
		return
	}
	if c.from.IsZero() || t.Before(c.from) {
		c.from = t
	}
	if t.After(c.to) {
		c.to = t
	}
}

// rows is what Add reads of a batch, whichever table it is.
type rows struct {
	n                   int
	query, response     func(i int) bool
	client              *array.String
	asn                 *array.Uint32
	country, qname, reg *array.String
	rcode               *array.Uint16
	time                *array.Timestamp
	rate                *array.Uint32 // sample_rate, when the rows have it
}

// weight is what row i stands for: its sample rate.
func (r *rows) weight(i int) int64 {
	if r.rate == nil || !r.rate.IsValid(i) {
		return 1
	}
	return max(int64(r.rate.Value(i)), 1)
}

// Add counts a batch of DNS records or transactions. Records count the
// requester of a query as its source; transactions, as their client. A
// row of a sampled capture counts as its sample_rate rows.
func (c *Counter) Add(rec arrow.RecordBatch) error {
	r, err := read(rec)
	if err != nil {
		return err
	}
	var prefixes prefixCache
	for i := range r.n {
		if r.time.IsValid(i) {
			c.widen(time.Unix(0, int64(r.time.Value(i))).UTC())
		}
		w := r.weight(i)
		if r.query(i) {
			c.addString(DimClient, r.client, i, w)
			if s := c.sums[DimClientPrefix]; s != nil && r.client.IsValid(i) {
				if p := prefixes.of(r.client.Value(i)); p != "" {
					s.Add(p, w)
				}
			}
			if s := c.sums[DimASN]; s != nil && r.asn != nil && r.asn.IsValid(i) {
				s.Add("AS"+strconv.FormatUint(uint64(r.asn.Value(i)), 10), w)
			}
			c.addString(DimCountry, r.country, i, w)
			c.addString(DimQname, r.qname, i, w)
			c.addString(DimRegisteredDomain, r.reg, i, w)
		}
		if s := c.sums[DimRcode]; s != nil && r.response(i) && r.rcode.IsValid(i) {
			s.Add(RcodeName(r.rcode.Value(i)), w)
		}
	}
	return nil
}

func (c *Counter) addString(dim string, col *array.String, i int, w int64) {
	if s := c.sums[dim]; s != nil && col != nil && col.IsValid(i) {
		if v := col.Value(i); v != "" {
			s.Add(v, w)
		}
	}
}

func read(rec arrow.RecordBatch) (rows, error) {
	sc := rec.Schema()
	col := func(name string) arrow.Array {
		if idx := sc.FieldIndices(name); len(idx) > 0 {
			return rec.Column(idx[0])
		}
		return nil
	}
	r := rows{n: int(rec.NumRows())}
	r.time, _ = col("time").(*array.Timestamp)
	r.qname, _ = col("qname").(*array.String)
	r.reg, _ = col("registered_domain").(*array.String)
	r.rcode, _ = col("rcode").(*array.Uint16)
	r.rate, _ = col("sample_rate").(*array.Uint32)
	if r.time == nil || r.qname == nil || r.reg == nil || r.rcode == nil {
		return r, ErrNotDNS
	}
	addr := "client"
	if qr, ok := col("qr").(*array.Boolean); ok {
		// Records: a row a message; a query's requester is its source.
		addr = "src"
		r.query = func(i int) bool { return !qr.Value(i) }
		r.response = func(i int) bool { return qr.Value(i) }
	} else {
		// Transactions: a row a query and its response, either missing.
		orphan, _ := col("orphan_response").(*array.Boolean)
		respTime := col("response_time")
		if orphan == nil || respTime == nil {
			return r, ErrNotDNS
		}
		r.query = func(i int) bool { return !orphan.Value(i) }
		r.response = func(i int) bool { return respTime.IsValid(i) }
	}
	r.client, _ = col(addr).(*array.String)
	if r.client == nil {
		return r, ErrNotDNS
	}
	// Enriched tables (builtin:enrich) say each address's ASN and country.
	r.asn, _ = col(addr + "_asn").(*array.Uint32)
	r.country, _ = col(addr + "_country").(*array.String)
	return r, nil
}

// prefixCache remembers the prefix of the last address, as a capture's
// rows come in runs of one requester.
type prefixCache struct{ addr, prefix string }

func (p *prefixCache) of(addr string) string {
	if addr == p.addr && p.addr != "" {
		return p.prefix
	}
	p.addr, p.prefix = addr, Prefix(addr)
	return p.prefix
}

// Prefix is the network an address is counted under: its /24 for IPv4
// (and IPv4 mapped into IPv6), its /48 for IPv6; "" for no address.
func Prefix(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return ""
	}
	a = a.Unmap().WithZone("")
	bits := 48
	if a.Is4() {
		bits = 24
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return ""
	}
	return p.String()
}

var rcodeNames = []string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "YXDOMAIN", "YXRRSET", "NXRRSET",
	"NOTAUTH", "NOTZONE", "DSOTYPENI"}

// RcodeName is a response code's mnemonic (RFC 6895's registry), or
// RCODE and its number for one without.
func RcodeName(r uint16) string {
	switch {
	case int(r) < len(rcodeNames):
		return rcodeNames[r]
	case r == 16:
		return "BADVERS"
	}
	return "RCODE" + strconv.Itoa(int(r))
}

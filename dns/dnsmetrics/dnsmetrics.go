// Package dnsmetrics counts DNS records and transactions as Prometheus
// metrics per site: queries by transport and type, responses by rcode,
// response sizes, latency (from transactions), malformed messages, and
// the most asked registered domains.
//
// Counting goes in two steps so a block is counted once however often it
// is run: Count reads a block's rows into a tally (string keys, counts);
// a Collector adds the tally of each committed run and exports the sums.
// Every label takes values from a fixed set or a bounded table, so the
// series a server exports are bounded (docs/dns-operators.md says how).
package dnsmetrics

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/dns/dnsmsg"
)

// Tally keys are KIND|SITE[|LABEL]. The kinds:
const (
	kindQuery      = "q"  // q|site|transport|qtype: queries
	kindResponse   = "r"  // r|site|rcode: responses
	kindSize       = "s"  // s|site|bucket: responses by size (SizeBuckets index; len for above all)
	kindSizeSum    = "ss" // ss|site: bytes of responses
	kindLatency    = "l"  // l|site|bucket: answered queries by latency (LatencyBuckets index)
	kindLatencySum = "ls" // ls|site: their latency, microseconds
	kindMalformed  = "m"  // m|site: malformed messages
	kindTop        = "t"  // t|site|domain: queries for a registered domain, a block's top TopPerBlock
	kindSampleRate = "sr" // sr|site: the sample rate of the block's rows (the last block's is exported)
)

// SizeBuckets are the upper bounds (bytes) of the response size
// histogram: the classic UDP limit, the EDNS sizes DNS flag day 2020
// recommends, the Ethernet MTU, and up.
var SizeBuckets = []float64{64, 128, 256, 512, 1232, 1500, 4096, 16384, 65535}

// LatencyBuckets are the upper bounds (seconds) of the latency histogram.
var LatencyBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5}

// QTypes are the query types counted under their own label; others are
// "other".
var QTypes = []string{"A", "NS", "CNAME", "SOA", "PTR", "MX", "TXT", "AAAA", "SRV", "NAPTR", "DS", "RRSIG", "NSEC", "DNSKEY",
	"NSEC3", "TLSA", "SVCB", "HTTPS", "CAA", "ANY", "AXFR", "IXFR"}

// Rcodes are the response codes counted under their own label; others
// are "other".
var Rcodes = []string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "YXDOMAIN", "YXRRSET", "NXRRSET",
	"NOTAUTH", "NOTZONE", "BADVERS"}

// Transports label queries.
var Transports = []string{"udp", "tcp", "other"}

// TopPerBlock is how many registered domains of a block a tally keeps.
const TopPerBlock = 10

func qtypeLabel(t uint16) string {
	if s := dnsmsg.TypeString(t); slices.Contains(QTypes, s) {
		return s
	}
	return "other"
}

func rcodeLabel(r uint16) string {
	switch {
	case r < 11:
		return Rcodes[r]
	case r == 16:
		return "BADVERS"
	}
	return "other"
}

func transportLabel(s string) string {
	if s == "udp" || s == "tcp" {
		return s
	}
	return "other"
}

func bucket(v float64, bounds []float64) int {
	i, _ := slices.BinarySearch(bounds, v)
	return i
}

// Count reads the rows of a block of site's DNS records (builtin:dns) or
// transactions (builtin:dnspairs) into a tally, adding each count with
// add.
func Count(site string, recs []arrow.RecordBatch, add func(key string, n int64)) error {
	t := map[string]int64{}
	domains := map[string]int64{}
	for _, rec := range recs {
		if err := count(site, rec, t, domains); err != nil {
			return err
		}
	}
	for k, n := range t {
		add(k, n)
	}
	for _, d := range top(domains, TopPerBlock) {
		add(kindTop+"|"+site+"|"+d, domains[d])
	}
	return nil
}

// top returns the n domains of the most queries, ties by name.
func top(counts map[string]int64, n int) []string {
	names := make([]string, 0, len(counts))
	for d := range counts {
		names = append(names, d)
	}
	slices.SortFunc(names, func(a, b string) int {
		if counts[a] != counts[b] {
			return int(counts[b] - counts[a])
		}
		return strings.Compare(a, b)
	})
	return names[:min(n, len(names))]
}

// columns finds a batch's columns by name.
type columns struct {
	rec    arrow.RecordBatch
	schema *arrow.Schema
}

func (c columns) get(name string) arrow.Array {
	if idx := c.schema.FieldIndices(name); len(idx) > 0 {
		return c.rec.Column(idx[0])
	}
	return nil
}

// ErrNotDNS is returned for a table that is neither DNS records nor
// transactions.
var ErrNotDNS = errors.New("neither DNS records (builtin:dns) nor transactions (builtin:dnspairs)")

func count(site string, rec arrow.RecordBatch, t, domains map[string]int64) error {
	c := columns{rec, rec.Schema()}
	qtype, _ := c.get("qtype").(*array.Uint16)
	rcode, _ := c.get("rcode").(*array.Uint16)
	transport, _ := c.get("transport").(*array.Dictionary)
	regDomain, _ := c.get("registered_domain").(*array.String)
	if qtype == nil || rcode == nil || transport == nil || regDomain == nil {
		return ErrNotDNS
	}
	transports, _ := transport.Dictionary().(*array.String)
	if transports == nil {
		return ErrNotDNS
	}
	// Rows of a sampled capture stand for sample_rate rows each: every
	// count is scaled by it, so the metrics are totals.
	rates, _ := c.get("sample_rate").(*array.Uint32)
	weight := func(i int) int64 {
		if rates == nil || !rates.IsValid(i) {
			return 1
		}
		return max(int64(rates.Value(i)), 1)
	}
	if rates != nil && rec.NumRows() > 0 {
		t[kindSampleRate+"|"+site] = weight(0)
	}
	var (
		isQuery, isResponse, malformed func(i int) bool
		size                           func(i int) (uint32, bool)
		latency                        *array.Duration
	)
	if qr, ok := c.get("qr").(*array.Boolean); ok {
		// Records: a row a message.
		sizes, _ := c.get("size").(*array.Uint32)
		bad, _ := c.get("malformed").(*array.Boolean)
		if sizes == nil || bad == nil {
			return ErrNotDNS
		}
		isQuery = func(i int) bool { return !qr.Value(i) }
		isResponse = func(i int) bool { return qr.Value(i) }
		malformed = func(i int) bool { return bad.Value(i) }
		size = func(i int) (uint32, bool) { return sizes.Value(i), true }
	} else {
		// Transactions: a row a query and its response, either missing.
		orphan, _ := c.get("orphan_response").(*array.Boolean)
		respTime := c.get("response_time")
		sizes, _ := c.get("response_size").(*array.Uint32)
		bad, _ := c.get("response_malformed").(*array.Boolean)
		latency, _ = c.get("latency").(*array.Duration)
		if orphan == nil || respTime == nil || sizes == nil || bad == nil || latency == nil {
			return ErrNotDNS
		}
		isQuery = func(i int) bool { return !orphan.Value(i) }
		isResponse = func(i int) bool { return respTime.IsValid(i) }
		malformed = func(i int) bool { return bad.IsValid(i) && bad.Value(i) }
		size = func(i int) (uint32, bool) { return sizes.Value(i), sizes.IsValid(i) }
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		w := weight(i)
		if malformed(i) {
			t[kindMalformed+"|"+site] += w
		}
		if isQuery(i) {
			qt := "other"
			if qtype.IsValid(i) {
				qt = qtypeLabel(qtype.Value(i))
			}
			tr := transportLabel(transports.Value(transport.GetValueIndex(i)))
			t[kindQuery+"|"+site+"|"+tr+"|"+qt] += w
			if regDomain.IsValid(i) {
				if d := regDomain.Value(i); validDomain(d) {
					domains[d] += w
				}
			}
		}
		if !isResponse(i) {
			continue
		}
		if rcode.IsValid(i) {
			t[kindResponse+"|"+site+"|"+rcodeLabel(rcode.Value(i))] += w
		}
		if n, ok := size(i); ok {
			t[kindSize+"|"+site+"|"+strconv.Itoa(bucket(float64(n), SizeBuckets))] += w
			t[kindSizeSum+"|"+site] += int64(n) * w
		}
		if latency != nil && latency.IsValid(i) {
			d := int64(latency.Value(i))
			t[kindLatency+"|"+site+"|"+strconv.Itoa(bucket(float64(d)/1e9, LatencyBuckets))] += w
			t[kindLatencySum+"|"+site] += d / 1000 * w
		}
	}
	return nil
}

// validDomain says whether a domain can be a label value of a tally: a
// name of printable ASCII without the key's separator (a crafted name
// with one is not counted, rather than a tally refused).
func validDomain(d string) bool {
	return d != "" && len(d) <= 253 && !strings.ContainsFunc(d, func(r rune) bool { return r <= ' ' || r > '~' || r == '|' })
}

// key is a tally key read.
type key struct {
	kind, site, label, label2 string
	bucket                    int
}

// maxTally bounds one count of a tally a worker sends.
const maxTally = 1 << 50

// parseKey reads and checks a tally key.
func parseKey(k string) (key, error) {
	f := strings.Split(k, "|")
	if len(f) < 2 {
		return key{}, fmt.Errorf("tally %q: want KIND|SITE...", k)
	}
	kk := key{kind: f[0], site: f[1]}
	if err := block.ValidateInstance(kk.site); err != nil {
		return key{}, fmt.Errorf("tally %q: %v", k, err)
	}
	want := map[string]int{kindQuery: 4, kindResponse: 3, kindSize: 3, kindSizeSum: 2, kindLatency: 3, kindLatencySum: 2, kindMalformed: 2, kindTop: 3, kindSampleRate: 2}
	n, ok := want[kk.kind]
	if !ok || len(f) != n {
		return key{}, fmt.Errorf("tally %q: not a DNS metric", k)
	}
	switch kk.kind {
	case kindQuery:
		kk.label, kk.label2 = f[2], f[3]
		if !slices.Contains(Transports, kk.label) || (kk.label2 != "other" && !slices.Contains(QTypes, kk.label2)) {
			return key{}, fmt.Errorf("tally %q: transport or type not counted", k)
		}
	case kindResponse:
		kk.label = f[2]
		if kk.label != "other" && !slices.Contains(Rcodes, kk.label) {
			return key{}, fmt.Errorf("tally %q: rcode not counted", k)
		}
	case kindSize, kindLatency:
		bounds := SizeBuckets
		if kk.kind == kindLatency {
			bounds = LatencyBuckets
		}
		b, err := strconv.Atoi(f[2])
		if err != nil || b < 0 || b > len(bounds) {
			return key{}, fmt.Errorf("tally %q: no such bucket", k)
		}
		kk.bucket = b
	case kindTop:
		kk.label = f[2]
		if !validDomain(kk.label) {
			return key{}, fmt.Errorf("tally %q: not a domain name", k)
		}
	}
	return kk, nil
}

// Check refuses a tally no Count makes: an unknown key or label, or a
// count out of range.
func Check(t map[string]int64) error {
	for k, n := range t {
		if _, err := parseKey(k); err != nil {
			return err
		}
		if n < 0 || n > maxTally {
			return fmt.Errorf("tally %q: count %d out of range", k, n)
		}
	}
	return nil
}

package dnsrec

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strings"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/plumb-dev/plumb/pcap/dnsmsg"
	"golang.org/x/net/publicsuffix"
)

// Schema is the table of DNS messages: one row per message, the columns
// pandas and polars read directly.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "instance", Type: Categorical},
	{Name: "seq", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "time", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
	{Name: "src", Type: arrow.BinaryTypes.String},
	{Name: "dst", Type: arrow.BinaryTypes.String},
	{Name: "sport", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "dport", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "transport", Type: Categorical},
	{Name: "ip_version", Type: arrow.PrimitiveTypes.Uint8},
	{Name: "size", Type: arrow.PrimitiveTypes.Uint32},
	{Name: "id", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "qr", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "opcode", Type: arrow.PrimitiveTypes.Uint8},
	{Name: "aa", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "tc", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "rd", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "ra", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "ad", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "cd", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "rcode", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "qdcount", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "ancount", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "nscount", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "arcount", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "qname", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "qtype", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "qclass", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "edns", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "edns_version", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "edns_udp_size", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "edns_do", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "edns_options", Type: arrow.ListOf(optionType)},
	{Name: "malformed", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "error", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "qname_raw", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "labels", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "tld", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "registered_domain", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "answers", Type: arrow.ListOf(RRType)},
	{Name: "authority", Type: arrow.ListOf(RRType)},
	{Name: "additional", Type: arrow.ListOf(RRType)},
	{Name: "ecs_family", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "ecs_source_prefix", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "ecs_scope_prefix", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "ecs_address", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "ede", Type: arrow.ListOf(arrow.PrimitiveTypes.Uint16)},
	{Name: "ede_text", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "cookie", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "tunnel", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "partial", Type: arrow.FixedWidthTypes.Boolean},
}, nil)

// Categorical is the type of the columns of few values, instance and
// transport: dictionary-encoded, which pandas and polars read as
// categories. A block's IPC file may hold only one dictionary per column,
// so each is fixed for the block: its instance, and Transports. tld
// stays a string column: a block's top-level domains are not known
// before its end (the Parquet lake dictionary-encodes it per row group).
var Categorical = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}

// Transports are the transport column's dictionary, in index order.
var Transports = []string{"udp", "tcp"}

// RRType is a resource record in the answers, authority and additional
// columns; rdata is as dig prints it (see dnsmsg.RR).
var RRType = arrow.StructOf(
	arrow.Field{Name: "name", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "type", Type: arrow.PrimitiveTypes.Uint16},
	arrow.Field{Name: "class", Type: arrow.PrimitiveTypes.Uint16},
	arrow.Field{Name: "ttl", Type: arrow.PrimitiveTypes.Uint32},
	arrow.Field{Name: "rdata", Type: arrow.BinaryTypes.String},
)

// optionType is an EDNS option in the edns_options column.
var optionType = arrow.StructOf(
	arrow.Field{Name: "code", Type: arrow.PrimitiveTypes.Uint16},
	arrow.Field{Name: "data", Type: arrow.BinaryTypes.Binary},
)

// BatchRows is how many rows go in one record batch.
const BatchRows = 16 << 10

// chunkRows is how many records Add hands the building goroutine at once.
const chunkRows = 1024

// Writer writes records as an Arrow IPC file, ZSTD-compressed, in
// batches of BatchRows. Three goroutines share the work: the caller's
// extracts and copies records, one builds the columns of the next batch,
// and one compresses and writes the last, so extraction, building and
// compression use the cores there are.
type Writer struct {
	instance string
	seq      uint64
	f        *ipc.FileWriter
	// Rows counts the rows written.
	Rows int64

	// The caller's side: records waiting to be built.
	chunk  []Record
	chunks chan []Record
	free   chan []Record
	built  chan error // the building goroutine's verdict
	failed atomic.Pointer[error]

	domains Domains

	// The building goroutine's.
	b     *array.RecordBuilder
	c     cols
	rows  int
	addr  []byte
	cat   *Categories
	fixed fixedCols

	batches chan arrow.RecordBatch
	done    chan error // the writing goroutine's verdict
	closed  bool
}

// NewWriter starts an IPC file on w for the records of one block. Close
// it, even after an error, to end its writing goroutine.
func NewWriter(w io.Writer, instance string, seq uint64) (*Writer, error) {
	f, err := ipc.NewFileWriter(w, ipc.WithSchema(Schema), ipc.WithZstd(), ipc.WithCompressConcurrency(2))
	if err != nil {
		return nil, err
	}
	wr := &Writer{instance: instance, seq: seq, b: array.NewRecordBuilder(memory.DefaultAllocator, Schema), f: f,
		chunks: make(chan []Record, 2), free: make(chan []Record, 3), built: make(chan error, 1),
		batches: make(chan arrow.RecordBatch, 1), done: make(chan error, 1)}
	wr.c = typed(wr.b)
	if wr.cat, err = NewCategories(wr.c.instance, wr.c.transport, instance); err != nil {
		return nil, err
	}
	wr.chunk = make([]Record, 0, chunkRows)
	go wr.build()
	go wr.write()
	return wr, nil
}

// Add appends a record (copied: the caller may reuse it).
func (w *Writer) Add(r *Record) error {
	w.chunk = append(w.chunk, *r)
	if m := &r.Msg; m.HasQuestion && m.QName != "." {
		w.chunk[len(w.chunk)-1].registered = w.domains.Registered(m.QName)
	}
	w.Rows++
	if len(w.chunk) == chunkRows {
		return w.send()
	}
	return nil
}

// send hands the records waiting to the building goroutine.
func (w *Writer) send() error {
	if err := w.failed.Load(); err != nil {
		return *err // the building goroutine failed; it only drains now
	}
	w.chunks <- w.chunk
	select {
	case w.chunk = <-w.free:
	default:
		w.chunk = make([]Record, 0, chunkRows)
	}
	return nil
}

// build builds batches of the records it is sent until the channel
// closes; after an error it only drains.
func (w *Writer) build() {
	var err error
	for chunk := range w.chunks {
		for i := 0; i < len(chunk) && err == nil; i++ {
			if err = w.add(&chunk[i]); err != nil {
				w.failed.Store(&err)
			}
		}
		clear(chunk)
		select {
		case w.free <- chunk[:0]:
		default:
		}
	}
	if err == nil {
		err = w.flush()
	}
	close(w.batches)
	w.built <- err
}

// write writes batches until the channel closes; after an error it only
// releases them.
func (w *Writer) write() {
	var err error
	for rec := range w.batches {
		if err == nil {
			if err = w.f.Write(rec); err != nil {
				err = fmt.Errorf("write DNS records: %w", err)
			}
		}
		rec.Release()
	}
	w.done <- err
}

// Categories fills the dictionary columns every kind of DNS row has,
// instance and transport. The indices go in once per batch: appended per
// row, the dictionary builder allocates.
type Categories struct {
	instance, transport *array.BinaryDictionaryBuilder
	zeros, transports   []int
}

// NewCategories fixes the dictionaries of the instance and transport
// columns before any row, so every batch of an IPC file has the same
// ones (the format's rule); instance is the block's.
func NewCategories(instance, transport *array.BinaryDictionaryBuilder, name string) (*Categories, error) {
	if err := fixDictionary(instance, name); err != nil {
		return nil, err
	}
	if err := fixDictionary(transport, Transports...); err != nil {
		return nil, err
	}
	return &Categories{instance: instance, transport: transport}, nil
}

// Add notes the transport of the next row.
func (c *Categories) Add(tcp bool) {
	i := 0 // Transports[0], udp
	if tcp {
		i = 1
	}
	c.transports = append(c.transports, i)
}

// Flush appends the indices of the rows added since the last Flush.
func (c *Categories) Flush() {
	n := len(c.transports)
	if cap(c.zeros) < n {
		c.zeros = make([]int, n) // all 0: the block's instance
	}
	c.instance.AppendIndices(c.zeros[:n], nil)
	c.transport.AppendIndices(c.transports, nil)
	c.transports = c.transports[:0]
}

// fixDictionary puts vals in b's dictionary, in order, before any row.
func fixDictionary(b *array.BinaryDictionaryBuilder, vals ...string) error {
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	defer sb.Release()
	sb.AppendValues(vals, nil)
	a := sb.NewStringArray()
	defer a.Release()
	return b.InsertStringDictValues(a)
}

// cols are the builders of each column, typed once.
type cols struct {
	instance, transport                                         *array.BinaryDictionaryBuilder
	src, dst, qname, errs                                       *array.StringBuilder
	seq                                                         *array.Uint64Builder
	time                                                        *array.TimestampBuilder
	ipVersion, opcode, ednsVersion                              *array.Uint8Builder
	size                                                        *array.Uint32Builder
	sport, dport, id, rcode, qd, an, ns, ar, qtype, qclass, udp *array.Uint16Builder
	flags                                                       [6]*array.BooleanBuilder // aa tc rd ra ad cd
	qr, edns, do, malformed, cookie                             *array.BooleanBuilder
	ednsOptions, answers, authority, additional, ede            *array.ListBuilder
	qnameRaw, tld, regDomain, ecsAddress, edeText               *array.StringBuilder
	labels, ecsSource, ecsScope                                 *array.Uint8Builder
	ecsFamily                                                   *array.Uint16Builder
	tunnel                                                      *array.StringBuilder
	partial                                                     *array.BooleanBuilder
}

func typed(b *array.RecordBuilder) cols {
	f := b.Fields()
	c := cols{
		instance: f[0].(*array.BinaryDictionaryBuilder), seq: f[1].(*array.Uint64Builder), time: f[2].(*array.TimestampBuilder),
		src: f[3].(*array.StringBuilder), dst: f[4].(*array.StringBuilder), sport: f[5].(*array.Uint16Builder),
		dport: f[6].(*array.Uint16Builder), transport: f[7].(*array.BinaryDictionaryBuilder), ipVersion: f[8].(*array.Uint8Builder),
		size: f[9].(*array.Uint32Builder), id: f[10].(*array.Uint16Builder), qr: f[11].(*array.BooleanBuilder),
		opcode: f[12].(*array.Uint8Builder), rcode: f[19].(*array.Uint16Builder), qd: f[20].(*array.Uint16Builder),
		an: f[21].(*array.Uint16Builder), ns: f[22].(*array.Uint16Builder), ar: f[23].(*array.Uint16Builder),
		qname: f[24].(*array.StringBuilder), qtype: f[25].(*array.Uint16Builder), qclass: f[26].(*array.Uint16Builder),
		edns: f[27].(*array.BooleanBuilder), ednsVersion: f[28].(*array.Uint8Builder), udp: f[29].(*array.Uint16Builder),
		do: f[30].(*array.BooleanBuilder), ednsOptions: f[31].(*array.ListBuilder), malformed: f[32].(*array.BooleanBuilder),
		errs:     f[33].(*array.StringBuilder),
		qnameRaw: f[34].(*array.StringBuilder), labels: f[35].(*array.Uint8Builder), tld: f[36].(*array.StringBuilder),
		regDomain: f[37].(*array.StringBuilder), answers: f[38].(*array.ListBuilder), authority: f[39].(*array.ListBuilder),
		additional: f[40].(*array.ListBuilder), ecsFamily: f[41].(*array.Uint16Builder), ecsSource: f[42].(*array.Uint8Builder),
		ecsScope: f[43].(*array.Uint8Builder), ecsAddress: f[44].(*array.StringBuilder), ede: f[45].(*array.ListBuilder),
		edeText: f[46].(*array.StringBuilder), cookie: f[47].(*array.BooleanBuilder),
		tunnel: f[48].(*array.StringBuilder), partial: f[49].(*array.BooleanBuilder),
	}
	for i := range c.flags {
		c.flags[i] = f[13+i].(*array.BooleanBuilder)
	}
	return c
}

// fixedCols holds a batch's fixed-width columns as plain slices until
// the batch is cut, then goes into the builders a column at a time:
// appended a value at a time, each value also set its validity bit, and
// the calls cost more than the values.
type fixedCols struct {
	seq                                            []uint64
	time                                           []arrow.Timestamp
	sport, dport, id, rcode, qd, an, ns, ar, qtype []uint16
	qclass, udp                                    []uint16
	ipVersion, opcode, ednsVersion                 []uint8
	size                                           []uint32
	qr, edns, do, malformed, cookie, partial       []bool
	flags                                          [6][]bool // aa tc rd ra ad cd
	hasQuestion                                    []bool    // validity of qtype, qclass (edns is edns_version's and edns_udp_size's)
}

// flush appends the rows held to the builders and empties itself.
func (f *fixedCols) flush(c *cols) {
	c.seq.AppendValues(f.seq, nil)
	c.time.AppendValues(f.time, nil)
	for _, u := range []struct {
		b    *array.Uint16Builder
		v    []uint16
		null []bool
	}{{c.sport, f.sport, nil}, {c.dport, f.dport, nil}, {c.id, f.id, nil}, {c.rcode, f.rcode, nil}, {c.qd, f.qd, nil},
		{c.an, f.an, nil}, {c.ns, f.ns, nil}, {c.ar, f.ar, nil}, {c.qtype, f.qtype, f.hasQuestion},
		{c.qclass, f.qclass, f.hasQuestion}, {c.udp, f.udp, f.edns}} {
		u.b.AppendValues(u.v, u.null)
	}
	c.ipVersion.AppendValues(f.ipVersion, nil)
	c.opcode.AppendValues(f.opcode, nil)
	c.ednsVersion.AppendValues(f.ednsVersion, f.edns)
	c.size.AppendValues(f.size, nil)
	for _, b := range []struct {
		b *array.BooleanBuilder
		v []bool
	}{{c.qr, f.qr}, {c.edns, f.edns}, {c.do, f.do}, {c.malformed, f.malformed}, {c.cookie, f.cookie}, {c.partial, f.partial},
		{c.flags[0], f.flags[0]}, {c.flags[1], f.flags[1]}, {c.flags[2], f.flags[2]}, {c.flags[3], f.flags[3]},
		{c.flags[4], f.flags[4]}, {c.flags[5], f.flags[5]}} {
		b.b.AppendValues(b.v, nil)
	}
	f.seq, f.time = f.seq[:0], f.time[:0]
	f.sport, f.dport, f.id, f.rcode, f.qd, f.an, f.ns, f.ar = f.sport[:0], f.dport[:0], f.id[:0], f.rcode[:0], f.qd[:0], f.an[:0], f.ns[:0], f.ar[:0]
	f.qtype, f.qclass, f.udp = f.qtype[:0], f.qclass[:0], f.udp[:0]
	f.ipVersion, f.opcode, f.ednsVersion, f.size = f.ipVersion[:0], f.opcode[:0], f.ednsVersion[:0], f.size[:0]
	f.qr, f.edns, f.do, f.malformed, f.cookie, f.partial = f.qr[:0], f.edns[:0], f.do[:0], f.malformed[:0], f.cookie[:0], f.partial[:0]
	for i := range f.flags {
		f.flags[i] = f.flags[i][:0]
	}
	f.hasQuestion = f.hasQuestion[:0]
}

// names appends the name columns of the question: as sent (when not
// as qname), the label count, the top-level domain and the registered domain (public suffix
// plus one label), null without a question.
func (w *Writer) names(m *dnsmsg.Message, registered string) {
	c := &w.c
	if !m.HasQuestion {
		c.qnameRaw.AppendNull()
		c.labels.AppendNull()
		c.tld.AppendNull()
		c.regDomain.AppendNull()
		return
	}
	// As sent only where it differs from qname (in case): most names
	// are sent in lower case, and a copy of every name would be a fifth
	// of the table stored.
	if m.QNameRaw != m.QName {
		c.qnameRaw.Append(m.QNameRaw)
	} else {
		c.qnameRaw.AppendNull()
	}
	if m.QName == "." {
		c.labels.Append(0)
		c.tld.AppendNull()
		c.regDomain.AppendNull()
		return
	}
	c.labels.Append(uint8(min(strings.Count(m.QName, ".")+1, 255)))
	c.tld.Append(TLD(m.QName))
	if reg := registered; reg == "" {
		c.regDomain.AppendNull()
	} else {
		c.regDomain.Append(reg)
	}
}

// TLD is the last label of a name as dnsmsg reads it ("" for the root).
func TLD(qname string) string {
	if qname == "." {
		return ""
	}
	return qname[strings.LastIndexByte(qname, '.')+1:]
}

// Domains finds registered domains (public suffix plus one label),
// remembering names it was asked in a small direct-mapped table: traffic
// asks for the same names again and again, and the public suffix list
// costs a search per name. The table stays in the CPU's cache, where a
// map of every name seen would not; a flood of random names only
// overwrites it.
type Domains struct {
	slots *[domainSlots]domainSlot
	seed  maphash.Seed
}

type domainSlot struct{ name, reg string }

const domainSlots = 1 << 12

// Registered is the registered domain of a name as dnsmsg reads it, or
// "" when it has none (a public suffix itself, or the root).
func (d *Domains) Registered(qname string) string {
	if d.slots == nil {
		d.slots, d.seed = new([domainSlots]domainSlot), maphash.MakeSeed()
	}
	slot := &d.slots[maphash.String(d.seed, qname)%domainSlots]
	if slot.name == qname && qname != "" {
		return slot.reg
	}
	reg, err := publicsuffix.EffectiveTLDPlusOne(qname)
	if err != nil || qname == "." {
		reg = ""
	}
	*slot = domainSlot{qname, reg}
	return reg
}

// AppendRRs appends one list of records to a builder of list<RRType>.
func AppendRRs(lb *array.ListBuilder, rrs []dnsmsg.RR) {
	lb.Append(true)
	sb := lb.ValueBuilder().(*array.StructBuilder)
	for _, rr := range rrs {
		sb.Append(true)
		sb.FieldBuilder(0).(*array.StringBuilder).Append(rr.Name)
		sb.FieldBuilder(1).(*array.Uint16Builder).Append(rr.Type)
		sb.FieldBuilder(2).(*array.Uint16Builder).Append(rr.Class)
		sb.FieldBuilder(3).(*array.Uint32Builder).Append(rr.TTL)
		sb.FieldBuilder(4).(*array.StringBuilder).Append(rr.RData)
	}
}

// add appends a record to the batch being built.
func (w *Writer) add(r *Record) error {
	c, f := &w.c, &w.fixed
	m := &r.Msg
	f.seq = append(f.seq, w.seq)
	f.time = append(f.time, arrow.Timestamp(r.Time.UnixNano()))
	w.addr = r.Src.AppendTo(w.addr[:0])
	c.src.BinaryBuilder.Append(w.addr)
	w.addr = r.Dst.AppendTo(w.addr[:0])
	c.dst.BinaryBuilder.Append(w.addr)
	f.sport = append(f.sport, r.SrcPort)
	f.dport = append(f.dport, r.DstPort)
	w.cat.Add(r.TCP)
	f.ipVersion = append(f.ipVersion, r.IPVersion)
	f.size = append(f.size, uint32(r.Size))
	f.id = append(f.id, m.ID)
	f.qr = append(f.qr, m.QR)
	f.opcode = append(f.opcode, m.Opcode)
	for i, v := range [6]bool{m.AA, m.TC, m.RD, m.RA, m.AD, m.CD} {
		f.flags[i] = append(f.flags[i], v)
	}
	f.rcode = append(f.rcode, m.Rcode)
	f.qd = append(f.qd, m.QDCount)
	f.an = append(f.an, m.ANCount)
	f.ns = append(f.ns, m.NSCount)
	f.ar = append(f.ar, m.ARCount)
	f.hasQuestion = append(f.hasQuestion, m.HasQuestion)
	f.qtype = append(f.qtype, m.QType)
	f.qclass = append(f.qclass, m.QClass)
	if m.HasQuestion {
		c.qname.Append(m.QName)
	} else {
		c.qname.AppendNull()
	}
	f.edns = append(f.edns, m.EDNS)
	f.ednsVersion = append(f.ednsVersion, m.EDNSVersion)
	f.udp = append(f.udp, m.UDPSize)
	f.do = append(f.do, m.DO)
	c.ednsOptions.Append(true)
	opts := c.ednsOptions.ValueBuilder().(*array.StructBuilder)
	for _, o := range m.Options {
		opts.Append(true)
		opts.FieldBuilder(0).(*array.Uint16Builder).Append(o.Code)
		opts.FieldBuilder(1).(*array.BinaryBuilder).Append(o.Data)
	}
	f.malformed = append(f.malformed, r.Err != nil)
	if r.Err != nil {
		c.errs.Append(r.Err.Error())
	} else {
		c.errs.AppendNull()
	}
	w.names(m, r.registered)
	AppendRRs(c.answers, m.Answer)
	AppendRRs(c.authority, m.Authority)
	AppendRRs(c.additional, m.Additional)
	if e := m.ECS; e.Family != 0 {
		c.ecsFamily.Append(e.Family)
		c.ecsSource.Append(e.SourcePrefix)
		c.ecsScope.Append(e.ScopePrefix)
		c.ecsAddress.Append(e.Address)
	} else {
		c.ecsFamily.AppendNull()
		c.ecsSource.AppendNull()
		c.ecsScope.AppendNull()
		c.ecsAddress.AppendNull()
	}
	c.ede.Append(true)
	codes := c.ede.ValueBuilder().(*array.Uint16Builder)
	var texts []string
	for _, e := range m.EDE {
		codes.Append(e.Code)
		if e.Text != "" {
			texts = append(texts, e.Text)
		}
	}
	if len(texts) > 0 {
		c.edeText.Append(strings.Join(texts, "; "))
	} else {
		c.edeText.AppendNull()
	}
	f.cookie = append(f.cookie, m.Cookie)
	if r.Tunnel != "" {
		c.tunnel.Append(r.Tunnel)
	} else {
		c.tunnel.AppendNull()
	}
	f.partial = append(f.partial, r.Partial)
	w.rows++
	if w.rows == BatchRows {
		return w.flush()
	}
	return nil
}

func (w *Writer) flush() error {
	if w.rows == 0 {
		return nil
	}
	w.cat.Flush()
	w.fixed.flush(&w.c)
	w.rows = 0
	select {
	case err := <-w.done: // the writer stopped early
		w.done <- err
		return err
	case w.batches <- w.b.NewRecordBatch():
		return nil
	}
}

// Close writes the last batch and the file's footer. A block without a
// message still makes a valid file with the schema and no rows. Closing
// twice does nothing.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	var err error
	if len(w.chunk) > 0 {
		err = w.send()
	}
	close(w.chunks)
	berr := <-w.built
	w.b.Release()
	if werr := <-w.done; werr != nil {
		return werr
	}
	if err := errors.Join(err, berr); err != nil {
		return err
	}
	return w.f.Close()
}

package dnsrec

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strings"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/internal/addrtext"
	"github.com/plumb-dev/plumb/internal/arrowcol"
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
	{Name: "answers", Type: RRListType},
	{Name: "authority", Type: RRListType},
	{Name: "additional", Type: RRListType},
	{Name: "ecs_family", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "ecs_source_prefix", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "ecs_scope_prefix", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "ecs_address", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "ede", Type: arrow.ListOf(arrow.PrimitiveTypes.Uint16)},
	{Name: "ede_text", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "cookie", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "tunnel", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "partial", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "dnstap_type", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "dnstap_identity", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "tcp_rtt", Type: arrow.FixedWidthTypes.Duration_ns, Nullable: true},
	{Name: "sample_rate", Type: arrow.PrimitiveTypes.Uint32},
}, nil)

// Categorical is the type of the columns of few values, instance and
// transport: dictionary-encoded, which pandas and polars read as
// categories. A block's IPC file may hold only one dictionary per column,
// so each is fixed for the block: its instance, and Transports. tld
// stays a string column: a block's top-level domains are not known
// before its end (the Parquet lake dictionary-encodes it per row group).
var Categorical = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}

// Transports are the transport column's dictionary, in index order.
var Transports = []string{"udp", "tcp", "dot", "doh", "doq", "dnscrypt-udp", "dnscrypt-tcp"}

// TransportIndex is a row's index in Transports.
func TransportIndex(tcp bool) int8 {
	if tcp {
		return 1
	}
	return 0
}

// Categories are the dictionaries of the instance and transport columns,
// fixed before any row so that every batch of an IPC file has the same
// ones (the format's rule): the block's instance, and Transports.
type Categories struct {
	instance, transport arrow.Array
	zeros               []int8 // every row's instance index
}

// NewCategories returns the dictionaries of a block of instance; release
// them when its file is written.
func NewCategories(instance string) *Categories {
	return &Categories{instance: arrowcol.Strings(instance), transport: arrowcol.Strings(Transports...)}
}

// Data is the instance and transport columns of a batch whose rows have
// transports (TransportIndex each). One goroutine at a time may call it.
func (c *Categories) Data(transports []int8) (instance, transport arrow.ArrayData) {
	if cap(c.zeros) < len(transports) {
		c.zeros = make([]int8, len(transports))
	}
	return arrowcol.DictData(Categorical, c.zeros[:len(transports)], c.instance), arrowcol.DictData(Categorical, transports, c.transport)
}

// Release releases the dictionaries.
func (c *Categories) Release() {
	c.instance.Release()
	c.transport.Release()
}

// RRType is a resource record in the answers, authority and additional
// columns; rdata is as dig prints it (see dnsmsg.RR).
var RRType = arrow.StructOf(
	arrow.Field{Name: "name", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "type", Type: arrow.PrimitiveTypes.Uint16},
	arrow.Field{Name: "class", Type: arrow.PrimitiveTypes.Uint16},
	arrow.Field{Name: "ttl", Type: arrow.PrimitiveTypes.Uint32},
	arrow.Field{Name: "rdata", Type: arrow.BinaryTypes.String},
)

// RRListType is the type of the answers, authority and additional
// columns.
var RRListType = arrow.ListOf(RRType)

// optionType is an EDNS option in the edns_options column.
var optionType = arrow.StructOf(
	arrow.Field{Name: "code", Type: arrow.PrimitiveTypes.Uint16},
	arrow.Field{Name: "data", Type: arrow.BinaryTypes.Binary},
)

// RecordsZstdLevel is the ZSTD level of the records' IPC bodies (and
// the transactions') unless a stage chooses another (ParseZstd): the
// fastest, arrow-go's SpeedFastest. On the real signed capture and the
// normal and signed mixes (bench/dns, six runs) it took 0.78-1.04x
// (median 0.91x) the CPU of ZSTD's default level (SpeedDefault,
// "balanced") for 1-4% more bytes (11% for the real capture's header
// and question); it saves the most on the signed mix's every section,
// whose signatures give the match finder nothing to find.
const RecordsZstdLevel = 1

// zstdLevels are the ZSTD levels a stage may choose (?zstd=), by name:
// arrow-go maps ZSTD's levels onto klauspost/compress's four encoders,
// so a number would promise steps that are not there. At the fast and
// balanced levels the encoder stores a block in which it finds no
// repeats as it is, and the offsets of a string column (counting up, a
// few bytes apart) are such blocks; "small" (SpeedBetterCompression)
// entropy-codes them. Against "fast", in the same runs, it made
// header-and-question records 16-31% smaller for 19-49% more CPU, and
// records of every section 8-26% smaller for 18-93% more (the most for
// the least on the signed mix). The slowest encoder is left out:
// several times the CPU for a few percent.
var zstdLevels = map[string]int{"fast": RecordsZstdLevel, "balanced": 3, "small": 7}

// ParseZstd reads a ZSTD level by its name in zstdLevels: fast,
// balanced or small; "" is the default, fast.
func ParseZstd(v string) (int, error) {
	if v == "" {
		return RecordsZstdLevel, nil
	}
	if l, ok := zstdLevels[v]; ok {
		return l, nil
	}
	return 0, fmt.Errorf("zstd=%q: want fast, balanced or small", v)
}

// BatchRows is how many rows go in one record batch.
const BatchRows = 16 << 10

// BatchBytes ends a batch before BatchRows when its records' names and
// data reach it: on signed traffic 16 Ki rows held 20 MiB of text, so
// the three batches in flight took 60 MiB, grown afresh in each writer,
// and left the caches before they were compressed.
const BatchBytes = 4 << 20

// chunkRows is how many records Add hands the building goroutine at once.
const chunkRows = 1024

// Writer writes records as an Arrow IPC file, ZSTD-compressed (at
// RecordsZstdLevel unless NewWriterLevel chose another), in batches of
// BatchRows (fewer where their records' names and data reach
// BatchBytes). Three goroutines share the work: the caller's extracts
// and copies records, one builds the columns of the next batch, and one
// compresses and writes the last, so extraction, building and
// compression use the cores there are.
type Writer struct {
	instance string
	seq      uint64
	rate     uint32 // SetSampleRate
	f        *ipc.FileWriter
	// Rows counts the rows written.
	Rows int64

	// The caller's side: records waiting to be built.
	chunk  []Record
	chunks chan []Record
	free   chan []Record
	built  chan error // the building goroutine's verdict
	failed atomic.Pointer[error]

	// The building goroutine's: the batch being built, and the batches
	// the writing goroutine has finished with.
	b       *batch
	batches chan *batch
	spare   chan *batch
	cat     *Categories
	addrs   addrtext.Cache
	domains Domains

	done      chan error // the writing goroutine's verdict
	closed    bool
	suspended bool
	skip      dnsmsg.Sections // written as nulls (SetSections)
	skipNames Names           // written as nulls (SetNames)
}

// SetSampleRate sets the rate the capture was sampled at (one address
// pair in rate kept; block.Name.SampleRate), written in every row so
// counts scale back to totals. 1, the default, is every packet.
func (w *Writer) SetSampleRate(rate uint32) { w.rate = max(rate, 1) }

// SetNames chooses the columns derived from qname that are written:
// the others are null in every row, and cost nothing.
func (w *Writer) SetNames(n Names) { w.skipNames = AllNames &^ n }

// Names is a set of the columns derived from qname.
type Names uint8

// The columns derived from qname.
const (
	NameRaw        Names = 1 << iota // qname_raw
	NameLabels                       // labels
	NameTLD                          // tld
	NameRegistered                   // registered_domain (the public suffix list)
	AllNames       = NameRaw | NameLabels | NameTLD | NameRegistered
)

// ParseNames reads a choice of derived name columns: "all", "none", or
// a list of qname_raw, labels, tld and registered_domain separated by
// commas.
func ParseNames(v string) (Names, error) {
	switch v {
	case "", "all":
		return AllNames, nil
	case "none":
		return 0, nil
	}
	var n Names
	for _, part := range strings.Split(v, ",") {
		switch strings.TrimSpace(part) {
		case "qname_raw":
			n |= NameRaw
		case "labels":
			n |= NameLabels
		case "tld":
			n |= NameTLD
		case "registered_domain":
			n |= NameRegistered
		default:
			return 0, fmt.Errorf("names=%q: want all, none, or a list of qname_raw, labels, tld and registered_domain", v)
		}
	}
	return n, nil
}

// SetSections chooses the record sections written: the others are null
// in every row (not read, as against an empty list: none in the
// message). Call it before the first Add, with the extractor's
// ReadSections.
func (w *Writer) SetSections(s dnsmsg.Sections) { w.skip = dnsmsg.AllSections &^ s }

// NewWriter starts an IPC file on w for the records of one block,
// compressed at RecordsZstdLevel. Close it, even after an error, to end
// its writing goroutine.
func NewWriter(w io.Writer, instance string, seq uint64) (*Writer, error) {
	return NewWriterLevel(w, instance, seq, RecordsZstdLevel)
}

// NewWriterLevel is NewWriter compressing at a ZSTD level ParseZstd
// read; 0 is RecordsZstdLevel (arrow-go would take it as its own
// default, SpeedDefault).
func NewWriterLevel(w io.Writer, instance string, seq uint64, level int) (*Writer, error) {
	if level == 0 {
		level = RecordsZstdLevel
	}
	f, err := ipc.NewFileWriter(w, ipc.WithSchema(Schema), ipc.WithZstdLevel(level), ipc.WithCompressConcurrency(2),
		ipc.WithAllocator(arrowcol.NewRecycler()))
	if err != nil {
		return nil, err
	}
	wr := &Writer{instance: instance, seq: seq, rate: 1, f: f}
	wr.cat = NewCategories(instance)
	wr.start()
	return wr, nil
}

// start makes the buffers and starts the building and writing
// goroutines.
func (w *Writer) start() {
	w.chunks, w.free, w.built = make(chan []Record, 2), make(chan []Record, 3), make(chan error, 1)
	w.batches, w.spare, w.done = make(chan *batch, 1), make(chan *batch, 3), make(chan error, 1)
	// Three batches: one written, one waiting, one built.
	w.b = newBatch()
	w.spare <- newBatch()
	w.spare <- newBatch()
	w.chunk = make([]Record, 0, chunkRows)
	go w.build()
	go w.write()
}

// stop writes the rows added so far and ends the goroutines.
func (w *Writer) stop() error {
	var err error
	if len(w.chunk) > 0 {
		err = w.send()
	}
	close(w.chunks)
	berr := <-w.built
	werr := <-w.done
	w.b, w.chunk, w.spare, w.free = nil, nil, nil, nil
	if werr != nil {
		return werr
	}
	return errors.Join(err, berr)
}

// Suspend writes every row added so far and lets go of what building
// batches takes (a few MiB), keeping the file open: a block read apart
// from its neighbours waits so for the rows its edges complete. Resume
// goes on; Close ends the file either way.
func (w *Writer) Suspend() error {
	if w.closed || w.suspended {
		return nil
	}
	w.suspended = true
	return w.stop()
}

// Resume takes rows again after Suspend.
func (w *Writer) Resume() {
	if w.suspended && !w.closed {
		w.suspended = false
		w.start()
	}
}

// Add appends a record (copied: the caller may reuse it).
func (w *Writer) Add(r *Record) error {
	w.chunk = append(w.chunk, *r)
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

// write writes batches until the channel closes, handing each back to
// be built again; after an error it only hands them back.
func (w *Writer) write() {
	var err error
	for b := range w.batches {
		if err == nil {
			rec := b.record(w.cat)
			if err = w.f.Write(rec); err != nil {
				err = fmt.Errorf("write DNS records: %w", err)
			}
			rec.Release()
		}
		b.reset()
		w.spare <- b
	}
	w.done <- err
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

// add appends a record to the batch being built.
func (w *Writer) add(r *Record) error {
	b := w.b
	m := &r.Msg
	b.seq.Add(w.seq)
	b.sampleRate.Add(w.rate)
	b.time.Add(arrow.Timestamp(r.Time.UnixNano()))
	b.src.AddBytes(w.addrs.Text(r.Src))
	b.dst.AddBytes(w.addrs.Text(r.Dst))
	b.sport.Add(r.SrcPort)
	b.dport.Add(r.DstPort)
	b.transport = append(b.transport, r.TransportIndex())
	b.ipVersion.Add(r.IPVersion)
	b.size.Add(uint32(r.Size))
	b.id.Add(m.ID)
	b.qr.Add(m.QR)
	b.opcode.Add(m.Opcode)
	for i, v := range [6]bool{m.AA, m.TC, m.RD, m.RA, m.AD, m.CD} {
		b.flags[i].Add(v)
	}
	b.rcode.Add(m.Rcode)
	b.qd.Add(m.QDCount)
	b.an.Add(m.ANCount)
	b.ns.Add(m.NSCount)
	b.ar.Add(m.ARCount)
	if m.HasQuestion {
		b.qname.Add(m.QName)
	} else {
		b.qname.Null()
	}
	b.qtype.AddValid(m.QType, m.HasQuestion)
	b.qclass.AddValid(m.QClass, m.HasQuestion)
	b.edns.Add(m.EDNS)
	b.ednsVersion.AddValid(m.EDNSVersion, m.EDNS)
	b.udp.AddValid(m.UDPSize, m.EDNS)
	b.do.Add(m.DO)
	for _, o := range m.Options {
		b.optCode.Add(o.Code)
		b.optData.AddBytes(o.Data)
	}
	b.options.Add(b.optCode.Len())
	b.malformed.Add(r.Err != nil)
	if r.Err != nil {
		b.errs.Add(r.Err.Error())
	} else {
		b.errs.Null()
	}
	registered := ""
	if m.HasQuestion && m.QName != "." && w.skipNames&NameRegistered == 0 {
		registered = w.domains.Registered(m.QName)
	}
	b.names(m, registered, w.skipNames)
	for i, rrs := range [3][]dnsmsg.RR{m.Answer, m.Authority, m.Additional} {
		if w.skip&(dnsmsg.Answer<<i) != 0 {
			b.sections[i].Null()
		} else {
			b.sections[i].Add(rrs)
		}
	}
	e := m.ECS
	b.ecsFamily.AddValid(e.Family, e.Family != 0)
	b.ecsSource.AddValid(e.SourcePrefix, e.Family != 0)
	b.ecsScope.AddValid(e.ScopePrefix, e.Family != 0)
	if e.Family != 0 {
		b.ecsAddress.Add(e.Address)
	} else {
		b.ecsAddress.Null()
	}
	var texts []string
	for _, e := range m.EDE {
		b.edeCode.Add(e.Code)
		if e.Text != "" {
			texts = append(texts, e.Text)
		}
	}
	b.ede.Add(b.edeCode.Len())
	b.edeText.AddOrNull(strings.Join(texts, "; "))
	b.cookie.Add(m.Cookie)
	b.tunnel.AddOrNull(r.Tunnel)
	b.partial.Add(r.Partial)
	b.dnstapType.AddOrNull(r.DnstapType)
	b.dnstapIdentity.AddOrNull(r.DnstapIdentity)
	b.tcpRTT.AddValid(arrow.Duration(r.TCPRTT), r.HasTCPRTT)
	b.rows++
	if b.rows == BatchRows || b.rows%64 == 0 && b.textBytes() >= BatchBytes {
		return w.flush()
	}
	return nil
}

// flush hands the batch built to the writing goroutine and takes one it
// has finished with.
func (w *Writer) flush() error {
	if w.b.rows == 0 {
		return nil
	}
	select {
	case err := <-w.done: // the writer stopped early
		w.done <- err
		return err
	case w.batches <- w.b:
	}
	w.b = <-w.spare
	return nil
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
	if !w.suspended {
		err = w.stop()
	}
	w.cat.Release()
	if err != nil {
		return err
	}
	return w.f.Close()
}

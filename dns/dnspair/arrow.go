package dnspair

import (
	"fmt"
	"io"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/internal/arrowcol"
)

// Schema is the table of transactions: one row per query, answered or
// not, and one per orphan response. time is the query's time (the
// response's for an orphan), so rows sort and partition like messages.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "instance", Type: dnsrec.Categorical},
	{Name: "seq", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "time", Type: tsType},
	{Name: "response_time", Type: tsType, Nullable: true},
	{Name: "latency", Type: arrow.FixedWidthTypes.Duration_ns, Nullable: true},
	{Name: "tcp_rtt", Type: arrow.FixedWidthTypes.Duration_ns, Nullable: true},
	{Name: "transport", Type: dnsrec.Categorical},
	{Name: "ip_version", Type: arrow.PrimitiveTypes.Uint8},
	{Name: "client", Type: arrow.BinaryTypes.String},
	{Name: "client_port", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "server", Type: arrow.BinaryTypes.String},
	{Name: "server_port", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "id", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "opcode", Type: arrow.PrimitiveTypes.Uint8},
	{Name: "qname", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "qtype", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "qclass", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "tld", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "registered_domain", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "rd", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "cd", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "edns_do", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "edns_udp_size", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "request_size", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
	{Name: "response_size", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
	{Name: "rcode", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "aa", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "tc", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "ra", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "ad", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "ancount", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "nscount", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "arcount", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "answers", Type: dnsrec.RRListType},
	{Name: "response_malformed", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "unanswered", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "orphan_response", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "evicted", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "retransmission", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "sample_rate", Type: arrow.PrimitiveTypes.Uint32},
}, nil)

var tsType = &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}

// BatchRows is how many rows go in one record batch.
const BatchRows = 64 << 10

// Writer writes transactions as an Arrow IPC file, ZSTD-compressed as
// dnsrec's records are (dnsrec.RecordsZstdLevel).
type Writer struct {
	instance string
	seq      uint64
	rate     uint32 // SetSampleRate
	f        *ipc.FileWriter
	rows     int
	// Rows counts the rows written.
	Rows    int64
	domains dnsrec.Domains
	cat     *dnsrec.Categories
	addr    []byte
	closed  bool

	// The columns of the batch being built (see arrowcol for why not
	// arrow-go's builders).
	seqs                                               arrowcol.Vals[uint64]
	time, responseTime                                 arrowcol.Vals[arrow.Timestamp]
	latency, tcpRTT                                    arrowcol.Vals[arrow.Duration]
	transport                                          []int8
	ipVersion, opcode                                  arrowcol.Vals[uint8]
	client, server, qname, tld, regDomain              arrowcol.Strs
	clientPort, serverPort, id, qtype, qclass, udpSize arrowcol.Vals[uint16]
	rcode, an, ns, ar                                  arrowcol.Vals[uint16]
	requestSize, responseSize, sampleRate              arrowcol.Vals[uint32]
	rd, cd, do, aa, tc, ra, ad, malformed              arrowcol.Bools
	unanswered, orphan, evicted, retransmission        arrowcol.Bits
	answers                                            dnsrec.RRList
}

// NewWriter starts an IPC file on w for the transactions decided in one
// block, compressed at dnsrec.RecordsZstdLevel.
func NewWriter(w io.Writer, instance string, seq uint64) (*Writer, error) {
	return NewWriterLevel(w, instance, seq, dnsrec.RecordsZstdLevel)
}

// NewWriterLevel is NewWriter compressing at a ZSTD level
// dnsrec.ParseZstd read; 0 is dnsrec.RecordsZstdLevel.
func NewWriterLevel(w io.Writer, instance string, seq uint64, level int) (*Writer, error) {
	if level == 0 {
		level = dnsrec.RecordsZstdLevel
	}
	f, err := ipc.NewFileWriter(w, ipc.WithSchema(Schema), ipc.WithZstdLevel(level), ipc.WithCompressConcurrency(2),
		ipc.WithAllocator(arrowcol.NewRecycler()))
	if err != nil {
		return nil, err
	}
	return &Writer{instance: instance, seq: seq, rate: 1, f: f,
		cat: dnsrec.NewCategories(instance)}, nil
}

// SetSampleRate sets the rate the capture was sampled at, written in
// every row (dnsrec.Writer.SetSampleRate).
func (w *Writer) SetSampleRate(rate uint32) { w.rate = max(rate, 1) }

// Add appends a transaction.
func (w *Writer) Add(t *Txn) error {
	q, r := t.Query, t.Response
	w.seqs.Add(w.seq)
	w.sampleRate.Add(w.rate)
	switch {
	case q != nil:
		w.time.Add(arrow.Timestamp(q.Time.UnixNano()))
	default:
		w.time.Add(arrow.Timestamp(r.Time.UnixNano()))
	}
	var rt arrow.Timestamp
	var latency arrow.Duration
	if r != nil {
		rt = arrow.Timestamp(r.Time.UnixNano())
	}
	if q != nil && r != nil {
		latency = arrow.Duration(r.Time.Sub(q.Time))
	}
	w.responseTime.AddValid(rt, r != nil)
	w.latency.AddValid(latency, q != nil && r != nil)
	var rtt arrow.Duration
	if q != nil {
		rtt = arrow.Duration(q.TCPRTT)
	}
	w.tcpRTT.AddValid(rtt, q != nil && q.HasTCPRTT)
	w.transport = append(w.transport, dnsrec.TransportIndex(t.Key.TCP))
	ipv := uint8(4)
	if t.Key.Client.Is6() && !t.Key.Client.Is4In6() {
		ipv = 6
	}
	w.ipVersion.Add(ipv)
	w.addr = t.Key.Client.AppendTo(w.addr[:0])
	w.client.AddBytes(w.addr)
	w.clientPort.Add(t.Key.ClientPort)
	w.addr = t.Key.Server.AppendTo(w.addr[:0])
	w.server.AddBytes(w.addr)
	w.serverPort.Add(t.Key.ServerPort)
	w.id.Add(t.Key.ID)

	// The question, opcode and query flags: the query's, or an orphan
	// response's own.
	var (
		opcode        uint8
		hasQ          bool
		qname         string
		qtype, qclass uint16
		rd, cd        bool
	)
	if q != nil {
		opcode, hasQ, qname, qtype, qclass, rd, cd = q.Opcode, q.HasQuestion, q.QName, q.QType, q.QClass, q.RD, q.CD
	} else {
		m := &r.Msg
		opcode, hasQ, qname, qtype, qclass, rd, cd = m.Opcode, m.HasQuestion, m.QName, m.QType, m.QClass, m.RD, m.CD
	}
	w.opcode.Add(opcode)
	if hasQ {
		w.qname.Add(qname)
		w.tld.AddOrNull(dnsrec.TLD(qname))
		w.regDomain.AddOrNull(w.domains.Registered(qname))
	} else {
		w.qname.Null()
		w.tld.Null()
		w.regDomain.Null()
	}
	w.qtype.AddValid(qtype, hasQ)
	w.qclass.AddValid(qclass, hasQ)
	w.rd.Add(rd)
	w.cd.Add(cd)
	if q != nil {
		w.do.Add(q.DO)
		w.udpSize.AddValid(q.UDPSize, q.EDNS)
		w.requestSize.Add(uint32(q.Size))
	} else {
		w.do.Null()
		w.udpSize.AddValid(0, false)
		w.requestSize.AddValid(0, false)
	}
	var m dnsmsg.Message
	if r != nil {
		m = r.Msg
		w.responseSize.Add(uint32(r.Size))
	} else {
		w.responseSize.AddValid(0, false)
	}
	w.rcode.AddValid(m.Rcode, r != nil)
	w.aa.AddValid(m.AA, r != nil)
	w.tc.AddValid(m.TC, r != nil)
	w.ra.AddValid(m.RA, r != nil)
	w.ad.AddValid(m.AD, r != nil)
	w.an.AddValid(m.ANCount, r != nil)
	w.ns.AddValid(m.NSCount, r != nil)
	w.ar.AddValid(m.ARCount, r != nil)
	w.answers.Add(m.Answer)
	w.malformed.AddValid(r != nil && r.Err != nil, r != nil)
	w.unanswered.Add(q != nil && r == nil && !t.Evicted && !t.Retransmission)
	w.orphan.Add(q == nil)
	w.evicted.Add(t.Evicted)
	w.retransmission.Add(t.Retransmission)
	w.rows++
	w.Rows++
	if w.rows == BatchRows {
		return w.flush()
	}
	return nil
}

// flush writes the batch built and empties the columns for the next.
func (w *Writer) flush() error {
	if w.rows == 0 {
		return nil
	}
	instance, transport := w.cat.Data(w.transport)
	ts := func(c *arrowcol.Vals[arrow.Timestamp]) arrow.ArrayData {
		return c.Data(tsType, arrow.TimestampTraits.CastToBytes)
	}
	str := func(s *arrowcol.Strs) arrow.ArrayData { return s.Data(arrow.BinaryTypes.String) }
	rec := arrowcol.Record(Schema, w.rows,
		instance,
		arrowcol.Uint64(&w.seqs),
		ts(&w.time), ts(&w.responseTime),
		w.latency.Data(arrow.FixedWidthTypes.Duration_ns, arrow.DurationTraits.CastToBytes),
		w.tcpRTT.Data(arrow.FixedWidthTypes.Duration_ns, arrow.DurationTraits.CastToBytes),
		transport,
		arrowcol.Uint8(&w.ipVersion), str(&w.client), arrowcol.Uint16(&w.clientPort), str(&w.server), arrowcol.Uint16(&w.serverPort), arrowcol.Uint16(&w.id),
		arrowcol.Uint8(&w.opcode), str(&w.qname), arrowcol.Uint16(&w.qtype), arrowcol.Uint16(&w.qclass), str(&w.tld), str(&w.regDomain),
		w.rd.Data(), w.cd.Data(), w.do.Data(), arrowcol.Uint16(&w.udpSize), arrowcol.Uint32(&w.requestSize), arrowcol.Uint32(&w.responseSize),
		arrowcol.Uint16(&w.rcode), w.aa.Data(), w.tc.Data(), w.ra.Data(), w.ad.Data(), arrowcol.Uint16(&w.an), arrowcol.Uint16(&w.ns), arrowcol.Uint16(&w.ar),
		w.answers.Data(), w.malformed.Data(), w.unanswered.Data(), w.orphan.Data(), w.evicted.Data(), w.retransmission.Data(),
		arrowcol.Uint32(&w.sampleRate),
	)
	err := w.f.Write(rec)
	rec.Release()
	w.reset()
	if err != nil {
		return fmt.Errorf("write DNS transactions: %w", err)
	}
	return nil
}

// reset empties the columns, keeping their memory.
func (w *Writer) reset() {
	w.rows = 0
	w.seqs.Reset()
	w.sampleRate.Reset()
	w.time.Reset()
	w.responseTime.Reset()
	w.latency.Reset()
	w.tcpRTT.Reset()
	w.transport = w.transport[:0]
	for _, c := range []*arrowcol.Vals[uint8]{&w.ipVersion, &w.opcode} {
		c.Reset()
	}
	for _, s := range []*arrowcol.Strs{&w.client, &w.server, &w.qname, &w.tld, &w.regDomain} {
		s.Reset()
	}
	for _, c := range []*arrowcol.Vals[uint16]{&w.clientPort, &w.serverPort, &w.id, &w.qtype, &w.qclass, &w.udpSize, &w.rcode, &w.an, &w.ns, &w.ar} {
		c.Reset()
	}
	w.requestSize.Reset()
	w.responseSize.Reset()
	for _, b := range []*arrowcol.Bools{&w.rd, &w.cd, &w.do, &w.aa, &w.tc, &w.ra, &w.ad, &w.malformed} {
		b.Reset()
	}
	for _, b := range []*arrowcol.Bits{&w.unanswered, &w.orphan, &w.evicted, &w.retransmission} {
		b.Reset()
	}
	w.answers.Reset()
}

// Suspend writes every transaction added so far, keeping the file open:
// a block paired apart from its neighbours waits so for what the join
// decides. Add goes on after it; Close ends the file either way.
func (w *Writer) Suspend() error {
	if w.closed {
		return nil
	}
	return w.flush()
}

// Close writes the last batch and the file's footer. A block that
// decided no transaction still makes a valid file with no rows. Closing
// twice does nothing.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	defer w.cat.Release()
	if err := w.flush(); err != nil {
		return err
	}
	return w.f.Close()
}

// String describes the counts for logs.
func (s Stats) String() string {
	return "answered " + strconv.FormatInt(s.Answered, 10) + ", unanswered " + strconv.FormatInt(s.Unanswered, 10) +
		", orphan responses " + strconv.FormatInt(s.Orphans, 10) + ", evicted " + strconv.FormatInt(s.Evicted, 10) +
		", retransmissions " + strconv.FormatInt(s.Retransmissions, 10)
}

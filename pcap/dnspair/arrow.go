package dnspair

import (
	"fmt"
	"io"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/plumb-dev/plumb/pcap/dnsrec"
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
	{Name: "answers", Type: arrow.ListOf(dnsrec.RRType)},
	{Name: "response_malformed", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "unanswered", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "orphan_response", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "evicted", Type: arrow.FixedWidthTypes.Boolean},
}, nil)

var tsType = &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}

// BatchRows is how many rows go in one record batch.
const BatchRows = 64 << 10

// Writer writes transactions as an Arrow IPC file, LZ4-compressed as
// dnsrec's records are (see dnsrec.Writer for why).
type Writer struct {
	instance string
	seq      uint64
	b        *array.RecordBuilder
	f        *ipc.FileWriter
	rows     int
	addr     []byte
	domains  dnsrec.Domains
	closed   bool
	cat      *dnsrec.Categories
	// Rows counts the rows written.
	Rows int64
}

// NewWriter starts an IPC file on w for the transactions decided in one
// block.
func NewWriter(w io.Writer, instance string, seq uint64) (*Writer, error) {
	f, err := ipc.NewFileWriter(w, ipc.WithSchema(Schema), ipc.WithLZ4(), ipc.WithCompressConcurrency(2))
	if err != nil {
		return nil, err
	}
	wr := &Writer{instance: instance, seq: seq, b: array.NewRecordBuilder(memory.DefaultAllocator, Schema), f: f}
	if wr.cat, err = dnsrec.NewCategories(col[*array.BinaryDictionaryBuilder](wr, fInstance), col[*array.BinaryDictionaryBuilder](wr, fTransport), instance); err != nil {
		return nil, err
	}
	return wr, nil
}

// col returns the builder of field i as type B.
func col[B array.Builder](w *Writer, i int) B { return w.b.Field(i).(B) }

func (w *Writer) str(i int, s string) { col[*array.StringBuilder](w, i).Append(s) }
func (w *Writer) null(is ...int) {
	for _, i := range is {
		w.b.Field(i).AppendNull()
	}
}
func (w *Writer) u16(i int, v uint16) { col[*array.Uint16Builder](w, i).Append(v) }
func (w *Writer) u32(i int, v int)    { col[*array.Uint32Builder](w, i).Append(uint32(v)) }
func (w *Writer) boolean(i int, v bool) {
	col[*array.BooleanBuilder](w, i).Append(v)
}
func (w *Writer) ts(i int, t int64) { col[*array.TimestampBuilder](w, i).Append(arrow.Timestamp(t)) }
func (w *Writer) addrCol(i int, a []byte) {
	col[*array.StringBuilder](w, i).BinaryBuilder.Append(a)
}

// Field positions, in Schema order.
const (
	fInstance = iota
	fSeq
	fTime
	fResponseTime
	fLatency
	fTransport
	fIPVersion
	fClient
	fClientPort
	fServer
	fServerPort
	fID
	fOpcode
	fQName
	fQType
	fQClass
	fTLD
	fRegDomain
	fRD
	fCD
	fDO
	fUDPSize
	fRequestSize
	fResponseSize
	fRcode
	fAA
	fTC
	fRA
	fAD
	fAN
	fNS
	fAR
	fAnswers
	fResponseMalformed
	fUnanswered
	fOrphan
	fEvicted
)

// Add appends a transaction.
func (w *Writer) Add(t *Txn) error {
	q, r := t.Query, t.Response
	col[*array.Uint64Builder](w, fSeq).Append(w.seq)
	switch {
	case q != nil:
		w.ts(fTime, q.Time.UnixNano())
	default:
		w.ts(fTime, r.Time.UnixNano())
	}
	if q != nil && r != nil {
		w.ts(fResponseTime, r.Time.UnixNano())
		col[*array.DurationBuilder](w, fLatency).Append(arrow.Duration(r.Time.Sub(q.Time)))
	} else if r != nil {
		w.ts(fResponseTime, r.Time.UnixNano())
		w.null(fLatency)
	} else {
		w.null(fResponseTime, fLatency)
	}
	w.cat.Add(t.Key.TCP)
	ipv := uint8(4)
	if t.Key.Client.Is6() && !t.Key.Client.Is4In6() {
		ipv = 6
	}
	col[*array.Uint8Builder](w, fIPVersion).Append(ipv)
	w.addr = t.Key.Client.AppendTo(w.addr[:0])
	w.addrCol(fClient, w.addr)
	w.u16(fClientPort, t.Key.ClientPort)
	w.addr = t.Key.Server.AppendTo(w.addr[:0])
	w.addrCol(fServer, w.addr)
	w.u16(fServerPort, t.Key.ServerPort)
	w.u16(fID, t.Key.ID)

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
	col[*array.Uint8Builder](w, fOpcode).Append(opcode)
	if hasQ {
		w.str(fQName, qname)
		w.u16(fQType, qtype)
		w.u16(fQClass, qclass)
		if tld := dnsrec.TLD(qname); tld != "" {
			w.str(fTLD, tld)
		} else {
			w.null(fTLD)
		}
		if reg := w.domains.Registered(qname); reg != "" {
			w.str(fRegDomain, reg)
		} else {
			w.null(fRegDomain)
		}
	} else {
		w.null(fQName, fQType, fQClass, fTLD, fRegDomain)
	}
	w.boolean(fRD, rd)
	w.boolean(fCD, cd)
	if q != nil {
		w.boolean(fDO, q.DO)
		if q.EDNS {
			w.u16(fUDPSize, q.UDPSize)
		} else {
			w.null(fUDPSize)
		}
		w.u32(fRequestSize, q.Size)
	} else {
		w.null(fDO, fUDPSize, fRequestSize)
	}
	if r != nil {
		m := &r.Msg
		w.u32(fResponseSize, r.Size)
		w.u16(fRcode, m.Rcode)
		w.boolean(fAA, m.AA)
		w.boolean(fTC, m.TC)
		w.boolean(fRA, m.RA)
		w.boolean(fAD, m.AD)
		w.u16(fAN, m.ANCount)
		w.u16(fNS, m.NSCount)
		w.u16(fAR, m.ARCount)
		dnsrec.AppendRRs(col[*array.ListBuilder](w, fAnswers), m.Answer)
		w.boolean(fResponseMalformed, r.Err != nil)
	} else {
		w.null(fResponseSize, fRcode, fAA, fTC, fRA, fAD, fAN, fNS, fAR)
		dnsrec.AppendRRs(col[*array.ListBuilder](w, fAnswers), nil)
		w.null(fResponseMalformed)
	}
	w.boolean(fUnanswered, q != nil && r == nil && !t.Evicted)
	w.boolean(fOrphan, q == nil)
	w.boolean(fEvicted, t.Evicted)
	w.rows++
	w.Rows++
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
	w.rows = 0
	rec := w.b.NewRecordBatch()
	defer rec.Release()
	if err := w.f.Write(rec); err != nil {
		return fmt.Errorf("write DNS transactions: %w", err)
	}
	return nil
}

// Close writes the last batch and the file's footer. A block that
// decided no transaction still makes a valid file with no rows. Closing
// twice does nothing.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	defer w.b.Release()
	if err := w.flush(); err != nil {
		return err
	}
	return w.f.Close()
}

// String describes the counts for logs.
func (s Stats) String() string {
	return "answered " + strconv.FormatInt(s.Answered, 10) + ", unanswered " + strconv.FormatInt(s.Unanswered, 10) +
		", orphan responses " + strconv.FormatInt(s.Orphans, 10) + ", evicted " + strconv.FormatInt(s.Evicted, 10)
}

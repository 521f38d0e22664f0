package dnsrec

import (
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Schema is the table of DNS messages: one row per message, the columns
// pandas and polars read directly.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "instance", Type: arrow.BinaryTypes.String},
	{Name: "seq", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "time", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
	{Name: "src", Type: arrow.BinaryTypes.String},
	{Name: "dst", Type: arrow.BinaryTypes.String},
	{Name: "sport", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "dport", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "transport", Type: arrow.BinaryTypes.String},
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
	{Name: "do", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "edns_options", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "malformed", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "error", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// BatchRows is how many rows go in one record batch.
const BatchRows = 64 << 10

// Writer writes records as an Arrow IPC file, ZSTD-compressed, in
// batches of BatchRows.
type Writer struct {
	instance string
	seq      uint64
	b        *array.RecordBuilder
	f        *ipc.FileWriter
	rows     int
	addr     []byte
	// Rows counts the rows written.
	Rows int64
}

// NewWriter starts an IPC file on w for the records of one block.
func NewWriter(w io.Writer, instance string, seq uint64) (*Writer, error) {
	f, err := ipc.NewFileWriter(w, ipc.WithSchema(Schema), ipc.WithZstd())
	if err != nil {
		return nil, err
	}
	return &Writer{instance: instance, seq: seq, b: array.NewRecordBuilder(memory.DefaultAllocator, Schema), f: f}, nil
}

// Add appends a record.
func (w *Writer) Add(r *Record) error {
	f := w.b.Fields()
	m := &r.Msg
	f[0].(*array.StringBuilder).Append(w.instance)
	f[1].(*array.Uint64Builder).Append(w.seq)
	f[2].(*array.TimestampBuilder).Append(arrow.Timestamp(r.Time.UnixNano()))
	w.addr = r.Src.AppendTo(w.addr[:0])
	f[3].(*array.StringBuilder).BinaryBuilder.Append(w.addr)
	w.addr = r.Dst.AppendTo(w.addr[:0])
	f[4].(*array.StringBuilder).BinaryBuilder.Append(w.addr)
	f[5].(*array.Uint16Builder).Append(r.SrcPort)
	f[6].(*array.Uint16Builder).Append(r.DstPort)
	if r.TCP {
		f[7].(*array.StringBuilder).Append("tcp")
	} else {
		f[7].(*array.StringBuilder).Append("udp")
	}
	f[8].(*array.Uint8Builder).Append(r.IPVersion)
	f[9].(*array.Uint32Builder).Append(uint32(r.Size))
	f[10].(*array.Uint16Builder).Append(m.ID)
	f[11].(*array.BooleanBuilder).Append(m.QR)
	f[12].(*array.Uint8Builder).Append(m.Opcode)
	for i, v := range []bool{m.AA, m.TC, m.RD, m.RA, m.AD, m.CD} {
		f[13+i].(*array.BooleanBuilder).Append(v)
	}
	for i, v := range []uint16{m.Rcode, m.QDCount, m.ANCount, m.NSCount, m.ARCount} {
		f[19+i].(*array.Uint16Builder).Append(v)
	}
	if m.HasQuestion {
		f[24].(*array.StringBuilder).Append(m.QName)
		f[25].(*array.Uint16Builder).Append(m.QType)
		f[26].(*array.Uint16Builder).Append(m.QClass)
	} else {
		f[24].AppendNull()
		f[25].AppendNull()
		f[26].AppendNull()
	}
	f[27].(*array.BooleanBuilder).Append(m.EDNS)
	if m.EDNS {
		f[28].(*array.Uint8Builder).Append(m.EDNSVersion)
		f[29].(*array.Uint16Builder).Append(m.UDPSize)
	} else {
		f[28].AppendNull()
		f[29].AppendNull()
	}
	f[30].(*array.BooleanBuilder).Append(m.DO)
	f[31].(*array.BooleanBuilder).Append(m.EDNSOptions)
	f[32].(*array.BooleanBuilder).Append(r.Err != nil)
	if r.Err != nil {
		f[33].(*array.StringBuilder).Append(r.Err.Error())
	} else {
		f[33].AppendNull()
	}
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
	rec := w.b.NewRecordBatch()
	defer rec.Release()
	w.rows = 0
	if err := w.f.Write(rec); err != nil {
		return fmt.Errorf("write DNS records: %w", err)
	}
	return nil
}

// Close writes the last batch and the file's footer. A block without a
// message still makes a valid file with the schema and no rows.
func (w *Writer) Close() error {
	defer w.b.Release()
	if err := w.flush(); err != nil {
		return err
	}
	return w.f.Close()
}

package dnsrec

import (
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/internal/arrowcol"
)

// batch holds the columns of one record batch of Schema while it is
// built (see arrowcol for why not arrow-go's builders).
type batch struct {
	rows                                            int
	seq                                             arrowcol.Vals[uint64]
	time                                            arrowcol.Vals[arrow.Timestamp]
	src, dst, qname, errs, qnameRaw, tld, regDomain arrowcol.Strs
	ecsAddress, edeText, tunnel                     arrowcol.Strs
	dnstapType, dnstapIdentity                      arrowcol.Strs
	sport, dport, id, rcode, qd, an, ns, ar         arrowcol.Vals[uint16]
	qtype, qclass, udp, ecsFamily                   arrowcol.Vals[uint16]
	transport                                       []int8 // TransportIndex of each row
	ipVersion, opcode, ednsVersion, labels          arrowcol.Vals[uint8]
	ecsSource, ecsScope                             arrowcol.Vals[uint8]
	size, sampleRate                                arrowcol.Vals[uint32]
	qr, edns, do, malformed, cookie, partial        arrowcol.Bits
	flags                                           [6]arrowcol.Bits // aa tc rd ra ad cd
	options                                         arrowcol.ListOffsets
	optCode                                         arrowcol.Vals[uint16]
	optData                                         arrowcol.Strs
	sections                                        [3]RRList // answers, authority, additional
	ede                                             arrowcol.ListOffsets
	edeCode                                         arrowcol.Vals[uint16]
	tcpRTT                                          arrowcol.Vals[arrow.Duration]
}

func newBatch() *batch {
	b := new(batch)
	b.reset()
	return b
}

// reset empties the batch, keeping its buffers.
func (b *batch) reset() {
	b.rows = 0
	b.seq.Reset()
	b.time.Reset()
	for _, s := range []*arrowcol.Strs{&b.src, &b.dst, &b.qname, &b.errs, &b.qnameRaw, &b.tld, &b.regDomain, &b.ecsAddress,
		&b.edeText, &b.tunnel, &b.optData, &b.dnstapType, &b.dnstapIdentity} {
		s.Reset()
	}
	for _, c := range []*arrowcol.Vals[uint16]{&b.sport, &b.dport, &b.id, &b.rcode, &b.qd, &b.an, &b.ns, &b.ar, &b.qtype, &b.qclass,
		&b.udp, &b.ecsFamily, &b.optCode, &b.edeCode} {
		c.Reset()
	}
	b.transport = b.transport[:0]
	for _, c := range []*arrowcol.Vals[uint8]{&b.ipVersion, &b.opcode, &b.ednsVersion, &b.labels, &b.ecsSource, &b.ecsScope} {
		c.Reset()
	}
	b.size.Reset()
	b.sampleRate.Reset()
	b.tcpRTT.Reset()
	for _, x := range b.bools() {
		x.Reset()
	}
	b.options.Reset()
	b.ede.Reset()
	for i := range b.sections {
		b.sections[i].Reset()
	}
}

// textBytes is the size of the batch's largest columns: the records'
// names and data.
func (b *batch) textBytes() int {
	n := 0
	for i := range b.sections {
		n += b.sections[i].name.Bytes() + b.sections[i].rdata.Bytes()
	}
	return n
}

func (b *batch) bools() []*arrowcol.Bits {
	return []*arrowcol.Bits{&b.qr, &b.edns, &b.do, &b.malformed, &b.cookie, &b.partial,
		&b.flags[0], &b.flags[1], &b.flags[2], &b.flags[3], &b.flags[4], &b.flags[5]}
}

// names adds the name columns of the question: as sent (when not as
// qname), the label count, the top-level domain and the registered
// domain (public suffix plus one label); null without a question, and
// those of skip null in every row.
func (b *batch) names(m *dnsmsg.Message, registered string, skip Names) {
	if !m.HasQuestion {
		b.qnameRaw.Null()
		b.labels.AddValid(0, false)
		b.tld.Null()
		b.regDomain.Null()
		return
	}
	// As sent only where it differs from qname (in case): most names
	// are sent in lower case, and a copy of every name would be a fifth
	// of the table stored.
	if m.QNameRaw != m.QName && skip&NameRaw == 0 {
		b.qnameRaw.Add(m.QNameRaw)
	} else {
		b.qnameRaw.Null()
	}
	root := m.QName == "."
	b.labels.AddValid(uint8(min(strings.Count(m.QName, ".")+1, 255)*btoi(!root)), skip&NameLabels == 0)
	if root || skip&NameTLD != 0 {
		b.tld.Null()
	} else {
		b.tld.Add(TLD(m.QName))
	}
	if root || skip&NameRegistered != 0 {
		b.regDomain.Null()
	} else {
		b.regDomain.AddOrNull(registered)
	}
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// record makes the batch an Arrow record batch over its buffers, which
// stay the batch's: write it before the batch is reset.
func (b *batch) record(cat *Categories) arrow.RecordBatch {
	instance, transport := cat.Data(b.transport)
	str := func(s *arrowcol.Strs) arrow.ArrayData { return s.Data(arrow.BinaryTypes.String) }
	return arrowcol.Record(Schema, b.rows,
		instance,
		arrowcol.Uint64(&b.seq),
		b.time.Data(Schema.Field(2).Type, arrow.TimestampTraits.CastToBytes),
		str(&b.src), str(&b.dst), arrowcol.Uint16(&b.sport), arrowcol.Uint16(&b.dport),
		transport,
		arrowcol.Uint8(&b.ipVersion),
		arrowcol.Uint32(&b.size),
		arrowcol.Uint16(&b.id), b.qr.Data(), arrowcol.Uint8(&b.opcode),
		b.flags[0].Data(), b.flags[1].Data(), b.flags[2].Data(), b.flags[3].Data(), b.flags[4].Data(), b.flags[5].Data(),
		arrowcol.Uint16(&b.rcode), arrowcol.Uint16(&b.qd), arrowcol.Uint16(&b.an), arrowcol.Uint16(&b.ns), arrowcol.Uint16(&b.ar),
		str(&b.qname), arrowcol.Uint16(&b.qtype), arrowcol.Uint16(&b.qclass),
		b.edns.Data(), arrowcol.Uint8(&b.ednsVersion), arrowcol.Uint16(&b.udp), b.do.Data(),
		b.options.Data(Schema.Field(31).Type, arrowcol.StructData(optionType, b.optCode.Len(), arrowcol.Uint16(&b.optCode), b.optData.Data(arrow.BinaryTypes.Binary))),
		b.malformed.Data(), str(&b.errs),
		str(&b.qnameRaw), arrowcol.Uint8(&b.labels), str(&b.tld), str(&b.regDomain),
		b.sections[0].Data(), b.sections[1].Data(), b.sections[2].Data(),
		arrowcol.Uint16(&b.ecsFamily), arrowcol.Uint8(&b.ecsSource), arrowcol.Uint8(&b.ecsScope), str(&b.ecsAddress),
		b.ede.Data(Schema.Field(45).Type, arrowcol.Uint16(&b.edeCode)),
		str(&b.edeText), b.cookie.Data(), str(&b.tunnel), b.partial.Data(),
		str(&b.dnstapType), str(&b.dnstapIdentity),
		b.tcpRTT.Data(arrow.FixedWidthTypes.Duration_ns, arrow.DurationTraits.CastToBytes),
		arrowcol.Uint32(&b.sampleRate),
	)
}

// RRList is a list<RRType> column: a row's records a row at a time.
type RRList struct {
	offsets     arrowcol.ListOffsets
	valid       arrowcol.Bits
	name, rdata arrowcol.Strs
	typ, class  arrowcol.Vals[uint16]
	ttl         arrowcol.Vals[uint32]
}

// Null appends a row whose records were not read.
func (l *RRList) Null() {
	l.valid.Valid(max(len(l.offsets)-1, 0), false)
	l.offsets.Add(l.name.Rows())
}

// Add appends a row of records (none is an empty list).
func (l *RRList) Add(rrs []dnsmsg.RR) {
	for i := range rrs {
		rr := &rrs[i]
		l.name.Add(rr.Name)
		l.typ.Add(rr.Type)
		l.class.Add(rr.Class)
		l.ttl.Add(rr.TTL)
		l.rdata.Add(rr.RData)
	}
	if l.valid.Len() > 0 {
		l.valid.Add(true)
	}
	l.offsets.Add(l.name.Rows())
}

// Reset empties the column, keeping its memory.
func (l *RRList) Reset() {
	l.offsets.Reset()
	l.valid.Reset()
	l.name.Reset()
	l.rdata.Reset()
	l.typ.Reset()
	l.class.Reset()
	l.ttl.Reset()
}

// Data is the column's array data, of type list<RRType>; see arrowcol
// for how long it may be used.
func (l *RRList) Data() arrow.ArrayData {
	items := arrowcol.StructData(RRType, l.name.Rows(), l.name.Data(arrow.BinaryTypes.String),
		arrowcol.Uint16(&l.typ), arrowcol.Uint16(&l.class), arrowcol.Uint32(&l.ttl), l.rdata.Data(arrow.BinaryTypes.String))
	return l.offsets.DataValid(RRListType, items, &l.valid)
}

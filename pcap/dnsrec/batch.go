package dnsrec

import (
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/plumb-dev/plumb/pcap/dnsmsg"
)

// batch holds the columns of one record batch of Schema while it is
// built, in the column buffers of columns.go.
type batch struct {
	rows                                            int
	seq                                             vals[uint64]
	time                                            vals[arrow.Timestamp]
	src, dst, qname, errs, qnameRaw, tld, regDomain strs
	ecsAddress, edeText, tunnel                     strs
	sport, dport, id, rcode, qd, an, ns, ar         vals[uint16]
	qtype, qclass, udp, ecsFamily                   vals[uint16]
	transport                                       []int8 // the instance's indices are all 0
	ipVersion, opcode, ednsVersion, labels          vals[uint8]
	ecsSource, ecsScope                             vals[uint8]
	size                                            vals[uint32]
	qr, edns, do, malformed, cookie, partial        bits
	flags                                           [6]bits // aa tc rd ra ad cd
	options                                         listOffsets
	optCode                                         vals[uint16]
	optData                                         strs
	sections                                        [3]rrList // answers, authority, additional
	ede                                             listOffsets
	edeCode                                         vals[uint16]
	zeros                                           []int8
}

func newBatch() *batch {
	b := new(batch)
	b.reset()
	return b
}

// reset empties the batch, keeping its buffers.
func (b *batch) reset() {
	b.rows = 0
	b.seq.reset()
	b.time.reset()
	for _, s := range []*strs{&b.src, &b.dst, &b.qname, &b.errs, &b.qnameRaw, &b.tld, &b.regDomain, &b.ecsAddress,
		&b.edeText, &b.tunnel, &b.optData} {
		s.reset()
	}
	for _, c := range []*vals[uint16]{&b.sport, &b.dport, &b.id, &b.rcode, &b.qd, &b.an, &b.ns, &b.ar, &b.qtype, &b.qclass,
		&b.udp, &b.ecsFamily, &b.optCode, &b.edeCode} {
		c.reset()
	}
	b.transport = b.transport[:0]
	for _, c := range []*vals[uint8]{&b.ipVersion, &b.opcode, &b.ednsVersion, &b.labels, &b.ecsSource, &b.ecsScope} {
		c.reset()
	}
	b.size.reset()
	for _, x := range b.bools() {
		x.reset()
	}
	b.options.reset()
	b.ede.reset()
	for i := range b.sections {
		b.sections[i].reset()
	}
}

func (b *batch) bools() []*bits {
	return []*bits{&b.qr, &b.edns, &b.do, &b.malformed, &b.cookie, &b.partial,
		&b.flags[0], &b.flags[1], &b.flags[2], &b.flags[3], &b.flags[4], &b.flags[5]}
}

// names adds the name columns of the question: as sent (when not as
// qname), the label count, the top-level domain and the registered
// domain (public suffix plus one label), null without a question.
func (b *batch) names(m *dnsmsg.Message, registered string) {
	if !m.HasQuestion {
		b.qnameRaw.null()
		b.labels.addValid(0, false)
		b.tld.null()
		b.regDomain.null()
		return
	}
	// As sent only where it differs from qname (in case): most names
	// are sent in lower case, and a copy of every name would be a fifth
	// of the table stored.
	if m.QNameRaw != m.QName {
		b.qnameRaw.add(m.QNameRaw)
	} else {
		b.qnameRaw.null()
	}
	if m.QName == "." {
		b.labels.addValid(0, true)
		b.tld.null()
		b.regDomain.null()
		return
	}
	b.labels.addValid(uint8(min(strings.Count(m.QName, ".")+1, 255)), true)
	b.tld.add(TLD(m.QName))
	b.regDomain.addOrNull(registered)
}

// record makes the batch an Arrow record batch over its buffers, which
// stay the batch's: write it before the batch is reset.
func (b *batch) record(dicts [2]arrow.Array) arrow.RecordBatch {
	if cap(b.zeros) < b.rows {
		b.zeros = make([]int8, b.rows)
	}
	u16 := func(c *vals[uint16]) arrow.ArrayData {
		return c.data(arrow.PrimitiveTypes.Uint16, arrow.Uint16Traits.CastToBytes)
	}
	u8 := func(c *vals[uint8]) arrow.ArrayData {
		return c.data(arrow.PrimitiveTypes.Uint8, arrow.Uint8Traits.CastToBytes)
	}
	str := func(s *strs) arrow.ArrayData { return s.data(arrow.BinaryTypes.String) }
	category := func(idx []int8, dict arrow.Array) arrow.ArrayData {
		d := array.NewData(Categorical, len(idx), []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int8Traits.CastToBytes(idx))}, nil, 0, 0)
		d.SetDictionary(dict.Data()) // retained by d
		return d
	}
	cols := []arrow.ArrayData{
		category(b.zeros[:b.rows], dicts[0]),
		b.seq.data(arrow.PrimitiveTypes.Uint64, arrow.Uint64Traits.CastToBytes),
		b.time.data(Schema.Field(2).Type, arrow.TimestampTraits.CastToBytes),
		str(&b.src), str(&b.dst), u16(&b.sport), u16(&b.dport),
		category(b.transport, dicts[1]),
		u8(&b.ipVersion),
		b.size.data(arrow.PrimitiveTypes.Uint32, arrow.Uint32Traits.CastToBytes),
		u16(&b.id), b.qr.data(), u8(&b.opcode),
		b.flags[0].data(), b.flags[1].data(), b.flags[2].data(), b.flags[3].data(), b.flags[4].data(), b.flags[5].data(),
		u16(&b.rcode), u16(&b.qd), u16(&b.an), u16(&b.ns), u16(&b.ar),
		str(&b.qname), u16(&b.qtype), u16(&b.qclass),
		b.edns.data(), u8(&b.ednsVersion), u16(&b.udp), b.do.data(),
		b.options.data(Schema.Field(31).Type, structData(optionType, b.optCode.len(), u16(&b.optCode), b.optData.data(arrow.BinaryTypes.Binary))),
		b.malformed.data(), str(&b.errs),
		str(&b.qnameRaw), u8(&b.labels), str(&b.tld), str(&b.regDomain),
		b.sections[0].data(), b.sections[1].data(), b.sections[2].data(),
		u16(&b.ecsFamily), u8(&b.ecsSource), u8(&b.ecsScope), str(&b.ecsAddress),
		b.ede.data(Schema.Field(45).Type, u16(&b.edeCode)),
		str(&b.edeText), b.cookie.data(), str(&b.tunnel), b.partial.data(),
	}
	arrays := make([]arrow.Array, len(cols))
	for i, d := range cols {
		arrays[i] = array.MakeFromData(d)
		d.Release()
	}
	rec := array.NewRecordBatch(Schema, arrays, int64(b.rows))
	for _, a := range arrays {
		a.Release()
	}
	return rec
}

// rrList is a list<RRType> column.
type rrList struct {
	offsets     listOffsets
	name, rdata strs
	typ, class  vals[uint16]
	ttl         vals[uint32]
}

func (l *rrList) add(rrs []dnsmsg.RR) {
	for i := range rrs {
		rr := &rrs[i]
		l.name.add(rr.Name)
		l.typ.add(rr.Type)
		l.class.add(rr.Class)
		l.ttl.add(rr.TTL)
		l.rdata.add(rr.RData)
	}
	l.offsets.add(l.name.rows())
}

func (l *rrList) reset() {
	l.offsets.reset()
	l.name.reset()
	l.rdata.reset()
	l.typ.reset()
	l.class.reset()
	l.ttl.reset()
}

func (l *rrList) data() arrow.ArrayData {
	items := structData(RRType, l.name.rows(), l.name.data(arrow.BinaryTypes.String),
		l.typ.data(arrow.PrimitiveTypes.Uint16, arrow.Uint16Traits.CastToBytes),
		l.class.data(arrow.PrimitiveTypes.Uint16, arrow.Uint16Traits.CastToBytes),
		l.ttl.data(arrow.PrimitiveTypes.Uint32, arrow.Uint32Traits.CastToBytes), l.rdata.data(arrow.BinaryTypes.String))
	return l.offsets.data(Schema.Field(38).Type, items)
}

// Package pdnspb reads the protobuf messages PowerDNS Recursor
// (protobufServer) and dnsdist (RemoteLogAction, RemoteLogResponseAction)
// log, PBDNSMessage of PowerDNS's dnsmessage.proto, and turns each into a
// dnstap message, so that everything that reads dnstap (the agent's
// blocks, builtin:dns) reads them unchanged.
//
// A PBDNSMessage carries no DNS message on the wire, only its parts: the
// question, the id, the response code and (from the Recursor, or dnsdist
// when asked) the answer's records. Dnstap turns those back into a DNS
// message: a header with the id, the QR bit and the rcode, the question,
// and the records in the answer section. What the log leaves out (the
// other flags, EDNS, the authority and additional sections) is not there.
package pdnspb

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/plumb-dev/plumb/dns/dnstap"
	"github.com/plumb-dev/plumb/internal/protofields"
)

// Types of a PBDNSMessage.
const (
	Query            = 1 // a query a server received
	Response         = 2 // the response it sent
	OutgoingQuery    = 3 // a query a resolver sent
	IncomingResponse = 4 // the response it received
)

// MaxMessage bounds one message: its length is 16 bits on the wire.
const MaxMessage = 1<<16 - 1

// Message is what a PBDNSMessage says.
type Message struct {
	Type           uint64
	ServerIdentity string
	// Protocol numbers transports as dnstap does (1 UDP, 2 TCP, 3 DoT,
	// 4 DoH, 5 and 6 DNSCrypt, 7 DoQ).
	Protocol         uint64
	From, To         netip.Addr
	FromPort, ToPort uint16
	Time             time.Time // when the message was seen
	QueryTime        time.Time // a response's query, when the log says
	ID               uint16
	QName            string
	QType, QClass    uint16
	Rcode            uint16
	RRs              []RR // of a response
}

// RR is a resource record of a response.
type RR struct {
	Name        string
	Type, Class uint16
	TTL         uint32
	Rdata       []byte
}

// ErrMalformed is wrapped by the errors of messages that do not read.
var ErrMalformed = errors.New("malformed PowerDNS protobuf message")

// Decode reads a PBDNSMessage.
func Decode(b []byte) (Message, error) {
	var m Message
	var sec, usec uint64
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, p []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			m.Type = v
		case num == 3 && typ == protowire.BytesType:
			m.ServerIdentity = string(p)
		case num == 5 && typ == protowire.VarintType:
			m.Protocol = v
		case num == 6 && typ == protowire.BytesType:
			m.From, _ = netip.AddrFromSlice(p)
		case num == 7 && typ == protowire.BytesType:
			m.To, _ = netip.AddrFromSlice(p)
		case num == 9 && typ == protowire.VarintType:
			sec = v
		case num == 10 && typ == protowire.VarintType:
			usec = v
		case num == 11 && typ == protowire.VarintType:
			m.ID = uint16(v)
		case num == 12 && typ == protowire.BytesType:
			return fields(p, func(num protowire.Number, typ protowire.Type, v uint64, p []byte) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					m.QName = string(p)
				case num == 2 && typ == protowire.VarintType:
					m.QType = uint16(v)
				case num == 3 && typ == protowire.VarintType:
					m.QClass = uint16(v)
				}
				return nil
			})
		case num == 13 && typ == protowire.BytesType:
			var qsec, qusec uint64
			err := fields(p, func(num protowire.Number, typ protowire.Type, v uint64, p []byte) error {
				switch {
				case num == 1 && typ == protowire.VarintType:
					m.Rcode = uint16(v)
				case num == 2 && typ == protowire.BytesType:
					var rr RR
					if err := fields(p, func(num protowire.Number, typ protowire.Type, v uint64, p []byte) error {
						switch {
						case num == 1 && typ == protowire.BytesType:
							rr.Name = string(p)
						case num == 2 && typ == protowire.VarintType:
							rr.Type = uint16(v)
						case num == 3 && typ == protowire.VarintType:
							rr.Class = uint16(v)
						case num == 4 && typ == protowire.VarintType:
							rr.TTL = uint32(v)
						case num == 5 && typ == protowire.BytesType:
							rr.Rdata = p
						}
						return nil
					}); err != nil {
						return err
					}
					m.RRs = append(m.RRs, rr)
				case num == 5 && typ == protowire.VarintType:
					qsec = v
				case num == 6 && typ == protowire.VarintType:
					qusec = v
				}
				return nil
			})
			if err == nil && (qsec > math.MaxUint32 || qusec >= 1e6) {
				err = fmt.Errorf("%w: query time %d s %d µs", ErrMalformed, qsec, qusec)
			}
			if qsec > 0 {
				m.QueryTime = time.Unix(int64(qsec), int64(qusec)*1000).UTC()
			}
			return err
		case num == 20 && typ == protowire.VarintType:
			m.FromPort = uint16(v)
		case num == 21 && typ == protowire.VarintType:
			m.ToPort = uint16(v)
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	if m.Type < Query || m.Type > IncomingResponse {
		return m, fmt.Errorf("%w: type %d", ErrMalformed, m.Type)
	}
	if sec > math.MaxUint32 || usec >= 1e6 { // uint32 on the wire, as dnstap's seconds
		return m, fmt.Errorf("%w: time %d s %d µs", ErrMalformed, sec, usec)
	}
	m.Time = time.Unix(int64(sec), int64(usec)*1000).UTC()
	return m, nil
}

// fields walks a message's fields (protofields.Walk), its wire errors
// as ErrMalformed.
func fields(b []byte, fn func(protowire.Number, protowire.Type, uint64, []byte) error) error {
	err := protofields.Walk(b, fn)
	if errors.Is(err, protofields.ErrWire) {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return err
}

// IsResponse says whether the message logs a response.
func (m *Message) IsResponse() bool { return m.Type == Response || m.Type == IncomingResponse }

// Dnstap is the message as a dnstap message: a server's queries and
// responses as CLIENT_QUERY and CLIENT_RESPONSE, a resolver's own as
// RESOLVER_QUERY and RESOLVER_RESPONSE, the requestor as the query's
// address, with the DNS message rebuilt from its parts.
func (m *Message) Dnstap() (dnstap.Message, error) {
	d := dnstap.Message{Identity: m.ServerIdentity, Protocol: m.Protocol,
		QueryAddr: m.From, ResponseAddr: m.To, QueryPort: m.FromPort, ResponsePort: m.ToPort}
	switch m.Type {
	case Query:
		d.Type = 5
	case Response:
		d.Type = 6
	case OutgoingQuery:
		d.Type = 3
	case IncomingResponse:
		d.Type = 4
	}
	wire, err := m.wire()
	if err != nil {
		return d, err
	}
	if m.IsResponse() {
		d.ResponseTime, d.ResponseMessage, d.QueryTime = m.Time, wire, m.QueryTime
	} else {
		d.QueryTime, d.QueryMessage = m.Time, wire
	}
	return d, nil
}

// wire rebuilds the DNS message the log describes.
func (m *Message) wire() ([]byte, error) {
	// An extended rcode's upper bits would need EDNS, which the log
	// does not carry.
	h := dnsmessage.Header{ID: m.ID, Response: m.IsResponse(), RCode: dnsmessage.RCode(m.Rcode & 0xf)}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if m.QName != "" {
		name, err := fqdn(m.QName)
		if err != nil {
			return nil, err
		}
		if err := b.StartQuestions(); err != nil {
			return nil, err
		}
		class := dnsmessage.Class(m.QClass)
		if class == 0 {
			class = dnsmessage.ClassINET
		}
		if err := b.Question(dnsmessage.Question{Name: name, Type: dnsmessage.Type(m.QType), Class: class}); err != nil {
			return nil, fmt.Errorf("%w: question %q: %v", ErrMalformed, m.QName, err)
		}
	}
	if len(m.RRs) > 0 {
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		for _, rr := range m.RRs {
			name, err := fqdn(rr.Name)
			if err != nil {
				return nil, err
			}
			class := dnsmessage.Class(rr.Class)
			if class == 0 {
				class = dnsmessage.ClassINET
			}
			hdr := dnsmessage.ResourceHeader{Name: name, Type: dnsmessage.Type(rr.Type), Class: class, TTL: rr.TTL}
			if err := b.UnknownResource(hdr, dnsmessage.UnknownResource{Type: dnsmessage.Type(rr.Type), Data: rr.Rdata}); err != nil {
				return nil, fmt.Errorf("%w: record %q: %v", ErrMalformed, rr.Name, err)
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return out, nil
}

func fqdn(s string) (dnsmessage.Name, error) {
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	n, err := dnsmessage.NewName(s)
	if err != nil {
		return n, fmt.Errorf("%w: name %q: %v", ErrMalformed, s, err)
	}
	return n, nil
}

// Frame decodes a PBDNSMessage and encodes it as a dnstap frame.
func Frame(b []byte) ([]byte, error) {
	m, err := Decode(b)
	if err != nil {
		return nil, err
	}
	d, err := m.Dnstap()
	if err != nil {
		return nil, err
	}
	return dnstap.Encode(&d), nil
}

// Package protofields walks the fields of a protobuf message in wire
// format, for the decoders of outside bytes that read a few fields
// without generated types (dnstap's frames, PowerDNS's PBDNSMessage):
// generated types read fields their version predates as unknown and
// cost an allocation per message.
package protofields

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrWire is wrapped by the errors of bytes that are not protobuf.
var ErrWire = errors.New("not protobuf wire format")

// Walk calls fn with each field of message b: its number, wire type,
// and value (varints and fixed-width ones) or bytes (which alias b). It
// stops at fn's first error and returns it as is.
func Walk(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, p []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrWire, protowire.ParseError(n))
		}
		b = b[n:]
		var v uint64
		var p []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			p, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %v", ErrWire, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v, p); err != nil {
			return err
		}
	}
	return nil
}

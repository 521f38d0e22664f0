package flight

import (
	"fmt"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Block bytes dominate Plumb's traffic, so the FlightData messages that
// carry them skip two copies the stock protobuf codec makes: on send, the
// body is handed to gRPC as a reference-counted buffer instead of being
// marshalled into a new one; on receive, DataBody aliases the received
// bytes instead of being copied out of them. Every other message, and the
// wire format, are unchanged: this is still the "proto" codec.

// FlightData field numbers (Flight.proto).
const (
	fieldDescriptor = 1
	fieldDataHeader = 2
	fieldAppMeta    = 3
	fieldDataBody   = 1000
)

// rawData is a FlightData to send whose body is a buffer owned by gRPC once
// sent: Marshal hands over rawData's reference to it.
type rawData struct {
	desc   *aflight.FlightDescriptor
	header []byte
	meta   []byte
	body   mem.Buffer // may be nil
}

type codec struct {
	proto encoding.CodecV2
}

// Codec is the gRPC codec both sides use for Flight: the "proto" codec,
// with FlightData bodies sent and received without a copy.
func Codec() encoding.CodecV2 { return codec{proto: encoding.GetCodecV2("proto")} }

// Name is "proto": the bytes on the wire are protobuf.
func (codec) Name() string { return "proto" }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*rawData)
	if !ok {
		return c.proto.Marshal(v)
	}
	head := make([]byte, 0, 32+len(r.header)+len(r.meta))
	if r.desc != nil {
		d, err := proto.Marshal(r.desc)
		if err != nil {
			return nil, err
		}
		head = protowire.AppendTag(head, fieldDescriptor, protowire.BytesType)
		head = protowire.AppendBytes(head, d)
	}
	if len(r.header) > 0 {
		head = protowire.AppendTag(head, fieldDataHeader, protowire.BytesType)
		head = protowire.AppendBytes(head, r.header)
	}
	if len(r.meta) > 0 {
		head = protowire.AppendTag(head, fieldAppMeta, protowire.BytesType)
		head = protowire.AppendBytes(head, r.meta)
	}
	if r.body == nil || r.body.Len() == 0 {
		if r.body != nil {
			r.body.Free()
		}
		return mem.BufferSlice{mem.SliceBuffer(head)}, nil
	}
	head = protowire.AppendTag(head, fieldDataBody, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(r.body.Len()))
	return mem.BufferSlice{mem.SliceBuffer(head), r.body}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	fd, ok := v.(*aflight.FlightData)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	// One copy into memory of our own, which the message then aliases.
	raw := data.Materialize()
	fd.Reset()
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return fmt.Errorf("FlightData: %w", protowire.ParseError(n))
		}
		raw = raw[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, raw)
			if n < 0 {
				return fmt.Errorf("FlightData field %d: %w", num, protowire.ParseError(n))
			}
			raw = raw[n:]
			continue
		}
		b, n := protowire.ConsumeBytes(raw)
		if n < 0 {
			return fmt.Errorf("FlightData field %d: %w", num, protowire.ParseError(n))
		}
		raw = raw[n:]
		switch num {
		case fieldDescriptor:
			fd.FlightDescriptor = new(aflight.FlightDescriptor)
			if err := proto.Unmarshal(b, fd.FlightDescriptor); err != nil {
				return fmt.Errorf("FlightData descriptor: %w", err)
			}
		case fieldDataHeader:
			fd.DataHeader = b
		case fieldAppMeta:
			fd.AppMetadata = b
		case fieldDataBody:
			fd.DataBody = b
		}
	}
	return nil
}

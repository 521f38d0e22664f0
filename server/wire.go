package server

import (
	"encoding/json"

	"github.com/plumb-dev/plumb/flight"
)

// wire converts between a server record and its protocol type (package
// flight) through the JSON both encode to: that JSON is the contract, and
// TestWireTypes holds each pair to it field by field.
func wire[T any](v any) T {
	var out T
	b, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil {
		panic("server: protocol type out of step with its record: " + err.Error())
	}
	return out
}

// recode decodes what v encodes to into out, strictly: for what a client
// sent, where a value the record refuses is the client's error.
func recode(v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return flight.DecodeStrict(b, out)
}

func wireAll[T any, S any](vs []S) []T {
	if vs == nil {
		return nil
	}
	out := make([]T, len(vs))
	for i, v := range vs {
		out[i] = wire[T](v)
	}
	return out
}

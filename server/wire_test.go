package server

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/admission"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

// TestWireTypes holds each record the server answers with that is not
// the protocol's own type (those that can be are aliases of package
// flight's) to the protocol type a client decodes it into: every field of a fully set
// record arrives, under the same name, and nothing is left over. A field
// added on one side only fails here instead of vanishing on the wire.
func TestWireTypes(t *testing.T) {
	pairs := []struct {
		record, wire any
	}{
		{&state.Job{}, &flight.Job{}},
		{&admission.Stats{}, &flight.ReadAdmission{}},
		{&pipeline.WindowSpec{}, &flight.WindowSpec{}},
	}
	for _, p := range pairs {
		fill(reflect.ValueOf(p.record).Elem())
		a, err := json.Marshal(p.record)
		if err != nil {
			t.Fatal(err)
		}
		if err := flight.DecodeStrict(a, p.wire); err != nil {
			t.Errorf("%T does not decode as %T: %v", p.record, p.wire, err)
			continue
		}
		b, _ := json.Marshal(p.wire)
		var ma, mb map[string]any
		json.Unmarshal(a, &ma)
		json.Unmarshal(b, &mb)
		if !reflect.DeepEqual(ma, mb) {
			t.Errorf("%T through %T:\n sent %s\n read %s", p.record, p.wire, a, b)
		}
		if ts := reflect.TypeOf(p.wire).Elem(); ts.NumField() != reflect.TypeOf(p.record).Elem().NumField() {
			t.Errorf("%T has %d fields, %T %d", p.wire, ts.NumField(), p.record, reflect.TypeOf(p.record).Elem().NumField())
		}
	}
}

// fill sets every field to a value that is not its zero, so omitempty
// hides nothing.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("1h") // also a valid duration, for specs
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3_600_000_000_000)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem())
		v.Set(p)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}

// TestWindowSpecFromTicket: a window ticket's spec becomes the spec a
// job declares field for field, none left behind.
func TestWindowSpecFromTicket(t *testing.T) {
	var w flight.WindowSpec
	fill(reflect.ValueOf(&w).Elem())
	w.MaxWait, w.IdleTimeout = "1h0m0s", "1h0m0s" // as a parsed duration prints
	ps, err := windowSpec(w)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(w)
	b, _ := json.Marshal(ps)
	var ma, mb map[string]any
	json.Unmarshal(a, &ma)
	json.Unmarshal(b, &mb)
	if !reflect.DeepEqual(ma, mb) {
		t.Errorf("ticket spec %s became %s", a, b)
	}
	if _, err := windowSpec(flight.WindowSpec{Size: "1h", MaxWait: "soon"}); err == nil {
		t.Error("max_wait soon was taken")
	}
}

package flight_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/flight"
)

// TestTicketVisibility: a ticket's visibility is a time.Duration in Go
// and seconds on the wire, as Python and other Flight clients write it;
// what cannot be a visibility is refused before it is converted.
func TestTicketVisibility(t *testing.T) {
	in := flight.Ticket{Queue: "pcap.sz", Group: "archive", From: flight.FromEarliest, Visibility: 1500 * time.Millisecond}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"queue":"pcap.sz","group":"archive","from":"earliest","visibility":1.5}`; string(raw) != want {
		t.Fatalf("ticket as JSON = %s, want %s", raw, want)
	}
	var out flight.Ticket
	if err := flight.DecodeStrict(raw, &out); err != nil || out != in {
		t.Fatalf("read back %+v, %v; want %+v", out, err, in)
	}
	if raw, _ := json.Marshal(flight.Ticket{Block: "b"}); string(raw) != `{"block":"b"}` {
		t.Fatalf("a ticket without visibility = %s", raw)
	}
	for body, want := range map[string]string{
		`{"queue":"q","visibility":-1}`:    "outside 0..86400",
		`{"queue":"q","visibility":1e300}`: "outside 0..86400",
		`{"queue":"q","visiblity":30}`:     `unknown field "visiblity"`,
	} {
		var tk flight.Ticket
		if err := flight.DecodeStrict([]byte(body), &tk); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %s", body, err, want)
		}
	}
}

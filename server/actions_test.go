package server

import (
	"testing"

	"github.com/plumb-dev/plumb/flight"
)

// TestEveryActionHandled: the server handles every action of the
// protocol's table and no other, so a new action is added in one place and
// the table cannot name what the server does not do.
func TestEveryActionHandled(t *testing.T) {
	for _, a := range flight.Actions {
		if handlers[a.Name] == nil {
			t.Errorf("flight.Actions has %q, which the server does not handle: add it to handlers", a.Name)
		}
	}
	for name := range handlers {
		if _, ok := flight.ActionNamed(name); !ok {
			t.Errorf("the server handles %q, which flight.Actions does not list: add it there", name)
		}
	}
}

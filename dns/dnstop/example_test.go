package dnstop_test

import (
	"fmt"
	"strings"

	"github.com/plumb-dev/plumb/dns/dnstop"
)

// A summary of four counters follows the most asked names of a stream
// of many: each count is over by at most its error, and a name left out
// was asked at most Bound times.
func ExampleSummary() {
	s := dnstop.NewSummary(4)
	for _, name := range strings.Fields("a b a c a d b a e b f a g b") {
		s.Add(name, 1)
	}
	for _, it := range s.Top(2) {
		fmt.Printf("%s: %d (at least %d)\n", it.Value, it.Count, it.Count-it.Err)
	}
	fmt.Println("bound:", s.Bound(), "of", s.Total())
	// Output:
	// a: 5 (at least 5)
	// b: 4 (at least 4)
	// bound: 2 of 14
}

package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
)

// TestConsumeGivesBack: when fn fails, Consume gives back at once the
// block it was on and every block the server sent ahead, even when the
// server had finished sending (unnamed, such a read's blocks stayed
// reserved until the visibility timeout, here an hour): the group's next
// read has them, and those fn finished stay done.
func TestConsumeGivesBack(t *testing.T) {
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for seq := 1; seq <= 5; seq++ {
		if _, err := c.Put(ctx, client.BytesSource(fmt.Sprintf("20250505-151105-%08d.lax.giveback.sz", seq), []byte("block"))); err != nil {
			t.Fatal(err)
		}
	}
	stop := errors.New("stop here")
	var seen []string
	err = c.Consume(ctx, client.Ticket{Queue: "giveback.sz", Group: "g", From: client.FromEarliest, Visibility: time.Hour},
		func(h client.Header, _ io.Reader) error {
			if seen = append(seen, h.Name); len(seen) == 2 {
				return stop
			}
			return nil
		})
	if !errors.Is(err, stop) {
		t.Fatalf("Consume: %v", err)
	}
	var again []string
	if err := c.Consume(ctx, client.Ticket{Queue: "giveback.sz", Group: "g"}, func(h client.Header, _ io.Reader) error {
		again = append(again, h.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(again) != 4 || again[0] != seen[1] {
		t.Errorf("the next read got %v; want the four fn did not finish, from %s, given back at once", again, seen[1])
	}
}

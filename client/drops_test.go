package client_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/plumb-dev/plumb/client"
)

// TestKernelDropsReachWindows: what an agent says its kernel dropped
// while each block was cut is kept with the block, and a window's header
// sums it over the window's blocks, so a window consumer tells packets
// lost at capture from a missing block.
func TestKernelDropsReachWindows(t *testing.T) {
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, d := range []int64{3, 4} {
		src := client.BytesSource([]string{"20250505-151105-00000001.lax.drops.sz", "20250505-151605-00000002.lax.drops.sz"}[i], []byte("block"))
		src.KernelDropped = d
		if _, err := c.Put(ctx, src); err != nil {
			t.Fatal(err)
		}
	}
	bs, err := c.Blocks(ctx, "drops.sz")
	if err != nil || len(bs) != 2 || bs[0].KernelDropped != 3 || bs[1].KernelDropped != 4 {
		t.Fatalf("blocks: %+v %v", bs, err)
	}
	s, err := c.WindowStream(ctx, client.WindowTicket{Window: "drops.sz", Group: "w", Spec: &client.WindowSpec{Size: "2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var h client.WindowHeader
	s.OnEvent = func(meta []byte) { json.Unmarshal(meta, &h) }
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if h.KernelDropped != 7 || len(h.Present) != 2 {
		t.Errorf("window header: %+v", h)
	}
}

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

// TestEmptyWindowsAreOneHeader: a window stream over sparse data sent a
// header for every empty window between blocks (years of them for a
// backfill). A stretch of empty windows is now one header saying how
// many, unless the spec asks for each (empty: run).
func TestEmptyWindowsAreOneHeader(t *testing.T) {
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range []string{"19700101-001000-00000001.lax.sparse.sz", "19700103-001000-00000002.lax.sparse.sz", "19700103-050000-00000003.lax.sparse.sz"} {
		if _, err := c.Put(ctx, client.BytesSource(n, []byte("block"))); err != nil {
			t.Fatal(err)
		}
	}
	headers := func(group, empty string) (out []client.WindowHeader) {
		s, err := c.WindowStream(ctx, client.WindowTicket{Window: "sparse.sz", Group: group, Spec: &client.WindowSpec{Size: "1h", Empty: empty}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.OnEvent = func(meta []byte) {
			var h client.WindowHeader
			json.Unmarshal(meta, &h)
			out = append(out, h)
		}
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	hs := headers("skip", "")
	if len(hs) != 4 || hs[0].Blocks != 1 || hs[1].Empty != 47 || hs[1].Window.Reason != "empty" || hs[1].Window.ID != "lax/1" ||
		!hs[1].Window.To.Equal(hs[2].Window.From) || hs[2].Blocks != 1 || hs[3].Empty != 4 {
		t.Fatalf("headers: %+v", hs)
	}
	if hs := headers("run", "run"); len(hs) != 53 {
		t.Fatalf("with empty: run, %d headers; want 53", len(hs))
	}
}

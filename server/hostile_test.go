package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/stage"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/hostile"
	"github.com/plumb-dev/plumb/rowfilter"
)

// TestArrowBombRefused is issue 18's records attack: a 33 KB Arrow IPC
// file whose ZSTD buffer claims 1 GiB, uploaded by a user who may write
// the queue, took +2.25 GB per records ticket (four at once 9 GB). The
// read now stops at the records budget with an error naming the block,
// four at once leave the heap near where it was, and the other blocks
// of the queue still read.
func TestArrowBombRefused(t *testing.T) {
	file, secrets := usersFile(t)
	addr := runServer(t, Config{Users: file})
	ctx := context.Background()
	agent := dialAgent(t, addr, secrets)
	bomb, err := hostile.ArrowZstdBomb(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the bomb is %d bytes", len(bomb))
	if _, err := agent.Put(ctx, bytesSource("20250505-151105-00000001.lax.dns.arrow", bomb)); err != nil {
		t.Fatal(err)
	}
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	var before, peak runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			r, err := ana.Records(ctx, flight.RecordsTicket{Records: "dns.arrow"})
			if err == nil {
				for r.Next() {
				}
				err = r.Err()
				r.Release()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; codeOf(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "20250505-151105-00000001.lax.dns.arrow") {
			t.Errorf("a records read of the bomb: %v", err)
		}
	}
	runtime.ReadMemStats(&peak)
	t.Logf("heap: %d MiB before, %d MiB of system memory after", before.HeapInuse>>20, peak.HeapSys>>20)
	if peak.HeapSys > before.HeapSys+1<<30 {
		t.Errorf("four reads of the bomb grew the heap from %d to %d MiB", before.HeapSys>>20, peak.HeapSys>>20)
	}
}

// TestReadsAreShared is issue 18's read starvation: 20 unread DoGet
// streams of one user's 64 MiB block held all 16 read slots and another
// user's 400 KB read timed out after 10 s. One user now holds at most
// half the slots, so the other read goes at once.
func TestReadsAreShared(t *testing.T) {
	file, secrets := twoAnalysts(t)
	addr := runServer(t, Config{Users: file, ReadSlots: 16})
	ctx := context.Background()
	agent := dialAgent(t, addr, secrets)
	big := bytes.Repeat([]byte("x"), 64<<20)
	small := bytes.Repeat([]byte("y"), 400<<10)
	for _, src := range []client.Source{bytesSource("20250505-151105-00000001.lax.dns.arrow", big), bytesSource("20250505-151106-00000002.lax.dns.arrow", small)} {
		if _, err := agent.Put(ctx, src); err != nil {
			t.Fatal(err)
		}
	}
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	for range 20 {
		if _, err := ana.Flight().DoGet(sctx, &aflight.Ticket{Ticket: []byte(`{"block":"20250505-151105-00000001.lax.dns.arrow"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // the streams fill their windows and stall
	carol := dialAs(t, addr, client.Security{User: "carol", Secret: secrets["carol"]})
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	s, err := carol.Get(rctx, "20250505-151106-00000002.lax.dns.arrow")
	if err != nil || !s.Next() {
		t.Fatalf("carol's read: %v", err)
	}
	got, err := io.ReadAll(s)
	s.Close()
	took := time.Since(start)
	t.Logf("carol's 400 KB read took %v beside ana's 20 stalled streams", took)
	if err != nil || len(got) != len(small) {
		t.Fatalf("carol's read: %d bytes, %v", len(got), err)
	}
	if took > 5*time.Second {
		t.Errorf("carol's read took %v", took)
	}
}

// TestGroupsPerUserCapped: a read-only user created 3,000 consumer groups
// in 3.5 s, each owed every later block for ever. One user's groups on a
// queue are capped.
func TestGroupsPerUserCapped(t *testing.T) {
	file, secrets := usersFile(t)
	addr := runServer(t, Config{Users: file, MaxGroupsPerUser: 3})
	ctx := context.Background()
	agent := dialAgent(t, addr, secrets)
	if _, err := agent.Put(ctx, bytesSource("20250505-151105-00000001.lax.dns.arrow", []byte("rows"))); err != nil {
		t.Fatal(err)
	}
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	for i := range 4 {
		_, err := peek(ana, "dns.arrow", fmt.Sprintf("g%d", i), 0)
		if i < 3 && err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
		if i == 3 && (codeOf(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "user ana has 3 consumer groups on queue dns.arrow")) {
			t.Errorf("a fourth group: %v", err)
		}
	}
	if _, err := peek(ana, "dns.arrow", "g1", 0); err != nil {
		t.Errorf("reusing a group: %v", err)
	}
}

// TestStalledReadEnds: a stream whose client stops reading is ended
// after the send timeout, which frees its read slot for the user's next
// read (here the user's only slot).
func TestStalledReadEnds(t *testing.T) {
	file, secrets := usersFile(t)
	addr := runServer(t, Config{Users: file, ReadSlotsPerUser: 1, SendTimeout: time.Second})
	ctx := context.Background()
	agent := dialAgent(t, addr, secrets)
	for _, src := range []client.Source{bytesSource("20250505-151105-00000001.lax.dns.arrow", bytes.Repeat([]byte("x"), 64<<20)),
		// Over the express size (64 KiB): it needs one of the slots the
		// stalled stream's holds.
		bytesSource("20250505-151106-00000002.lax.dns.arrow", bytes.Repeat([]byte("y"), 128<<10))} {
		if _, err := agent.Put(ctx, src); err != nil {
			t.Fatal(err)
		}
	}
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	stalled, err := ana.Flight().DoGet(ctx, &aflight.Ticket{Ticket: []byte(`{"block":"20250505-151105-00000001.lax.dns.arrow"}`)})
	if err != nil {
		t.Fatal(err)
	}
	// Its first data has come: the server holds ana's slot for it.
	for range 2 {
		if _, err := stalled.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := ana.Get(rctx, "20250505-151106-00000002.lax.dns.arrow")
	if err != nil || !s.Next() {
		t.Fatalf("the next read after a stalled one: %v", err)
	}
	s.Close()
	// The stalled stream, read at last, ends with the reason.
	var last error
	for {
		if _, err := stalled.Recv(); err != nil {
			last = err
			break
		}
	}
	if codeOf(last) != codes.DeadlineExceeded || !strings.Contains(last.Error(), "the client took nothing for 1s") {
		t.Errorf("the stalled stream ended with %v", last)
	}
}

// TestReadRateCapsInAll: --read-rate was documented as a cap in all but
// held each transfer to rate ÷ read slots: one reader at 16 MB/s read
// 3.2 MB in 3.26 s. One token bucket is shared now: a reader alone gets
// the whole rate, and the cap still holds.
func TestReadRateCapsInAll(t *testing.T) {
	addr := runServer(t, Config{ReadRate: 16e6, ReadSlots: 16})
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Put(ctx, bytesSource("20250505-151105-00000001.lax.raw", bytes.Repeat([]byte("r"), 3200000))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, bytesSource("20250505-151106-00000002.lax.raw", bytes.Repeat([]byte("r"), 48000000))); err != nil {
		t.Fatal(err)
	}
	read := func(name string) time.Duration {
		start := time.Now()
		s, err := c.Get(ctx, name)
		if err != nil || !s.Next() {
			t.Fatalf("get %s: %v", name, err)
		}
		io.Copy(io.Discard, s)
		s.Close()
		return time.Since(start)
	}
	small := read("20250505-151105-00000001.lax.raw")
	big := read("20250505-151106-00000002.lax.raw")
	t.Logf("3.2 MB at 16 MB/s: %v; 48 MB: %v", small, big)
	if small > 1500*time.Millisecond {
		t.Errorf("a lone reader of 3.2 MB took %v at a 16 MB/s cap (it was held to 1/16 of it)", small)
	}
	if big < 2*time.Second {
		t.Errorf("48 MB took %v: the 16 MB/s cap did not hold", big)
	}
}

// TestKernelDroppedBounded: the drops an upload claims are summed over a
// window's blocks; a negative claim, or one past any kernel's count that
// would overflow the sum, is refused naming the bound, and nothing is
// stored.
func TestKernelDroppedBounded(t *testing.T) {
	addr := runServer(t, Config{})
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i, d := range []int64{-1, MaxKernelDropped + 1, 1 << 62} {
		src := bytesSource(fmt.Sprintf("20250505-151105-%08d.lax.pcap.sz", i+1), []byte("block"))
		src.KernelDropped = d
		if _, err := c.Put(ctx, src); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "outside 0..1099511627776") {
			t.Errorf("kernel_dropped %d: %v", d, err)
		}
	}
	if bs, err := c.Blocks(ctx, "pcap.sz"); err == nil && len(bs) != 0 {
		t.Errorf("refused uploads stored %d blocks", len(bs))
	}
	src := bytesSource("20250505-151105-00000009.lax.pcap.sz", []byte("block"))
	src.KernelDropped = MaxKernelDropped
	if _, err := c.Put(ctx, src); err != nil {
		t.Errorf("the largest allowed claim: %v", err)
	}
}

// TestRecordsCommandsAreBounded: what a records ticket or command may ask
// is bounded, each limit named in its refusal, before any block is read;
// the schema of a queue is asked only by those who may read it (an
// unknown queue the caller may not read is refused, not reported
// missing); and a block whose schema message claims 2 GiB is set aside
// naming the block, within the 1 MiB read for a schema.
func TestRecordsCommandsAreBounded(t *testing.T) {
	file, secrets := usersFile(t)
	addr := runServer(t, Config{Users: file})
	ctx := context.Background()
	agent := dialAgent(t, addr, secrets)
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	schemaOf := func(raw string) error {
		_, err := ana.Flight().GetSchema(ctx, &aflight.FlightDescriptor{Type: aflight.DescriptorCMD, Cmd: []byte(raw)})
		return err
	}

	if _, err := agent.Put(ctx, bytesSource("20250505-151105-00000001.lax.dns.arrow", emptyRecords(t))); err != nil {
		t.Fatal(err)
	}
	many := make([]string, rowfilter.MaxInValues+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, c := range []struct{ cmd, says string }{
		{`{"records": "dns.arrow", "limit": -1}`, "limit -1: want a positive count"},
		{`{"records": "dns.arrow", "filter": [{"column": "qtype", "op": "in", "value": [` + strings.Join(many, ",") + `]}]}`,
			fmt.Sprintf("at most %d values", rowfilter.MaxInValues)},
		{`{"records": "dns.arrow", "filter": [{"column": "qname", "op": "like", "value": "` + strings.Repeat("%", rowfilter.MaxPattern+1) + `"}]}`,
			fmt.Sprintf("at most %d bytes", rowfilter.MaxPattern)},
		{`{"records": "dns.arrow", "filter": [{"column": "qname", "op": "regex", "value": "` + strings.Repeat("a", rowfilter.MaxPattern+1) + `"}]}`,
			fmt.Sprintf("at most %d bytes", rowfilter.MaxPattern)},
		{`{"records": "dns.arrow", "filter": [{"column": "qname", "op": "regex", "value": "((a{100}){100}){100}"}]}`, "invalid repeat count"},
		{`{"records": "dns.arrow", "columns": ["qname"], "nope": 1}`, "unknown field"},
		{`{"records": "../x"}`, "records ticket"},
	} {
		if err := schemaOf(c.cmd); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%.80s…: %v; want InvalidArgument saying %q", c.cmd, err, c.says)
		}
	}

	// Only a reader of the queue learns its schema, or whether it exists.
	for _, q := range []string{"pcap.sz", "secret.arrow"} {
		if err := schemaOf(`{"records": "` + q + `"}`); codeOf(err) != codes.PermissionDenied {
			t.Errorf("ana asks the schema of %s: %v; want PermissionDenied", q, err)
		}
	}

	// A schema message that claims 2 GiB: set aside with the block's name.
	bomb := append([]byte("ARROW1\x00\x00\xff\xff\xff\xff"), 0xff, 0xff, 0xff, 0x7f)
	bomb = append(bomb, bytes.Repeat([]byte{0}, 64)...)
	if _, err := agent.Put(ctx, bytesSource("20250505-151105-00000001.lax.dns.bomb", bomb)); err != nil {
		t.Fatal(err)
	}
	if err := schemaOf(`{"records": "dns.bomb"}`); codeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "20250505-151105-00000001.lax.dns.bomb") {
		t.Errorf("the schema of a block claiming 2 GiB: %v; want FailedPrecondition naming the block", err)
	}
}

// emptyRecords is an Arrow IPC file of DNS records with no row.
func emptyRecords(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := dnsrec.NewWriter(&b, "lax", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCommitLeaseDropsAreBounded: a worker's commit names what its run
// let go of by reason, and each reason becomes a metric label; a commit
// naming a reason no run counts, or a count below 0, is refused with
// the reason named, before anything is committed, so a hostile worker
// cannot grow the metrics without bound.
func TestCommitLeaseDropsAreBounded(t *testing.T) {
	ts := startServer(t, Config{Registry: stage.NewRegistry()})
	ctx := context.Background()
	for _, c := range []struct {
		dropped map[string]int64
		says    string
	}{
		{map[string]int64{"made_up_reason": 1}, `"made_up_reason" is not a reason runs count drops under`},
		{map[string]int64{stage.DropEdgeBudget: -1}, "edge_budget is -1, below 0"},
	} {
		err := ts.c.Do(ctx, flight.ActCommitLease, flight.LeaseRequest{Lease: "lease-none", Dropped: c.dropped}, nil)
		wantCode(t, err, codes.InvalidArgument, c.says)
	}
}

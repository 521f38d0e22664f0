package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/plumb-dev/plumb/client"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestDrainBetweenTwoMinIO: a server with two real MinIO stores places
// blocks on both; draining one while readers run moves every block to the
// other, byte-identical, with no reader seeing an error; a drain whose
// deadline is too short lists what it did not move, and that stays
// readable.
func TestDrainBetweenTwoMinIO(t *testing.T) {
	a, b := testenv.StartMinIO(t), testenv.StartMinIO(t)
	t.Setenv("AWS_ACCESS_KEY_ID", a.AccessKey) // both servers have the same root user
	t.Setenv("AWS_SECRET_ACCESS_KEY", a.SecretKey)
	addr := runServer(t, Config{Store: "s3://plumb?endpoint=" + a.Endpoint})
	c := dialAs(t, addr, client.Security{})
	ctx := context.Background()
	var added map[string]string
	if err := c.Do(ctx, flight.ActStoreAdd, flight.StoreRequest{Name: "b", URL: "s3://plumb?endpoint=" + b.Endpoint}, &added); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, flight.ActStoreAdd, flight.StoreRequest{Name: "b", URL: "s3://plumb?endpoint=" + b.Endpoint}, &added); err == nil {
		t.Error("a second store named b was added")
	}
	const n = 40
	want := map[string][]byte{}
	for i := 1; i <= n; i++ {
		data := randBytes(512<<10+i*997, uint64(i))
		want[name(i)] = data
		if _, err := c.Put(ctx, bytesSource(name(i), data)); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := client.List[blob.MemberInfo](ctx, c, flight.ActStoreList, struct{}{})
	if err != nil || len(ms) != 2 || ms[0].Name != "b" || ms[1].Name != flight.PrimaryStore || ms[1].URL != "s3://plumb?endpoint="+a.Endpoint {
		t.Fatalf("stores: %+v %v", ms, err)
	}

	// Readers read random blocks for the whole drain.
	readCtx, stopReaders := context.WithCancel(ctx)
	var reads, readErrs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			rc := dialAs(t, addr, client.Security{})
			for readCtx.Err() == nil {
				nm := name(1 + r.IntN(n))
				got, err := getBlock(t, rc, nm)
				switch {
				case err != nil:
					readErrs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(nm, ": ", err))
				case !bytes.Equal(got, want[nm]):
					readErrs.Add(1)
					firstErr.CompareAndSwap(nil, nm+": wrong bytes")
				default:
					reads.Add(1)
				}
			}
		})
	}
	var rep blob.DrainReport
	if err := c.Do(ctx, flight.ActStoreDrain, flight.StoreRequest{Name: "b", DeadlineSeconds: 60}, &rep); err != nil {
		t.Fatal(err)
	}
	stopReaders()
	wg.Wait()
	if readErrs.Load() > 0 {
		t.Fatalf("%d of %d reads failed during the drain; first: %v", readErrs.Load(), reads.Load()+readErrs.Load(), firstErr.Load())
	}
	if rep.Moved == 0 || len(rep.Left) != 0 || reads.Load() == 0 {
		t.Fatalf("drain: %+v, %d reads", rep, reads.Load())
	}
	t.Logf("drained %d blobs (%d bytes) in %.2fs while %d reads ran", rep.Moved, rep.Bytes, rep.Seconds, reads.Load())
	// Store b is empty; every block reads back from the primary.
	if err := c.Do(ctx, flight.ActStoreRemove, flight.StoreRequest{Name: "b"}, &added); err != nil {
		t.Fatalf("remove the drained store: %v", err)
	}
	for nm, data := range want {
		if got, err := getBlock(t, c, nm); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("after the drain %s: %v", nm, err)
		}
	}

	// Again with a deadline too short: what was not moved is listed, stays
	// readable, and a second drain finishes the job.
	if err := c.Do(ctx, flight.ActStoreAdd, flight.StoreRequest{Name: "b2", URL: "s3://plumb2?endpoint=" + b.Endpoint}, &added); err != nil {
		t.Fatal(err)
	}
	for i := n + 1; i <= 2*n; i++ {
		data := randBytes(64<<10, uint64(i))
		want[name(i)] = data
		if _, err := c.Put(ctx, bytesSource(name(i), data)); err != nil {
			t.Fatal(err)
		}
	}
	err = c.Do(ctx, flight.ActStoreDrain, flight.StoreRequest{Name: "b2", DeadlineSeconds: 0.001, Workers: 1}, &rep)
	if err != nil || len(rep.Left) == 0 || !strings.Contains(rep.Left[0], ".lax.pcap.sz.sha256-") {
		t.Fatalf("short drain: %+v %v; want blobs left", rep, err)
	}
	for _, k := range rep.Left {
		nm := k[strings.LastIndexByte(k, '/')+1 : strings.Index(k, ".sha256-")]
		if got, err := getBlock(t, c, nm); err != nil || !bytes.Equal(got, want[nm]) {
			t.Fatalf("a block left on the draining store is unreadable: %s %v", nm, err)
		}
	}
	if err := c.Do(ctx, flight.ActStoreDrain, flight.StoreRequest{Name: "b2", DeadlineSeconds: 60}, &rep); err != nil || len(rep.Left) != 0 {
		t.Fatalf("second drain: %+v %v", rep, err)
	}
	if err := c.Do(ctx, flight.ActStoreRemove, flight.StoreRequest{Name: "b2"}, &added); err != nil {
		t.Fatalf("remove b2: %v", err)
	}
}

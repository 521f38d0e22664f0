package main

import (
	"context"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/proc"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestIdleServerCostsNothing: a server with a job and nothing to do
// used 1.8 CPU-s a minute, waking 200 times a second to recheck reads
// that were not waiting and to sample the runtime's scheduler; then 20 ms
// a minute (60 ms on a loaded CI machine), its engine filling every second
// with nothing owed. Idle, it now wakes every 10 s, about 10 ms a minute,
// and must stay within 0.05 CPU-s a minute (its own /proc counters).
func TestIdleServerCostsNothing(t *testing.T) {
	t.Parallel()
	cmd, addr, log := serveBuilt(t)
	c := dialPlumb(t, addr)
	ctx := context.Background()
	if _, err := c.Put(ctx, source("20250505-151105-00000001.lax.pcap", []byte("\xd4\xc3\xb2\xa1\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x00\x00\x01\x00\x00\x00"))); err != nil {
		t.Fatal(err)
	}
	if res, err := c.SubmitJob(ctx, "dns.yaml", []byte("job: dns\nfrom: earliest\nstages:\n  - {name: dns, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow]}\n")); err != nil || res.State != "accepted" {
		t.Fatalf("%+v %v", res, err)
	}
	testenv.WaitFor(t, time.Minute, "the block's run", func() bool {
		st, err := c.Stats(ctx)
		return err == nil && len(st) == 1 && st[0].Runs == 1
	})
	time.Sleep(2 * time.Second) // what the run started settles
	before, err := proc.CPU(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute)
	after, err := proc.CPU(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("an idle server used %v of CPU in a minute", after-before)
	if used := after - before; used > 50*time.Millisecond {
		t.Errorf("an idle server used %v of CPU in a minute; want at most 50ms\n%s", used, log)
	}
	if cmd.ProcessState != nil {
		t.Fatalf("the server exited:\n%s", log)
	}
}

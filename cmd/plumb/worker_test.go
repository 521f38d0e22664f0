package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/testenv"
)

const workerJob = `
job: dnsarchive
from: earliest
stages:
  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap]}
  - {name: dns, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}
  - {name: xz, inputs: [pcap], program: "builtin:encode?codec=xz", outputs: [pcap.xz], retention: forever}
`

// runPipeline imports a capture into a server and submits workerJob.
func runPipeline(t *testing.T, addr, capture string) {
	t.Helper()
	if out, errOut, code := plumbExec(t, "import", "--quiet", "--server", addr, "--site", "lax", "--new-instance",
		"--spool", filepath.Join(t.TempDir(), "spool"), "--block-size", "1MiB", capture); code != 0 {
		t.Fatalf("import: %s %s", out, errOut)
	}
	c, _ := flight.Dial(addr)
	defer c.Close()
	if res, err := c.SubmitJob(context.Background(), "job.yaml", []byte(workerJob)); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
}

// outputs lists a server's output blocks by name with their checksums.
func outputs(t *testing.T, addr string) map[string]string {
	t.Helper()
	c, _ := flight.Dial(addr)
	defer c.Close()
	out := map[string]string{}
	for _, q := range []string{"dns.arrow", "pcap.xz"} {
		bs, err := c.Blocks(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if _, dup := out[b.Name]; dup {
				t.Fatalf("%s listed twice", b.Name)
			}
			out[b.Name] = b.SHA256
		}
	}
	return out
}

// TestWorkersSurviveSIGKILL: a server that runs no stage itself, two
// worker processes, a decode → dns → xz pipeline over a generated capture;
// one worker is SIGKILLed while it holds a lease. Its lease expires and
// the run is redone by the other; every output exists once and equals
// what a single machine makes.
func TestWorkersSurviveSIGKILL(t *testing.T) {
	capture := filepath.Join(t.TempDir(), "synth.pcap")
	if _, errOut, code := plumbExec(t, "synth", "--out", capture, "--size", "6MiB", "--seed", "5"); code != 0 {
		t.Fatal(errOut)
	}
	// The reference: one machine.
	ref := testenv.FreeAddr(t)
	startPlumb(t, "serve", "--data", t.TempDir(), "--listen", ref, "--log-level", "warn", "--tick", "100ms")
	waitListening(t, ref)
	runPipeline(t, ref, capture)
	if _, errOut, code := plumbExec(t, "stats", "--wait", "--server", ref); code != 0 {
		t.Fatal(errOut)
	}
	want := outputs(t, ref)

	addr := testenv.FreeAddr(t)
	srv := startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr, "--log-level", "info", "--tick", "100ms",
		"--remote-only", "--lease-ttl", "2s")
	waitListening(t, addr)
	runPipeline(t, addr, capture)
	w1 := startPlumb(t, "worker", "--server", addr, "--slots", "1", "--scratch", t.TempDir())
	c, _ := flight.Dial(addr)
	defer c.Close()
	// Kill worker 1 once it holds a run.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ws, _ := c.Workers(context.Background())
		if len(ws) == 1 && len(ws[0].Runs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker 1 never took a lease: %+v\n%s", ws, w1.log)
		}
		time.Sleep(5 * time.Millisecond)
	}
	w1.cmd.Process.Signal(syscall.SIGKILL)
	w1.cmd.Wait()
	w2 := startPlumb(t, "worker", "--server", addr, "--slots", "2", "--scratch", t.TempDir())
	if out, errOut, code := plumbExec(t, "stats", "--wait", "--server", addr); code != 0 {
		t.Fatalf("stats --wait: %s %s\nworker 2:\n%s", out, errOut, w2.log)
	}
	got := outputs(t, addr)
	if len(want) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outputs with workers differ from one machine's:\nworkers: %v\nmachine: %v", got, want)
	}
	if !strings.Contains(srv.log.String(), "lease expired without a heartbeat") {
		t.Errorf("the killed worker's lease did not expire:\n%s", srv.log)
	}
	out, _, _ := plumbExec(t, "workers", "--server", addr)
	if !strings.Contains(out, "lost 1") {
		t.Errorf("plumb workers does not count the lost lease:\n%s", out)
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
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
	c, _ := client.Dial(addr)
	defer c.Close()
	if res, err := c.SubmitJob(context.Background(), "job.yaml", []byte(workerJob)); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
}

// outputs lists a server's output blocks by name with their checksums.
func outputs(t *testing.T, addr string) map[string]string {
	t.Helper()
	c, _ := client.Dial(addr)
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

// TestWorkersSurviveSIGKILL: a server that runs no stage itself with its
// blocks in MinIO, two worker processes (one reaching MinIO directly, one
// through the server), a decode → dns → xz pipeline over a generated capture;
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

	// The cluster: blocks in a real MinIO that the workers reach directly.
	m := testenv.StartMinIO(t)
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	store := "s3://plumb?endpoint=" + m.Endpoint
	addr := testenv.FreeAddr(t)
	srv := startPlumb(t, "serve", "--data", t.TempDir(), "--store", store, "--listen", addr, "--log-level", "info", "--tick", "100ms",
		"--remote-only", "--lease-ttl", "2s")
	waitListening(t, addr)
	runPipeline(t, addr, capture)
	w1 := startPlumb(t, "worker", "--server", addr, "--slots", "1", "--scratch", t.TempDir(), "--store", store)
	c, _ := client.Dial(addr)
	defer c.Close()
	// Kill worker 1 while it holds a run. A run can finish between the
	// server's answer and the kill, so the worker is stopped first and
	// killed only if the server still sees it holding a run once anything
	// it sent before the stop has arrived; otherwise it goes on.
	holding := func() (string, bool) {
		ws, _ := c.Workers(context.Background())
		return fmt.Sprintf("%+v\n%s", ws, w1.log), len(ws) == 1 && len(ws[0].Runs) > 0
	}
	for {
		testenv.Eventually(t, time.Minute, "worker 1 to take a lease", holding)
		w1.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(300 * time.Millisecond)
		if _, held := holding(); held {
			break
		}
		w1.cmd.Process.Signal(syscall.SIGCONT)
	}
	w1.cmd.Process.Signal(syscall.SIGKILL)
	w1.cmd.Wait()
	w2 := startPlumb(t, "worker", "--server", addr, "--slots", "2", "--scratch", t.TempDir()) // this one through Flight
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

// cutProxy forwards TCP to a server until cut: then it drops every
// connection and refuses new ones until restored, like a network cut.
type cutProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target}
	t.Cleanup(func() { lis.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// TestWorkerCutOffLosesItsLease: a worker whose network is cut while it
// holds a lease stops heartbeating; the lease expires, another worker
// redoes the block, and when the first comes back its run is not
// published: the output exists once.
func TestWorkerCutOffLosesItsLease(t *testing.T) {
	addr := testenv.FreeAddr(t)
	startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr, "--log-level", "info", "--tick", "100ms",
		"--remote-only", "--lease-ttl", "1s")
	waitListening(t, addr)
	c, _ := client.Dial(addr)
	defer c.Close()
	ctx := context.Background()
	src, _ := snappyBlock(t, 1)
	if _, err := c.Put(ctx, src); err != nil {
		t.Fatal(err)
	}
	if res, err := c.SubmitJob(ctx, "slow.yaml", []byte(`
job: slow
from: earliest
stages:
  - {name: copy, inputs: [pcap.sz], program: [sh, -c, "sleep 4; cat"], outputs: [pcap.copy], retention: forever}
`)); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	proxy := newCutProxy(t, addr)
	a := startPlumb(t, "worker", "--server", proxy.lis.Addr().String(), "--slots", "1", "--scratch", t.TempDir(), "--log-level", "debug")
	waitLog(t, 30*time.Second, a.log, "run leased") // A has its lease in hand
	proxy.setCut(true)
	// The server lets the lease go after its TTL; then A's network returns
	// while its program still runs, and B takes the block.
	testenv.Eventually(t, 30*time.Second, "A's lease to expire", func() (string, bool) {
		ws, _ := c.Workers(ctx)
		return fmt.Sprintf("%+v", ws), len(ws) == 1 && ws[0].Lost == 1
	})
	proxy.setCut(false)
	b := startPlumb(t, "worker", "--server", addr, "--slots", "1", "--scratch", t.TempDir())
	waitBlocks(t, c, "pcap.copy", 1, a.log, b.log) // worker B redoes the block
	// A's run ends one way or another — it learns the lease is gone, its
	// commit is refused, or the cut broke its input or upload — and
	// nothing of it is published.
	testenv.Eventually(t, 30*time.Second, "worker A's run to end", func() (string, bool) {
		l := a.log.String()
		return l, strings.Contains(l, "lease lost") || strings.Contains(l, "commit refused") || strings.Contains(l, "stage run failed") ||
			strings.Contains(l, "could not upload")
	})
	time.Sleep(500 * time.Millisecond)
	if bs, _ := c.Blocks(ctx, "pcap.copy"); len(bs) != 1 {
		t.Fatalf("pcap.copy holds %d blocks; want the one B made", len(bs))
	}
	ws, _ := c.Workers(ctx)
	var lost, done int64
	for _, w := range ws {
		lost += w.Lost
		done += w.Done
	}
	if lost != 1 || done != 1 {
		t.Errorf("workers: %+v; want one lease lost and one run done", ws)
	}
}

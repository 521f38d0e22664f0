package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestStoreFullBackPressure: a server whose store may hold only a few
// blocks refuses the rest with RESOURCE_EXHAUSTED; the agent keeps them
// spooled and retries; a consumer group drains the queue and a short
// retention frees the room, and every packet arrives exactly once.
func TestStoreFullBackPressure(t *testing.T) {
	addr := testenv.FreeAddr(t)
	srv := startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr, "--log-level", "info", "--store-cap", "400KiB", "--sweep-every", "100ms")
	waitListening(t, addr)
	input := filepath.Join(t.TempDir(), "input.pcap")
	want := makeCapture(t, input, 8000, 7)
	imp := startPlumb(t, "import", "--quiet", "--server", addr, "--site", "full", "--new-instance",
		"--spool", filepath.Join(t.TempDir(), "spool"), "--block-size", "64KiB", "--max-backoff", "300ms", input)
	done := make(chan error, 1)
	go func() { done <- imp.cmd.Wait() }()

	// The store fills and the agent waits, holding the rest.
	testenv.Eventually(t, 30*time.Second, "an upload refused for space", func() (string, bool) {
		return fmt.Sprintf("server:\n%s\nagent:\n%s", srv.log, imp.log),
			strings.Contains(srv.log.String(), "--store-cap") || strings.Contains(imp.log.String(), "store-cap")
	})
	time.Sleep(time.Second)
	select {
	case err := <-done:
		t.Fatalf("the agent ended while the store was full: %v\n%s", err, imp.log)
	default:
	}
	if !strings.Contains(imp.log.String(), "ResourceExhausted") || !strings.Contains(imp.log.String(), "will retry") {
		t.Errorf("the agent's log does not show the refusal and the retry:\n%s", imp.log)
	}

	// A consumer drains the queue; once it subscribed, a retention lets
	// the blocks it consumed go.
	out := t.TempDir()
	follow := startPlumb(t, "follow", "pcap.sz", "--server", addr, "--group", "archive", "--from", "earliest", "--out", out)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if q, _, _ := plumbExec(t, "queues", "--server", addr); strings.Contains(q, "archive:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower never subscribed\n%s", follow.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, errOut, code := plumbExec(t, "retention", "pcap.sz", "1ms", "--server", addr); code != 0 {
		t.Fatal(errOut)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("import: %v\n%s\nserver:\n%s", err, imp.log.Without("will retry"), srv.log.Without("--store-cap"))
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("the import did not finish once space returned\n%s", imp.log.Without("will retry"))
	}
	// Wait for the follower to have every block, then compare packets.
	var got []packet
	for deadline := time.Now().Add(30 * time.Second); ; {
		names, _ := filepath.Glob(filepath.Join(out, "*.full.pcap.sz"))
		sort.Slice(names, func(i, j int) bool {
			a, _ := block.Parse(filepath.Base(names[i]))
			b, _ := block.Parse(filepath.Base(names[j]))
			return a.Seq < b.Seq
		})
		got = got[:0]
		for i, p := range names {
			if n, _ := block.Parse(filepath.Base(p)); n.Seq != uint64(i+1) {
				t.Fatalf("follower has %s at place %d", filepath.Base(p), i+1)
			}
			f, _ := os.Open(p)
			dec, err := codecs.Snappy.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, readPackets(t, dec)...)
			dec.Close()
			f.Close()
		}
		if len(got) >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	follow.cmd.Process.Kill()
	samePackets(t, "through a full store", got, want)
}

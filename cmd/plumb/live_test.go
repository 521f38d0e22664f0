//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// testHost is a network namespace joined to this one by a veth pair: the
// project's own test host, so test traffic never leaves the machine.
type testHost struct {
	ns, outer, inner string
}

// hosts counts the test hosts made, so each has its own names.
var hosts int

func newTestHost(t *testing.T) testHost {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "live capture needs root (network namespaces and AF_PACKET)")
	}
	ipBin := testenv.Tool(t, "ip")
	hosts++
	id := (os.Getpid()*10 + hosts) % 1000000
	h := testHost{ns: fmt.Sprintf("plumb%d", id), outer: fmt.Sprintf("plo%d", id), inner: fmt.Sprintf("pli%d", id)}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", h.ns)
	t.Cleanup(func() {
		exec.Command(ipBin, "link", "del", h.outer).Run()
		exec.Command(ipBin, "netns", "del", h.ns).Run()
	})
	run("link", "add", h.outer, "type", "veth", "peer", "name", h.inner)
	run("link", "set", h.inner, "netns", h.ns)
	run("addr", "add", "192.0.2.1/24", "dev", h.outer)
	run("link", "set", h.outer, "up")
	run("netns", "exec", h.ns, "ip", "addr", "add", "192.0.2.2/24", "dev", h.inner)
	run("netns", "exec", h.ns, "ip", "link", "set", h.inner, "up")
	run("netns", "exec", h.ns, "ip", "link", "set", "lo", "up")
	// The sandbox may not answer ARP for the outer address; a static
	// neighbour entry lets the test host send to it regardless.
	mac, err := os.ReadFile("/sys/class/net/" + h.outer + "/address")
	if err != nil {
		t.Fatal(err)
	}
	run("netns", "exec", h.ns, "ip", "neigh", "replace", "192.0.2.1", "lladdr", strings.TrimSpace(string(mac)), "dev", h.inner, "nud", "permanent")
	return h
}

// TestAgentLiveCapture captures DNS-like UDP datagrams from a test host on
// a veth interface with AF_PACKET and checks every one arrives, and that a
// stopped agent finishes and ships its open block.
func TestAgentLiveCapture(t *testing.T) {
	h := newTestHost(t)
	python := testenv.Tool(t, "python3")
	addr := servePlumb(t, t.TempDir())
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	agentCmd := exec.Command(os.Args[0], "agent", "--server", addr, "--site", "live", "--new-instance",
		"--spool", t.TempDir(), "--block-size", "8KiB", "--interface", h.outer)
	agentCmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	agentCmd.Stdout, agentCmd.Stderr = logFile, logFile
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agentCmd.Process.Kill(); agentCmd.Wait() })
	agentLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(agentLog(), "live capture started"); {
		if time.Now().After(deadline) {
			t.Fatalf("agent did not start capturing within 30s:\n%s", agentLog())
		}
		time.Sleep(20 * time.Millisecond)
	}

	const n = 300
	send := testenv.Command(t, 2*time.Minute, "ip", "netns", "exec", h.ns, python, "-c", fmt.Sprintf(`
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(%d):
    s.sendto(b"plumb-live-%%05d" %% i + b"x" * 80, ("192.0.2.1", 53))
    time.sleep(0.001)
`, n))
	if out, err := send.CombinedOutput(); err != nil {
		t.Fatalf("sender: %v\n%s", err, out)
	}
	// Stop at once: what the kernel captured is still shipped.
	agentCmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- agentCmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent exit on SIGTERM: %v\n%s", err, agentLog())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("agent did not stop within 20s of SIGTERM\n%s", agentLog())
	}

	c := dialPlumb(t, addr)
	got, nblocks := fetchInstance(t, c, "pcap.sz", "live")
	seen := map[string]int{}
	for _, p := range got {
		if i := bytes.Index(p.data, []byte("plumb-live-")); i >= 0 {
			seen[string(p.data[i:i+16])]++
		}
	}
	for i := range n {
		if k := fmt.Sprintf("plumb-live-%05d", i); seen[k] != 1 {
			t.Fatalf("datagram %d captured %d times (%d packets in %d blocks)", i, seen[k], len(got), nblocks)
		}
	}
	st, _ := c.QueueStats(context.Background(), "pcap.sz")
	t.Logf("%d datagrams captured once each, %d packets in %d blocks", n, len(got), st.Blocks)
}

// TestAgentLiveFilter: with --filter 'udp port 53' on the interface, the
// kernel keeps the DNS datagrams and drops the rest of a mixed stream; the
// server gets exactly the packets tcpdump with the same filter writes on
// the same interface at the same time, byte for byte.
func TestAgentLiveFilter(t *testing.T) {
	h := newTestHost(t)
	python := testenv.Tool(t, "python3")
	tcpdump := testenv.Tool(t, "tcpdump")
	addr := servePlumb(t, t.TempDir())
	dir := t.TempDir()
	const expr = "udp port 53"
	ref := filepath.Join(dir, "tcpdump.pcap")
	// -Z root: tcpdump would drop to its own user, who may not write here.
	td := testenv.Command(t, 2*time.Minute, tcpdump, "-i", h.outer, "--immediate-mode", "-U", "-n", "-s", "0", "-Z", "root", "-w", ref, expr)
	var tdErr bytes.Buffer
	td.Stderr = &tdErr
	if err := td.Start(); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "agent.log")
	logFile, _ := os.Create(logPath)
	defer logFile.Close()
	agentCmd := exec.Command(os.Args[0], "agent", "--server", addr, "--site", "live", "--new-instance",
		"--spool", filepath.Join(dir, "spool"), "--block-size", "8KiB", "--interface", h.outer, "--filter", expr)
	agentCmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	agentCmd.Stdout, agentCmd.Stderr = logFile, logFile
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agentCmd.Process.Kill(); agentCmd.Wait() })
	agentLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(agentLog(), "live capture started") || !strings.Contains(tdErr.String(), "listening on"); {
		if time.Now().After(deadline) {
			t.Fatalf("capture did not start within 30s:\nagent: %s\ntcpdump: %s", agentLog(), tdErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	const n = 200
	send := testenv.Command(t, 2*time.Minute, "ip", "netns", "exec", h.ns, python, "-c", fmt.Sprintf(`
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
for i in range(%d):
    s.sendto(b"plumb-dns-%%05d" %% i + b"x" * 60, ("192.0.2.1", 53))
    s.sendto(b"plumb-mdns-%%05d" %% i, ("192.0.2.1", 5353))
    s.sendto(b"plumb-other-%%05d" %% i, ("192.0.2.1", 40053))
    time.sleep(0.001)
`, n))
	if out, err := send.CombinedOutput(); err != nil {
		t.Fatalf("sender: %v\n%s", err, out)
	}
	time.Sleep(200 * time.Millisecond) // tcpdump writes what it has (-U)
	td.Process.Signal(syscall.SIGINT)
	td.Wait()
	agentCmd.Process.Signal(syscall.SIGTERM)
	if err := agentCmd.Wait(); err != nil {
		t.Fatalf("agent exit on SIGTERM: %v\n%s", err, agentLog())
	}
	c := dialPlumb(t, addr)
	got, _ := fetchInstance(t, c, "pcap.sz", "live")
	raw, _ := os.ReadFile(ref)
	want := readPackets(t, bytes.NewReader(raw))
	dns := 0
	for _, p := range got {
		if bytes.Contains(p.data, []byte("plumb-mdns-")) || bytes.Contains(p.data, []byte("plumb-other-")) {
			t.Fatalf("a packet the filter drops reached the server")
		}
		if bytes.Contains(p.data, []byte("plumb-dns-")) {
			dns++
		}
	}
	if dns != n {
		t.Errorf("%d of %d DNS datagrams reached the server", dns, n)
	}
	if len(got) != len(want) {
		t.Fatalf("the server holds %d packets, tcpdump %s wrote %d (%d bytes): %s", len(got), expr, len(want), len(raw), tdErr.String())
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i].data) {
			t.Fatalf("packet %d differs from tcpdump's", i+1)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestSchedulerTakeover is issue 61's lapsed scheduler: two servers on
// PostgreSQL metadata run builtin:dns over one site's many blocks (read
// apart and joined in order), and the server holding the scheduling duty
// is SIGKILLed mid-run, or paused past --duty-ttl and let go on, while a
// damaged block waits out of order at another site. The other takes the
// duty and the backlog drains, every good block's records made; the
// damaged one is FAULTY with its parse error; the paused one, resumed,
// stays up (it used to die of the nil dereference of a failed first
// half).
func TestSchedulerTakeover(t *testing.T) {
	for _, how := range []string{"killed", "paused"} {
		t.Run(how, func(t *testing.T) { schedulerTakeover(t, how) })
	}
}

func schedulerTakeover(t *testing.T, how string) {
	pg := testenv.StartPostgresServer(t)
	dir := t.TempDir()
	capture := filepath.Join(dir, "capture.pcap")
	if _, errOut, code := plumbExec(t, "synth", "--out", capture, "--size", "3MiB", "--seed", "61", "--tcp", "0.2"); code != 0 {
		t.Fatal(errOut)
	}
	store := "file://" + filepath.Join(dir, "blobs")
	var addrs []string
	var procs []*plumbProc
	for i := range 2 {
		addr := testenv.FreeAddr(t)
		procs = append(procs, startPlumb(t, "serve", "--data", filepath.Join(dir, fmt.Sprint("server", i)), "--listen", addr,
			"--meta", pg.URL, "--store", store, "--log-level", "info", "--tick", "100ms", "--duty-ttl", "3s", "--slots", "2"))
		waitListening(t, addr)
		addrs = append(addrs, addr)
	}
	all := strings.Join(addrs, ",")
	c, err := client.Dial(all)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	job := "job: dns\nfrom: earliest\nqueues: [pcap]\nstages:\n  - {name: dns, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}\n"
	if res, err := c.SubmitJob(ctx, "dns.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	scheduler := func() int {
		for i, p := range procs {
			if strings.Contains(p.log.String(), `"took a duty: this server does it for all" duty=scheduling`) {
				return i
			}
		}
		return -1
	}
	testenv.WaitFor(t, time.Minute, "a server to take the scheduling duty", func() bool { return scheduler() >= 0 })
	cmd := testenv.Command(t, 5*time.Minute, os.Args[0], "import", "--quiet", "--server", all, "--site", "lax", "--new-instance", "--queue", "pcap",
		"--spool", filepath.Join(dir, "spool"), "--block-size", "32KiB", capture)
	cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("import: %v\n%s", err, out.String())
	}
	in, err := c.Blocks(ctx, "pcap")
	if err != nil || len(in) < 40 {
		t.Fatalf("%d blocks imported (%v); the test wants many", len(in), err)
	}
	made := func() int {
		bs, _ := c.Blocks(ctx, "dns.arrow")
		return len(bs)
	}
	// And a damaged block out of order at another site, the issue's
	// first crash: it must end FAULTY with its parse error, its
	// neighbours made, whichever server runs it.
	good, err := os.ReadFile("../../testdata/pcaps/dnscap__dns.pcap")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		name string
		data []byte
	}{
		{"20161020-151621-00000002.bad.pcap", []byte("\x00garbage, not a pcap\xff")},
		{"20161020-151621-00000003.bad.pcap", good},
		{"20161020-151621-00000001.bad.pcap", good},
	} {
		if _, err := c.Put(ctx, source(b.name, b.data)); err != nil {
			t.Fatal(err)
		}
	}
	total := len(in) + 2
	testenv.WaitFor(t, time.Minute, "the first records", func() bool { return made() > 0 })
	s := procs[scheduler()]
	at := made()
	switch how {
	case "killed":
		s.cmd.Process.Kill()
		s.cmd.Wait()
	case "paused":
		s.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(8 * time.Second) // past --duty-ttl 3s: the other takes the duty
		s.cmd.Process.Signal(syscall.SIGCONT)
	}
	began := time.Now()
	for made() < total {
		if time.Since(began) > 90*time.Second {
			t.Fatalf("%d of %d blocks' records 90 s after the scheduler was %s (%d when it was)\nserver 0: %.3000s\nserver 1: %.3000s",
				made(), total, how, at, procs[0].log.String(), procs[1].log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("scheduler %s with %d of %d blocks made: the rest made %s later", how, at, total, time.Since(began).Round(100*time.Millisecond))
	if how == "paused" {
		if s.cmd.ProcessState != nil || s.cmd.Process.Signal(syscall.Signal(0)) != nil {
			t.Fatalf("the paused scheduler died when it went on:\n%s", s.log)
		}
	}
	for i, p := range procs {
		if strings.Contains(p.log.String(), "panic") {
			t.Errorf("server %d's log has a panic:\n%s", i, p.log)
		}
	}
	testenv.WaitFor(t, time.Minute, "the damaged block set aside", func() bool { fb, _ := c.Faulty(ctx, ""); return len(fb) == 1 })
	fb, _ := c.Faulty(ctx, "")
	if !strings.Contains(fb[0].Block, "00000002.bad.") || !strings.Contains(fb[0].Error, "malformed") || strings.Contains(fb[0].Error, "server stopped") {
		t.Errorf("faulty after the takeover: %+v; want only the damaged block, with its parse error", fb)
	}
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestImportEndReleasesHeldRows: dnscap's dnso1tcp-bighole capture has
// a TCP stream with a hole that never fills; `plumb dns FILE` gives all
// 41 messages, the ones past the hole when the capture ends. Imported
// into a server in small blocks, through builtin:decode and builtin:dns
// on the server and on a remote worker, the import's last block is
// marked final and the stage lets go of what it held there: the same 41
// rows, at the same times, rather than rows held for a next block that
// never comes.
func TestImportEndReleasesHeldRows(t *testing.T) {
	capture := "../../testdata/pcaps/dnscap__dnso1tcp-bighole.pcap"
	ref := filepath.Join(t.TempDir(), "ref.arrow")
	if out, errOut, code := plumbExec(t, "dns", "-o", ref, capture); code != 0 {
		t.Fatalf("plumb dns: %s %s", out, errOut)
	}
	want := arrowTimes(t, ref)
	if len(want) != 41 {
		t.Fatalf("plumb dns gives %d rows of bighole; the capture has 41 messages", len(want))
	}
	const job = `
job: dns
from: earliest
stages:
  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap]}
  - {name: dns, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}
`
	for _, mode := range []string{"server", "worker"} {
		t.Run(mode, func(t *testing.T) {
			addr := testenv.FreeAddr(t)
			args := []string{"serve", "--data", t.TempDir(), "--listen", addr, "--log-level", "warn", "--tick", "100ms"}
			if mode == "worker" {
				args = append(args, "--remote-only")
			}
			startPlumb(t, args...)
			waitListening(t, addr)
			if mode == "worker" {
				startPlumb(t, "worker", "--server", addr, "--slots", "2", "--scratch", t.TempDir())
			}
			if out, errOut, code := plumbExec(t, "import", "--quiet", "--server", addr, "--site", "lax", "--new-instance",
				"--spool", filepath.Join(t.TempDir(), "spool"), "--block-size", "2KiB", capture); code != 0 {
				t.Fatalf("import: %s %s", out, errOut)
			}
			c, err := client.Dial(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			blocks, err := c.Blocks(ctx, "pcap.sz")
			if err != nil || len(blocks) < 5 {
				t.Fatalf("imported %d blocks (%v); want the capture cut into several", len(blocks), err)
			}
			if res, err := c.SubmitJob(ctx, "dns.yaml", []byte(job)); err != nil || res.State != "accepted" {
				t.Fatalf("submit: %+v %v", res, err)
			}
			if out, errOut, code := plumbExec(t, "stats", "--wait", "--server", addr); code != 0 {
				t.Fatalf("stats --wait: %s %s", out, errOut)
			}
			got := recordTimes(t, c, client.RecordsTicket{Records: "dns.arrow"})
			if len(got) != len(want) {
				t.Fatalf("%d blocks: %d rows through the %s; plumb dns FILE gives %d", len(blocks), len(got), mode, len(want))
			}
			slices.Sort(got)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("row %d at %s; plumb dns FILE has %s", i, got[i], want[i])
				}
			}
		})
	}
}

// TestStoppedLiveAgentReleasesHeldRows: an agent reading a source it
// cannot read on after a stop (stdin here, a live capture alike) ends
// its site's capture when it is stopped: the block the stop finishes is
// marked final, and builtin:dns lets go of what it held there, rather
// than hold it for a next block that may never come (a site
// decommissioned). The bighole capture's 41 rows all come out though
// the pipe stays open.
func TestStoppedLiveAgentReleasesHeldRows(t *testing.T) {
	capture := "../../testdata/pcaps/dnscap__dnso1tcp-bighole.pcap"
	data, err := os.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	addr := servePlumb(t, t.TempDir(), "--tick", "100ms")
	c := dialPlumb(t, addr)
	ctx := context.Background()
	const job = `
job: dns
from: earliest
queues: [pcap.sz]
stages:
  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: forever}
`
	if res, err := c.SubmitJob(ctx, "dns.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	agent := exec.Command(os.Args[0], "agent", "--server", addr, "--site", "lax", "--new-instance",
		"--spool", filepath.Join(t.TempDir(), "spool"), "--block-size", "2KiB", "-")
	agent.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	log := &procLog{}
	agent.Stdout, agent.Stderr = log, log
	stdin, err := agent.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	if _, err := stdin.Write(data); err != nil {
		t.Fatal(err)
	}
	// The blocks cut so far ship; the last stays open while stdin does.
	waitBlocks(t, c, "pcap.sz", 5, log)
	agent.Process.Signal(syscall.SIGTERM)
	if err := agent.Wait(); err != nil {
		t.Fatalf("agent stopped with %v; log:\n%s", err, log)
	}
	if out, errOut, code := plumbExec(t, "stats", "--wait", "--server", addr); code != 0 {
		t.Fatalf("stats --wait: %s %s", out, errOut)
	}
	// The last block is the last in sequence: blocks upload several at
	// once, so it may arrive before an earlier one.
	blocks, err := c.Blocks(ctx, "pcap.sz")
	if err != nil || len(blocks) == 0 {
		t.Fatalf("no blocks: %v", err)
	}
	last := slices.MaxFunc(blocks, func(a, b client.Block) int { return cmp.Compare(a.Seq, b.Seq) })
	if !last.Final {
		t.Fatalf("the stop's block is not final: %+v %v; agent log:\n%s", blocks, err, log)
	}
	// stats --wait can return while a run cut short waits for its lease
	// to lapse (a busy machine): the rows must come, not at once.
	testenv.Eventually(t, time.Minute, "the capture's 41 messages as rows after the agent stopped", func() (string, bool) {
		table, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"time"}})
		if err != nil {
			t.Fatal(err)
		}
		defer table.Release()
		return fmt.Sprintf("%d rows from %d blocks", table.NumRows(), len(blocks)), table.NumRows() == 41
	})
}

// arrowTimes reads the sorted "time" column of an Arrow IPC file.
func arrowTimes(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ipc.NewFileReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	col := r.Schema().FieldIndices("time")[0]
	var out []string
	for i := range r.NumRecords() {
		rec, err := r.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		for j := range int(rec.NumRows()) {
			out = append(out, rec.Column(col).ValueStr(j))
		}
	}
	slices.Sort(out)
	return out
}

// TestDeadAgentsCaptureEnds: an agent that dies (SIGKILL) says nothing
// of its capture's end, and what builtin:dns held past its last block
// (the bighole capture's messages behind a hole) waited for a next block
// for ever. After --end-capture-after without a block the server ends
// the capture itself with an empty final block, and the rows come out:
// as many as plumb dns gives of what the agent shipped. The agent,
// started again on the same spool, ships its blocks after that end, with
// nothing refused.
func TestDeadAgentsCaptureEnds(t *testing.T) {
	capture := "../../testdata/pcaps/dnscap__dnso1tcp-bighole.pcap"
	data, err := os.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	addr := servePlumb(t, t.TempDir(), "--tick", "100ms", "--end-capture-after", "4s")
	c := dialPlumb(t, addr)
	ctx := context.Background()
	const job = `
job: dns
from: earliest
queues: [pcap.sz]
stages:
  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: forever}
`
	if res, err := c.SubmitJob(ctx, "dns.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	spool := filepath.Join(t.TempDir(), "spool")
	startAgent := func(extra ...string) (*exec.Cmd, io.WriteCloser, *procLog) {
		agent := exec.Command(os.Args[0], append([]string{"agent", "--server", addr, "--site", "lax", "--spool", spool, "--block-size", "2KiB"}, append(extra, "-")...)...)
		agent.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
		log := &procLog{}
		agent.Stdout, agent.Stderr = log, log
		stdin, err := agent.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
		return agent, stdin, log
	}
	agent, stdin, log := startAgent("--new-instance")
	if _, err := stdin.Write(data); err != nil {
		t.Fatal(err)
	}
	waitBlocks(t, c, "pcap.sz", 5, log)
	agent.Process.Kill()
	agent.Wait()

	// The server ends the silent capture: a block it made, empty and final.
	var ended client.Block
	testenv.Eventually(t, time.Minute, "a block that ends the capture after the agent died", func() (string, bool) {
		blocks, err := c.Blocks(ctx, "pcap.sz")
		if err != nil {
			t.Fatal(err)
		}
		ended = slices.MaxFunc(blocks, func(a, b client.Block) int { return cmp.Compare(a.Seq, b.Seq) })
		return fmt.Sprintf("%+v", blocks), ended.Final
	})
	if out, errOut, code := plumbExec(t, "stats", "--wait", "--server", addr); code != 0 {
		t.Fatalf("stats --wait: %s %s", out, errOut)
	}
	// What the agent shipped, as one capture, read locally.
	shipped := filepath.Join(t.TempDir(), "shipped.pcap")
	out, errOut, code := plumbExec(t, "stream", "pcap.sz", "--server", addr, "--instance", "lax")
	if code != 0 {
		t.Fatalf("plumb stream: %s", errOut)
	}
	if err := os.WriteFile(shipped, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join(t.TempDir(), "ref.arrow")
	if out, errOut, code := plumbExec(t, "dns", "-o", ref, shipped); code != 0 {
		t.Fatalf("plumb dns: %s %s", out, errOut)
	}
	want := arrowTimes(t, ref)
	table, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"time"}})
	if err != nil {
		t.Fatal(err)
	}
	got := table.NumRows()
	table.Release()
	if got != int64(len(want)) || len(want) == 0 {
		t.Fatalf("%d rows through the server once the capture ended at block %s; plumb dns gives %d of what was shipped", got, ended.Name, len(want))
	}

	// The agent comes back on its spool: its blocks go after the end.
	agent, stdin, log = startAgent()
	if _, err := stdin.Write(data); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the agent started again: %v; log:\n%s", err, log)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the agent started again did not finish its capture in a minute; log:\n%s", log)
	}
	if strings.Contains(log.String(), "refused") {
		t.Fatalf("the server refused a block of the agent started again:\n%s", log)
	}
	blocks, err := c.Blocks(ctx, "pcap.sz")
	if err != nil {
		t.Fatal(err)
	}
	after := 0
	for _, b := range blocks {
		if b.Seq > ended.Seq {
			after++
		}
	}
	if after == 0 {
		t.Fatalf("no block of the agent started again follows the end (seq %d): %+v\nlog:\n%s", ended.Seq, blocks, log)
	}
}

// recordTimes reads a records ticket's time column, as text.
func recordTimes(t *testing.T, c *client.Client, ticket client.RecordsTicket) []string {
	t.Helper()
	ticket.Columns = []string{"time"}
	rows, err := c.Records(context.Background(), ticket)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Release()
	var out []string
	for rows.Next() {
		rec := rows.RecordBatch()
		for i := range int(rec.NumRows()) {
			out = append(out, rec.Column(0).ValueStr(i))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

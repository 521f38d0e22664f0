package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/internal/testprog"
	"github.com/plumb-dev/plumb/pcap"
)

// cutBlocks splits packets into snappy-compressed capture blocks of a
// site, named with their first packet's time, as an agent would.
func cutBlocks(t *testing.T, pkts []packet, per int, site string) []client.Source {
	var out []client.Source
	for i, seq := 0, uint64(1); i < len(pkts); i, seq = i+per, seq+1 {
		part := pkts[i:min(i+per, len(pkts))]
		var b bytes.Buffer
		z, _ := codecs.Snappy.NewWriter(&b)
		w, _ := pcap.NewWriter(z, layers.LinkTypeEthernet, 65535, false)
		for _, p := range part {
			w.WritePacket(p.ci, p.data)
		}
		w.Flush()
		z.Close()
		data := b.Bytes()
		sum := sha256.Sum256(data)
		n := block.Name{Time: part[0].ci.Timestamp, Seq: seq, Instance: site, Queue: "pcap.sz"}
		out = append(out, client.Source{Name: n.String(), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }})
	}
	return out
}

// TestStreamConsumerKeepsItsCursor is issue 62's first-day stream: a
// named consumer re-read the whole site at every run, also with --from
// checkpoint, where docs/streams.md promises it keeps its cursor, and a
// caught-up read wrote 0 bytes. Now a second run writes an empty capture
// (a header, no packets), a run after more blocks came writes only
// those, and --from earliest reads everything again.
func TestStreamConsumerKeepsItsCursor(t *testing.T) {
	addr := servePlumb(t, t.TempDir())
	c := dialPlumb(t, addr)
	dir := t.TempDir()
	capture := filepath.Join(dir, "capture.pcap")
	pkts := makeCapture(t, capture, 120, 62)
	blocks := cutBlocks(t, pkts, 40, "lax")
	ctx := context.Background()
	for _, b := range blocks[:2] {
		if _, err := c.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	stream := func(args ...string) []packet {
		t.Helper()
		out, errOut, code := plumbExec(t, append([]string{"stream", "pcap.sz", "--server", addr, "--instance", "lax", "--consumer", "ids"}, args...)...)
		if code != 0 {
			t.Fatalf("plumb stream %v: exit %d: %s", args, code, errOut)
		}
		if len(out) < pcap.HeaderSize {
			t.Fatalf("plumb stream %v wrote %d bytes: not a capture, not even an empty one", args, len(out))
		}
		return readPackets(t, strings.NewReader(out))
	}
	if got := stream(); len(got) != 80 {
		t.Fatalf("the first run: %d packets, want the 80 of two blocks", len(got))
	}
	if got := stream(); len(got) != 0 {
		t.Fatalf("run again: %d packets, want none: the cursor is past them", len(got))
	}
	if _, err := c.Put(ctx, blocks[2]); err != nil {
		t.Fatal(err)
	}
	got := stream()
	if len(got) != 40 || !got[0].ci.Timestamp.Equal(pkts[80].ci.Timestamp) {
		t.Fatalf("after a third block: %d packets, want its 40", len(got))
	}
	if got := stream("--from", "checkpoint"); len(got) != 0 {
		t.Fatalf("--from checkpoint, the default, named: %d packets, want none", len(got))
	}
	if got := stream("--from", "earliest"); len(got) != 120 {
		t.Fatalf("--from earliest: %d packets, want all 120", len(got))
	}
}

// TestStreamToTcpdump: a site's blocks uploaded out of order and one twice
// come out of `plumb stream | tcpdump -r - -w out.pcap` as the original
// capture: every packet once, in time order; the read leaves no consumer.
func TestStreamToTcpdump(t *testing.T) {
	tcpdump := testenv.Tool(t, "tcpdump")
	addr := servePlumb(t, t.TempDir())
	c := dialPlumb(t, addr)
	dir := t.TempDir()
	pkts := makeCapture(t, filepath.Join(dir, "orig.pcap"), 3000, 5)
	blocks := cutBlocks(t, pkts, 250, "lax")
	order := rand.New(rand.NewPCG(1, 2)).Perm(len(blocks))
	order = append(order, order[3]) // a duplicate
	for _, i := range order {
		if _, err := c.Put(context.Background(), blocks[i]); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "out.pcap")
	stream := testenv.Command(t, 2*time.Minute, os.Args[0], "stream", "pcap.sz", "--instance", "lax", "--server", addr)
	stream.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	td := testenv.Command(t, 2*time.Minute, tcpdump, "-r", "-", "-w", out)
	pipe, _ := stream.StdoutPipe()
	td.Stdin = pipe
	var serr, terr bytes.Buffer
	stream.Stderr, td.Stderr = &serr, &terr
	if err := td.Start(); err != nil {
		t.Fatal(err)
	}
	if err := stream.Run(); err != nil {
		t.Fatalf("plumb stream: %v\n%s", err, serr.String())
	}
	if err := td.Wait(); err != nil {
		t.Fatalf("tcpdump: %v\n%s", err, terr.String())
	}
	f, _ := os.Open(out)
	defer f.Close()
	got := readPackets(t, f)
	samePackets(t, "stream through tcpdump", got, pkts)
	// Without --consumer the stream read as a temporary consumer, deleted
	// at the end: no cursor is left holding the site's blocks.
	left := 0
	if err := c.Do(context.Background(), flight.ActListState, map[string]string{"queue": "pcap.sz"}, func([]byte) error { left++; return nil }); err != nil || left != 0 {
		t.Errorf("stream consumers left after plumb stream: %d (%v)", left, err)
	}
}

// TestStreamGaps: a withheld block is a gap event; with gap.then skip the
// stream moves on after the wait and records the skip; the block arriving
// later is reported late, not inserted.
func TestStreamGaps(t *testing.T) {
	addr := servePlumb(t, t.TempDir())
	c := dialPlumb(t, addr)
	ctx := context.Background()
	pkts := makeCapture(t, filepath.Join(t.TempDir(), "orig.pcap"), 500, 6)
	blocks := cutBlocks(t, pkts, 100, "ams") // seqs 1..5
	for i, b := range blocks {
		if i != 2 {
			c.Put(ctx, b)
		}
	}
	req := flight.StreamRequest{Queue: "pcap.sz", Instance: "ams", Consumer: "ids"}
	var p struct {
		Next    uint64 `json:"next"`
		Present bool   `json:"present"`
		Gap     int64  `json:"gap"`
		Late    []uint64
	}
	for seq := uint64(1); seq <= 2; seq++ {
		var pr flight.ProcessResult
		if err := c.StreamAction(ctx, flight.ActProcessNext, req, &pr); err != nil || pr.Seq != seq {
			t.Fatalf("process-next = %+v, %v", pr, err)
		}
		r := req
		r.Seq = seq
		if err := c.StreamAction(ctx, flight.ActCommit, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.StreamAction(ctx, flight.ActPeekNext, req, &p); err != nil || p.Next != 3 || p.Present || p.Gap != 2 {
		t.Fatalf("peek at the withheld block = %+v, %v", p, err)
	}
	// The stream ticket, from this consumer's cursor, waits 300 ms at the
	// hole, then skips it.
	tk := flight.StreamTicket{Stream: "pcap.sz", Instance: "ams", Consumer: "ids", Gap: &flight.GapPolicy{Wait: "300ms", Then: "skip"}}
	tk.From, _ = json.Marshal("3")
	s, err := c.Stream(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	s.OnEvent = func(meta []byte) { events = append(events, string(meta)) }
	var names []string
	start := time.Now()
	for s.Next() {
		names = append(names, s.Header().Name)
	}
	s.Close()
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 300*time.Millisecond || len(names) != 2 || !strings.Contains(names[0], "-00000004.") {
		t.Fatalf("stream gave %v after %v", names, time.Since(start))
	}
	if len(events) != 2 || !strings.Contains(events[0], `"event":"gap","next":3,"missing":1`) || !strings.Contains(events[1], `"event":"skipped","next":3`) {
		t.Fatalf("events = %v", events)
	}
	c.Put(ctx, blocks[2]) // the withheld block, late
	if err := c.StreamAction(ctx, flight.ActPeekNext, req, &p); err != nil || p.Gap != -3 || len(p.Late) != 1 || p.Late[0] != 3 {
		t.Fatalf("peek after the late block = %+v, %v", p, err)
	}
	var cur struct {
		Next    uint64   `json:"next"`
		Skipped []uint64 `json:"skipped"`
	}
	if err := c.StreamAction(ctx, flight.ActGetState, req, &cur); err != nil || cur.Next != 6 || len(cur.Skipped) != 1 || cur.Skipped[0] != 3 {
		t.Fatalf("cursor = %+v, %v", cur, err)
	}

	// Status counts stream consumers like groups: "ids" moved past four
	// blocks (two commits, two streamed) and owes none; "slow", which
	// only looked, owes all five.
	if err := c.StreamAction(ctx, flight.ActPeekNext, flight.StreamRequest{Queue: "pcap.sz", Instance: "ams", Consumer: "slow"}, &p); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		if r.Kind == "stream" {
			got[r.Group] = fmt.Sprintf("backlog %d samples %d owed-since %v", r.Backlog, r.ArrivalTo.Samples, r.OldestAge > 0)
		}
	}
	want := map[string]string{"ids": "backlog 0 samples 4 owed-since false", "slow": "backlog 5 samples 0 owed-since true"}
	if !maps.Equal(got, want) {
		t.Fatalf("stream rows of status = %v, want %v", got, want)
	}
	out, _, code := plumbExec(t, "status", "--server", addr)
	if code != 0 || !strings.Contains(out, "stream slow") {
		t.Fatalf("plumb status does not list the stream consumer:\n%s", out)
	}
}

// TestStreamStageSurvivesServerKill SIGKILLs the server while a stream
// stage counts packets; restarted, the stage resumes from its last
// checkpoint and the count ends exact.
func TestStreamStageSurvivesServerKill(t *testing.T) {
	data := t.TempDir()
	addr := testenv.FreeAddr(t)
	serve := func() *plumbProc {
		p := startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
		waitListening(t, addr)
		return p
	}
	p := serve()
	c := dialPlumb(t, addr)
	ctx := context.Background()
	pkts := makeCapture(t, filepath.Join(t.TempDir(), "orig.pcap"), 6000, 9)
	blocks := cutBlocks(t, pkts, 200, "lax") // 30 blocks
	if _, err := c.Put(ctx, blocks[0]); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(t.TempDir(), "counter.sh")
	os.WriteFile(prog, []byte("#!/bin/sh\n"+testprog.CounterEnv+"=1 exec "+os.Args[0]+"\n"), 0o755)
	res, err := c.SubmitJob(ctx, "ids.yaml", []byte("job: ids\nfrom: earliest\nstages:\n  - {name: count, abstraction: stream, inputs: [pcap.sz], program: ["+prog+"]}\n"))
	if err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	st, err := c.Stats(ctx)
	if err != nil || len(st) != 1 {
		t.Fatalf("stats: %v %v", st, err)
	}
	consumer := st[0].ID
	// Ship the blocks in three parts, killing the server while the stage
	// streams each.
	rng := rand.New(rand.NewPCG(4, 4))
	for part := range 3 {
		for _, b := range blocks[1+part*10 : min(1+(part+1)*10, len(blocks))] {
			if _, err := c.Put(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		p.cmd.Process.Signal(os.Kill)
		p.cmd.Wait()
		p = serve()
		c.Close()
		if c, err = client.Dial(addr); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var cur struct {
			Checkpoint *struct {
				State map[string]string `json:"state"`
			} `json:"checkpoint"`
		}
		err := c.StreamAction(ctx, flight.ActGetState, flight.StreamRequest{Queue: "pcap.sz", Instance: "lax", Consumer: consumer}, &cur)
		if err == nil && cur.Checkpoint != nil {
			var s struct{ Packets, Blocks int }
			json.Unmarshal([]byte(cur.Checkpoint.State["state"]), &s)
			if s.Blocks == len(blocks) {
				if s.Packets != len(pkts) {
					t.Fatalf("counted %d packets of %d", s.Packets, len(pkts))
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no final count: %+v %v\n%s", cur, err, p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/filter"
)

type packet struct {
	ci   gopacket.CaptureInfo
	data []byte
}

func readPackets(t *testing.T, r io.Reader) []packet {
	t.Helper()
	rd, closer, err := pcap.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var out []packet
	for {
		data, ci, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read packets: %v", err)
		}
		out = append(out, packet{ci: ci, data: bytes.Clone(data)})
	}
}

// fetchInstance downloads every block of one instance, checks that their
// sequence numbers run 1..N without a gap or a repeat, and returns the
// packets they hold in order.
func fetchInstance(t *testing.T, c *client.Client, queue, instance string) ([]packet, int) {
	t.Helper()
	ctx := context.Background()
	all, err := c.Blocks(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[uint64]string{}
	for _, b := range all {
		if b.Instance != instance {
			continue
		}
		if _, dup := bySeq[b.Seq]; dup {
			t.Fatalf("instance %s: sequence %d stored twice", instance, b.Seq)
		}
		bySeq[b.Seq] = b.Name
	}
	var pkts []packet
	for seq := uint64(1); seq <= uint64(len(bySeq)); seq++ {
		name, ok := bySeq[seq]
		if !ok {
			t.Fatalf("instance %s: %d blocks but sequence %d is missing", instance, len(bySeq), seq)
		}
		s, err := c.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Next() {
			t.Fatalf("get %s: %v", name, s.Err())
		}
		n, _ := block.Parse(name)
		dec, err := codecs.FromExt(n.Queue).NewReader(s)
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, readPackets(t, dec)...)
		dec.Close()
		s.Close()
	}
	return pkts, len(bySeq)
}

func samePackets(t *testing.T, what string, got, want []packet) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d packets on the server, %d in the input", what, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i].data) || !got[i].ci.Timestamp.Equal(want[i].ci.Timestamp) || got[i].ci.Length != want[i].ci.Length {
			t.Fatalf("%s: packet %d differs (ts %v vs %v, %d vs %d bytes)", what, i, got[i].ci.Timestamp, want[i].ci.Timestamp, len(got[i].data), len(want[i].data))
		}
	}
}

// tcpdumpText is what tcpdump prints for a capture: timestamps, lengths
// and the bytes in hex.
func tcpdumpText(t *testing.T, tcpdump, path string) string {
	t.Helper()
	out, err := testenv.Command(t, 2*time.Minute, tcpdump, "-r", path, "-tt", "-nn", "-x", "-s", "0").Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("tcpdump -r %s: %v", path, err)
	}
	return string(out)
}

// TestAgentFromTcpdump pipes every public capture through the real
// tcpdump into `plumb agent -` and checks that the blocks on the server
// hold exactly the original packets, as tcpdump reads them on both sides.
func TestAgentFromTcpdump(t *testing.T) {
	tcpdump := testenv.Tool(t, "tcpdump")
	addr := testenv.FreeAddr(t)
	startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr)
	waitListening(t, addr)
	c := dialPlumb(t, addr)
	files, _ := filepath.Glob("../../testdata/pcaps/*.pcap")
	for i, f := range files {
		site := fmt.Sprintf("site%02d", i)
		cmd := testenv.Command(t, 2*time.Minute, "sh", "-c", fmt.Sprintf("%s -r %s -w - 2>/dev/null | %s agent --server %s --site %s --new-instance --block-size 4KiB --spool %s --log-level warn -",
			tcpdump, f, os.Args[0], addr, site, filepath.Join(t.TempDir(), "spool")))
		cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: agent: %v\n%s", f, err, out)
		}
		raw, _ := os.ReadFile(f)
		want := readPackets(t, bytes.NewReader(raw))
		got, nblocks := fetchInstance(t, c, "pcap.sz", site)
		samePackets(t, filepath.Base(f), got, want)
		if len(want) > 0 && nblocks == 0 {
			t.Fatalf("%s: no blocks", f)
		}
		// tcpdump on both sides agrees, byte for byte.
		if len(want) > 0 {
			rebuilt := filepath.Join(t.TempDir(), "rebuilt.pcap")
			writeCapture(t, rebuilt, linkTypeOf(t, raw), got)
			if a, b := tcpdumpText(t, tcpdump, f), tcpdumpText(t, tcpdump, rebuilt); a != b {
				t.Fatalf("%s: tcpdump reads the shipped packets differently", f)
			}
		}
	}
}

func linkTypeOf(t *testing.T, raw []byte) pcap.Reader {
	rd, closer, err := pcap.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	closer.Close()
	return *rd
}

func writeCapture(t *testing.T, path string, like pcap.Reader, pkts []packet) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := pcap.NewWriter(f, like.LinkType, like.Snaplen, like.Nanos)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		if err := w.WritePacket(p.ci, p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

// makeCapture writes n packets of varying size, 1 ms apart.
func makeCapture(t *testing.T, path string, n int, seed uint64) []packet {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	start := time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC)
	pkts := make([]packet, n)
	for i := range pkts {
		data := make([]byte, 60+r.IntN(1400))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		ts := start.Add(time.Duration(i) * time.Millisecond)
		pkts[i] = packet{ci: gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: len(data)}, data: data}
	}
	writeCapture(t, path, pcap.Reader{LinkType: layers.LinkTypeEthernet, Snaplen: 65535}, pkts)
	return pkts
}

// TestImportSIGKILL kills an import with SIGKILL at random moments and
// runs it again until it finishes: every packet is on the server exactly
// once, in order, and the sequence numbers have no gap.
func TestImportSIGKILL(t *testing.T) {
	addr := servePlumb(t, t.TempDir())
	input := filepath.Join(t.TempDir(), "input.pcap")
	want := makeCapture(t, input, 30000, 3)
	spool := filepath.Join(t.TempDir(), "spool")
	rng := rand.New(rand.NewPCG(5, 5))
	c := dialPlumb(t, addr)
	stored := func() int64 {
		st, _ := c.QueueStats(context.Background(), "pcap.sz")
		return st.Blocks
	}
	kills := 0
	for run := 0; ; run++ {
		if run > 60 {
			t.Fatal("import did not finish in 60 runs")
		}
		// Kill once a few more blocks are stored: mid-work whatever the
		// machine's speed.
		base, more := stored(), int64(1+rng.IntN(12))
		p := startPlumb(t, "import", "--quiet", "--server", addr, "--site", "crash", "--new-instance",
			"--spool", spool, "--block-size", "64KiB", "--log-level", "warn", input)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
	wait:
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run %d: import failed: %v\n%s", run, err, p.log)
				}
				t.Logf("import finished on run %d after %d SIGKILLs", run+1, kills)
				got, nblocks := fetchInstance(t, c, "pcap.sz", "crash")
				samePackets(t, "after SIGKILLs", got, want)
				if nblocks < 100 || kills < 3 {
					t.Fatalf("only %d blocks and %d kills; the test should cut many and kill often", nblocks, kills)
				}
				return
			case <-time.After(5 * time.Millisecond):
				if stored() >= base+more {
					p.cmd.Process.Signal(syscall.SIGKILL)
					<-done
					kills++
					break wait
				}
			}
		}
	}
}

// TestAgentOutage runs an import while the server is killed and stays down
// for longer than the backoff cap, with a spool too small for the whole
// input: the cutter waits for room, the shipper retries, and when the
// server is back everything arrives exactly once.
func TestAgentOutage(t *testing.T) {
	addr := testenv.FreeAddr(t)
	data := t.TempDir()
	srv := startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
	waitListening(t, addr)
	input := filepath.Join(t.TempDir(), "input.pcap")
	want := makeCapture(t, input, 8000, 4)
	spool := filepath.Join(t.TempDir(), "spool")
	imp := startPlumb(t, "import", "--quiet", "--server", addr, "--site", "outage", "--new-instance",
		"--spool", spool, "--block-size", "64KiB", "--spool-max", "256KiB", "--max-backoff", "500ms", input)
	done := make(chan error, 1)
	go func() { done <- imp.cmd.Wait() }()

	time.Sleep(150 * time.Millisecond)
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.cmd.Wait()
	time.Sleep(2 * time.Second) // > 3 backoff caps
	select {
	case err := <-done:
		t.Fatalf("import ended while the server was down: %v\n%s", err, imp.log)
	default:
	}
	// While the server is down the spool stays bounded: the cutter waits.
	var spooled int64
	ents, _ := os.ReadDir(filepath.Join(spool, "ready"))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			spooled += fi.Size()
		}
	}
	if spooled > 256<<10+128<<10 {
		t.Fatalf("spool holds %d bytes with --spool-max 256KiB", spooled)
	}
	startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("import: %v\n%s", err, imp.log)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("import did not finish within 60s of the server's return\n%s", imp.log)
	}
	if !strings.Contains(imp.log.String(), "imported") {
		t.Fatalf("import did not report its totals:\n%s", imp.log)
	}
	c := dialPlumb(t, addr)
	got, _ := fetchInstance(t, c, "pcap.sz", "outage")
	samePackets(t, "after an outage", got, want)
}

// TestAgentBadInput: damaged and foreign files are reported and skipped,
// the good packets of a damaged file and every other file still arrive.
func TestAgentBadInput(t *testing.T) {
	addr := servePlumb(t, t.TempDir())
	dir := t.TempDir()
	good := filepath.Join(dir, "good.pcap")
	want := makeCapture(t, good, 50, 6)
	raw, _ := os.ReadFile(good)
	truncated := filepath.Join(dir, "truncated.pcap")
	os.WriteFile(truncated, raw[:len(raw)-7], 0o644)
	corrupt := filepath.Join(dir, "corrupt.pcap")
	bad := bytes.Clone(raw)
	bad[pcap.HeaderSize+8], bad[pcap.HeaderSize+9], bad[pcap.HeaderSize+10], bad[pcap.HeaderSize+11] = 0xff, 0xff, 0xff, 0x7f
	os.WriteFile(corrupt, bad, 0o644)
	empty := filepath.Join(dir, "empty.pcap")
	os.WriteFile(empty, nil, 0o644)
	garbage := filepath.Join(dir, "garbage.pcap")
	os.WriteFile(garbage, []byte("this is not a capture at all"), 0o644)

	var stdout, stderr bytes.Buffer
	cmd := testenv.Command(t, 2*time.Minute, os.Args[0], "import", "--quiet", "--server", addr, "--site", "bad", "--new-instance",
		"--spool", filepath.Join(dir, "spool"), truncated, corrupt, empty, garbage, good)
	cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil || !strings.Contains(stderr.String(), "4 source(s) could not be read in full") {
		t.Fatalf("import of bad files: %v; stderr:\n%s", err, stderr.String())
	}
	for _, f := range []string{truncated, corrupt, empty, garbage} {
		if !strings.Contains(stderr.String(), f) {
			t.Errorf("the log does not name %s:\n%s", f, stderr.String())
		}
	}
	c := dialPlumb(t, addr)
	got, _ := fetchInstance(t, c, "pcap.sz", "bad")
	// truncated: all but its last packet; corrupt: none; good: all.
	expect := append(append([]packet{}, want[:len(want)-1]...), want...)
	samePackets(t, "bad input", got, expect)
}

// digest folds packets into a hash of their timestamps, lengths and bytes.
func digest(t *testing.T, h hash.Hash, r io.Reader) int64 {
	t.Helper()
	rd, closer, err := pcap.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var n int64
	var hdr [20]byte
	for {
		data, ci, err := rd.Next()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint64(hdr[0:], uint64(ci.Timestamp.UnixNano()))
		binary.LittleEndian.PutUint32(hdr[8:], uint32(len(data)))
		binary.LittleEndian.PutUint64(hdr[12:], uint64(ci.Length))
		h.Write(hdr[:])
		h.Write(data)
		n++
	}
}

// TestAgentLargeGenerated ships a generated 256 MiB DNS capture through
// tcpdump into the agent, in 32 MiB blocks, and checks the packets on the
// server are exactly the input's.
func TestAgentLargeGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("256 MiB end-to-end run")
	}
	tcpdump := testenv.Tool(t, "tcpdump")
	dir := t.TempDir()
	input := filepath.Join(dir, "synth.pcap")
	gen := testenv.Command(t, 5*time.Minute, os.Args[0], "synth", "--out", input, "--size", "256MiB", "--seed", "42")
	gen.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("synth: %v\n%s", err, out)
	}
	addr := testenv.FreeAddr(t)
	startPlumb(t, "serve", "--data", filepath.Join(dir, "data"), "--listen", addr, "--log-level", "warn")
	waitListening(t, addr)
	cmd := testenv.Command(t, 10*time.Minute, "sh", "-c", fmt.Sprintf("%s -r %s -w - 2>/dev/null | %s agent --server %s --site big --new-instance --block-size 32MiB --spool %s --log-level warn -",
		tcpdump, input, os.Args[0], addr, filepath.Join(dir, "spool")))
	cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	f, err := os.Open(input)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := sha256.New()
	wantN := digest(t, want, f)

	c, blocks := dialBlocks(t, addr, "pcap.sz")
	// Several uploads are in flight, so arrival order is not sequence order.
	sort.Slice(blocks, func(i, j int) bool { return blocks[i].Seq < blocks[j].Seq })
	got := sha256.New()
	var gotN int64
	for i, b := range blocks {
		if b.Seq != uint64(i+1) {
			t.Fatalf("block %d has sequence %d", i, b.Seq)
		}
		s, err := c.Get(context.Background(), b.Name)
		if err != nil || !s.Next() {
			t.Fatalf("get %s: %v", b.Name, err)
		}
		dec, _ := codecs.Snappy.NewReader(s)
		gotN += digest(t, got, dec)
		dec.Close()
		s.Close()
	}
	if len(blocks) < 8 || gotN != wantN || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("%d blocks with %d packets on the server; the input has %d packets (digests equal: %v)",
			len(blocks), gotN, wantN, bytes.Equal(got.Sum(nil), want.Sum(nil)))
	}
	t.Logf("%d packets in %d blocks, identical", gotN, len(blocks))
}

// TestAgentWatchRotation writes capture files the way tcpdump -G rotates
// them (each grows for a while, then the next begins) while the agent
// watches the directory: every file is shipped once, none while growing,
// and a restarted agent ships nothing again.
func TestAgentWatchRotation(t *testing.T) {
	addr := servePlumb(t, t.TempDir())
	dir, spool := t.TempDir(), filepath.Join(t.TempDir(), "spool")
	metrics := testenv.FreeAddr(t)
	args := []string{"agent", "--server", addr, "--site", "rot", "--new-instance", "--spool", spool,
		"--block-size", "16KiB", "--watch", dir, "--pattern", "*.pcap", "--settle", "700ms", "--log-level", "warn"}
	agentProc := startPlumb(t, append(args, "--metrics", metrics)...)

	var want []packet
	start := time.Date(2025, 5, 5, 15, 0, 0, 0, time.UTC)
	for file := range 4 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("dns-%02d.pcap", file)))
		if err != nil {
			t.Fatal(err)
		}
		w, _ := pcap.NewWriter(f, layers.LinkTypeEthernet, 65535, false)
		for chunk := range 5 { // grows in bursts, slower than one poll
			for i := range 40 {
				data := bytes.Repeat([]byte{byte(file), byte(chunk), byte(i)}, 50)
				ts := start.Add(time.Duration(len(want)) * time.Millisecond)
				ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: len(data)}
				w.WritePacket(ci, data)
				want = append(want, packet{ci: ci, data: data})
			}
			w.Flush()
			time.Sleep(150 * time.Millisecond)
		}
		f.Close()
	}
	c := dialPlumb(t, addr)
	var got []packet
	testenv.Eventually(t, 30*time.Second, "the rotated files' packets", func() (string, bool) {
		// Blocks are shipped several at once and may commit out of
		// order: read them once none is missing below the highest.
		bs, err := c.Blocks(context.Background(), "pcap.sz")
		var n, top uint64
		for _, b := range bs {
			if b.Instance == "rot" {
				n, top = n+1, max(top, b.Seq)
			}
		}
		if err != nil || n != top {
			return fmt.Sprintf("%d blocks up to sequence %d (%v)", n, top, err), false
		}
		got, _ = fetchInstance(t, c, "pcap.sz", "rot")
		return fmt.Sprintf("%d of %d packets", len(got), len(want)), len(got) >= len(want)
	})
	samePackets(t, "rotated files", got, want)
	// The Prometheus endpoint agrees with the server.
	st, _ := c.QueueStats(context.Background(), "pcap.sz")
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		fmt.Sprintf(`plumb_agent_packets_total{queue="pcap.sz",site="rot"} %d`, len(want)),
		fmt.Sprintf(`plumb_agent_blocks_acked_total{queue="pcap.sz",site="rot"} %d`, st.Blocks),
		`plumb_agent_spool_bytes{queue="pcap.sz",site="rot"} 0`,
	} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, body)
		}
	}
	agentProc.cmd.Process.Signal(syscall.SIGTERM)
	if err := agentProc.cmd.Wait(); err != nil {
		t.Fatalf("agent exit on SIGTERM: %v\n%s", err, agentProc.log)
	}
	before, _ := c.QueueStats(context.Background(), "pcap.sz")

	// A restart takes nothing again.
	again := startPlumb(t, args...)
	time.Sleep(2 * time.Second)
	again.cmd.Process.Signal(syscall.SIGTERM)
	again.cmd.Wait()
	after, _ := c.QueueStats(context.Background(), "pcap.sz")
	if after.Blocks != before.Blocks {
		t.Fatalf("restarted agent shipped %d more blocks of files already shipped", after.Blocks-before.Blocks)
	}
}

// TestAgentStdinSIGKILL kills an agent reading stdin mid-block: the
// packets of the cut-short block cannot be read again, so the restarted
// agent reports them as lost, and the sequence numbers stay contiguous.
func TestAgentStdinSIGKILL(t *testing.T) {
	addr := servePlumb(t, t.TempDir())
	dir := t.TempDir()
	first := makeCapture(t, filepath.Join(dir, "first.pcap"), 3000, 8)
	second := makeCapture(t, filepath.Join(dir, "second.pcap"), 500, 9)
	spool := filepath.Join(dir, "spool")
	args := []string{"agent", "--server", addr, "--site", "pipe", "--new-instance", "--spool", spool, "--block-size", "128KiB", "-"}

	c := dialPlumb(t, addr)
	cmd := testenv.Command(t, 2*time.Minute, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "first.pcap"))
	// Feed the first capture slowly; kill once two blocks are stored,
	// while a third is being cut.
	go func() {
		for len(raw) > 0 {
			n := min(len(raw), 32<<10)
			if _, err := stdin.Write(raw[:n]); err != nil {
				return
			}
			raw = raw[n:]
			time.Sleep(20 * time.Millisecond)
		}
	}()
	waitBlocks(t, c, "pcap.sz", 2)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	again := testenv.Command(t, 2*time.Minute, os.Args[0], args...)
	again.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	again.Stdin, _ = os.Open(filepath.Join(dir, "second.pcap"))
	out, err := again.CombinedOutput()
	if err != nil {
		t.Fatalf("restarted agent: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "packets lost") {
		t.Fatalf("the restarted agent does not report the lost partial block:\n%s", out)
	}
	got, nblocks := fetchInstance(t, c, "pcap.sz", "pipe") // checks 1..N contiguous
	k := len(got) - len(second)
	if k <= 0 || k >= len(first) {
		t.Fatalf("%d packets on the server: want a prefix of the first capture (%d) and all of the second (%d)", len(got), len(first), len(second))
	}
	samePackets(t, "before the kill", got[:k], first[:k])
	samePackets(t, "after the restart", got[k:], second)
	t.Logf("%d blocks; %d of %d packets of the first feed arrived before the kill; its partial block was reported lost", nblocks, k, len(first))
}

// TestAgentFollowsGrowingFile: a capture still being written, packets
// appended in pieces (a record sometimes split across two writes), is
// shipped as it grows; an agent SIGKILLed midway and restarted ships
// every packet exactly once.
func TestAgentFollowsGrowingFile(t *testing.T) {
	addr := servePlumb(t, t.TempDir())
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.pcap")
	pkts := makeCapture(t, whole, 4000, 12)
	raw, _ := os.ReadFile(whole)
	growing := filepath.Join(dir, "live.pcap")
	f, err := os.Create(growing)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(raw[:24+100]) // the header and the start of a packet
	spool := filepath.Join(dir, "spool")
	args := []string{"agent", "--server", addr, "--site", "tail", "--new-instance", "--spool", spool,
		"--block-size", "256KiB", "--settle", "300ms", "--follow", growing}
	ag := startPlumb(t, args...)
	rng := rand.New(rand.NewPCG(8, 8))
	off := 24 + 100
	for part := 0; off < len(raw); part++ {
		n := min(len(raw)-off, 5000+rng.IntN(60000))
		f.Write(raw[off : off+n])
		off += n
		time.Sleep(20 * time.Millisecond)
		if part == 20 {
			ag.cmd.Process.Signal(os.Kill)
			ag.cmd.Wait()
			ag = startPlumb(t, args...) // the spool knows where it was
		}
	}
	c := dialPlumb(t, addr)
	testenv.Eventually(t, time.Minute, "the growing file's packets", func() (string, bool) {
		got, _ := fetchCount(t, c, "pcap.sz", "tail")
		return fmt.Sprintf("%d of %d packets", got, len(pkts)), got >= len(pkts)
	})
	got, blocks := fetchInstance(t, c, "pcap.sz", "tail")
	samePackets(t, "a followed growing file", got, pkts)
	if blocks < 3 {
		t.Errorf("%d blocks; the file should have been cut as it grew", blocks)
	}
	ag.cmd.Process.Signal(syscall.SIGTERM)
	ag.cmd.Wait()
}

// dialBlocks connects to the server (closed when the test ends) and lists
// a queue's blocks.
func dialBlocks(t *testing.T, addr, queue string) (*client.Client, []client.Block) {
	t.Helper()
	c := dialPlumb(t, addr)
	blocks, err := c.Blocks(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return c, blocks
}

// fetchCount counts the packets an instance's blocks hold so far.
func fetchCount(t *testing.T, c *client.Client, queue, instance string) (int, error) {
	bs, err := c.Blocks(context.Background(), queue)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range bs {
		if b.Instance != instance {
			continue
		}
		s, err := c.Get(context.Background(), b.Name)
		if err != nil || !s.Next() {
			return n, err
		}
		dec, _ := codecs.Snappy.NewReader(s)
		n += len(readPackets(t, dec))
		dec.Close()
		s.Close()
	}
	return n, nil
}

// TestAgentSpoolDamage: a block damaged in the spool after it was cut is
// refused by the server (its checksum was taken as it was written), not
// stored damaged; the import stops naming it and saying what to do, and
// importing the source again with a fresh spool completes the instance:
// blocks cut again are byte-identical, so those already stored are
// answered duplicate and every packet is on the server once.
func TestAgentSpoolDamage(t *testing.T) {
	addr := testenv.FreeAddr(t)
	input := filepath.Join(t.TempDir(), "input.pcap")
	want := makeCapture(t, input, 3000, 7)
	spool := filepath.Join(t.TempDir(), "spool")
	args := []string{"import", "--quiet", "--server", addr, "--site", "damage", "--new-instance",
		"--block-size", "256KiB", "--max-backoff", "300ms", "--log-level", "info"}
	// No server yet: every block is cut into the spool and waits there.
	imp := startPlumb(t, append(args, "--spool", spool, input)...)
	done := make(chan error, 1)
	go func() { done <- imp.cmd.Wait() }()
	waitLog(t, time.Minute, imp.log, "sources exhausted")
	ready, _ := filepath.Glob(filepath.Join(spool, "ready", "*-00000002.damage.pcap.sz"))
	if len(ready) != 1 {
		t.Fatalf("block 2 is not in the spool: %v", ready)
	}
	raw, err := os.ReadFile(ready[0])
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x40 // one bit, same size
	if err := os.WriteFile(ready[0], raw, 0o640); err != nil {
		t.Fatal(err)
	}

	data := t.TempDir()
	startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("import of a damaged spool block succeeded\n%s", imp.log)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("import did not stop at the damaged block\n%s", imp.log)
	}
	name := filepath.Base(ready[0])
	for _, w := range []string{"server refused block " + name, "no longer matches the checksum", "fresh --spool"} {
		if !strings.Contains(imp.log.String(), w) {
			t.Fatalf("import's error does not say %q:\n%s", w, imp.log)
		}
	}
	if _, err := os.Stat(ready[0]); err != nil {
		t.Fatalf("the refused block left the spool: %v", err)
	}
	c, blocks := dialBlocks(t, addr, "pcap.sz")
	for _, b := range blocks {
		if b.Name == name {
			t.Fatalf("the server stored the damaged block %s", name)
		}
	}

	// What the error says to do.
	again := startPlumb(t, append(args, "--spool", filepath.Join(t.TempDir(), "fresh"), input)...)
	if err := again.cmd.Wait(); err != nil {
		t.Fatalf("import again: %v\n%s", err, again.log)
	}
	if !strings.Contains(again.log.String(), "already on the server") {
		t.Fatalf("import again does not report blocks already stored:\n%s", again.log)
	}
	got, n := fetchInstance(t, c, "pcap.sz", "damage")
	samePackets(t, "after re-importing a damaged block", got, want)
	if n < 3 {
		t.Fatalf("only %d blocks: the capture should span several", n)
	}
}

// TestImportFilter: `plumb import --filter EXPR` ships exactly the
// packets `tcpdump -r FILE -w - EXPR` keeps, for every capture in
// testdata whose link type the compiler takes; a filter outside its
// syntax is refused before anything is read.
func TestImportFilter(t *testing.T) {
	tcpdump := testenv.Tool(t, "tcpdump")
	addr := servePlumb(t, t.TempDir())
	c := dialPlumb(t, addr)
	const expr = "udp port 53 or (tcp and src portrange 1-1023) or icmp6"
	files, _ := filepath.Glob("../../testdata/pcaps/*.pcap")
	checked := 0
	for i, f := range files {
		raw, _ := os.ReadFile(f)
		rd := linkTypeOf(t, raw)
		if _, err := filter.Compile(expr, rd.LinkType); err != nil {
			continue // PKTAP
		}
		ref := filepath.Join(t.TempDir(), "ref.pcap")
		if out, err := testenv.Command(t, time.Minute, tcpdump, "-r", f, "-w", ref, expr).CombinedOutput(); err != nil {
			t.Fatalf("tcpdump: %v\n%s", err, out)
		}
		want, _ := os.ReadFile(ref)
		wantPkts := readPackets(t, bytes.NewReader(want))
		site := fmt.Sprintf("f%02d", i)
		if out, errOut, code := plumbExec(t, "import", "--quiet", "--server", addr, "--site", site, "--new-instance",
			"--spool", filepath.Join(t.TempDir(), "spool"), "--block-size", "4KiB", "--filter", expr, f); code != 0 {
			t.Fatalf("%s: import: %s %s", f, out, errOut)
		}
		got, _ := fetchInstance(t, c, "pcap.sz", site)
		samePackets(t, filepath.Base(f)+" filtered", got, wantPkts)
		checked++
	}
	if checked < 40 {
		t.Fatalf("only %d captures checked", checked)
	}
	_, errOut, code := plumbExec(t, "import", "--server", addr, "--site", "x", "--new-instance", "--filter", "ether host 02:00:00:00:00:01", files[0])
	if code == 0 || !strings.Contains(errOut, `"ether"`) || !strings.Contains(errOut, "--filter") {
		t.Errorf("an unsupported filter: %d %s", code, errOut)
	}
}

// TestAgentOfflineStart: an agent whose spool is new starts while the
// server is down (here after the instance already shipped blocks, and
// then the spool was lost), captures, is SIGKILLed and started again,
// still offline; when the server comes up every packet is there once,
// the sequence numbers go on after the server's last block without a
// gap, and no identity is stored twice.
func TestAgentOfflineStart(t *testing.T) {
	addr := testenv.FreeAddr(t)
	data := t.TempDir()
	srv := startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
	waitListening(t, addr)
	dir := t.TempDir()
	before := makeCapture(t, filepath.Join(dir, "before.pcap"), 400, 21)
	if out, errOut, code := plumbExec(t, "import", "--quiet", "--server", addr, "--site", "off", "--new-instance",
		"--spool", filepath.Join(dir, "old-spool"), "--block-size", "16KiB", filepath.Join(dir, "before.pcap")); code != 0 {
		t.Fatalf("import: %s %s", out, errOut)
	}
	c := dialPlumb(t, addr)
	last, err := c.LastSeq(context.Background(), "pcap.sz", "off")
	if err != nil || !last.Found || last.Seq < 2 {
		t.Fatalf("the instance's last block: %+v %v", last, err)
	}
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.cmd.Wait()

	input := filepath.Join(dir, "input.pcap")
	want := makeCapture(t, input, 6000, 22)
	spool := filepath.Join(dir, "spool")
	args := []string{"agent", "--server", addr, "--site", "off", "--spool", spool, "--block-size", "64KiB", "--max-backoff", "300ms", input}
	a := startPlumb(t, args...)
	testenv.Eventually(t, 30*time.Second, "two blocks cut while the server is down", func() (string, bool) {
		ents, _ := os.ReadDir(filepath.Join(spool, "ready"))
		return fmt.Sprintf("%d in the spool; agent log:\n%s", len(ents), a.log), len(ents) >= 2
	})
	a.cmd.Process.Signal(syscall.SIGKILL)
	a.cmd.Wait()
	if !strings.Contains(a.log.String(), "provisional sequence numbers") {
		t.Errorf("the agent did not say it captures with provisional numbers:\n%s", a.log)
	}
	a = startPlumb(t, args...)
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("the restarted agent ended while the server was down: %v\n%s", err, a.log)
	case <-time.After(1500 * time.Millisecond):
	}
	startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent: %v\n%s", err, a.log)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent did not ship within 60s of the server's return\n%s", a.log)
	}
	c = dialPlumb(t, addr)
	got, n := fetchInstance(t, c, "pcap.sz", "off") // sequence numbers 1..n, each once
	samePackets(t, "after an offline start", got, append(before, want...))
	t.Logf("%d blocks before the outage, %d in all", last.Seq, n)
}

// TestAgentConfigFile: the flags and sources of an agent can come from a
// YAML file (the command line overrides it), and --log-format json logs
// one JSON object a line; an unknown key is refused, naming it.
func TestAgentConfigFile(t *testing.T) {
	addr := servePlumb(t, t.TempDir())
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`server: %s
site: cfg
new-instance: true
filter: udp port 53
block-size: 4KiB
log-format: json
log-level: debug
spool: %s
sources: [../../testdata/pcaps/dnscap__dns.pcap]
`, addr, filepath.Join(dir, "spool"))), 0o644)
	_, errOut, code := plumbExec(t, "agent", "--config", cfg, "--site", "cfg2")
	if code != 0 {
		t.Fatalf("agent --config: %d\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["msg"] == nil {
			t.Fatalf("a log line that is not JSON: %q", l)
		}
	}
	if !strings.Contains(errOut, `"instance":"cfg2"`) {
		t.Errorf("the command line's --site did not override the file's:\n%s", errOut)
	}
	c := dialPlumb(t, addr)
	got, _ := fetchInstance(t, c, "pcap.sz", "cfg2")
	raw, _ := os.ReadFile("../../testdata/pcaps/dnscap__dns.pcap")
	f, _ := filter.Compile("udp port 53", layers.LinkTypeEthernet)
	want := 0
	for _, p := range readPackets(t, bytes.NewReader(raw)) {
		if f.Match(p.data) {
			want++
		}
	}
	if len(got) != want || want == 0 {
		t.Errorf("%d packets shipped, %d match the file's filter", len(got), want)
	}
	os.WriteFile(cfg, []byte("sitee: x\n"), 0o644)
	if _, errOut, code := plumbExec(t, "agent", "--config", cfg); code == 0 || !strings.Contains(errOut, `unknown key "sitee"`) {
		t.Errorf("an unknown key: %d %s", code, errOut)
	}
}

// TestAgentRefusedExits is issue 62's refused agent: with a key the
// server does not accept, an agent on finite files logged "server not
// reachable yet" and never exited. Now the log says the server refuses
// it and what to check, and once its files are cut it exits 1, the
// blocks kept in the spool.
func TestAgentRefusedExits(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.yaml")
	if _, errOut, code := plumbExec(t, "user", "add", "lax-agent", "--group", "capture", "--users", users); code != 0 {
		t.Fatalf("user add: %s", errOut)
	}
	addr := servePlumb(t, filepath.Join(dir, "data"), "--users", users)
	bad := filepath.Join(dir, "bad.key")
	os.WriteFile(bad, []byte("pk.nosuchkey.0123456789abcdef\n"), 0o600)
	capture := filepath.Join(dir, "capture.pcap")
	makeCapture(t, capture, 50, 62)
	spool := filepath.Join(dir, "spool")
	cmd := testenv.Command(t, 2*time.Minute, os.Args[0], "agent", "--server", addr, "--token-file", bad, "--site", "lax",
		"--queue", "pcap.sz", "--spool", spool, "--new-instance", capture)
	cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
		t.Fatalf("agent with a refused key: %v (exit %d); want exit 1\n%s", err, code, out)
	}
	if !strings.Contains(string(out), "the server refuses this agent") || strings.Contains(string(out), "not reachable") {
		t.Errorf("the agent's log does not say it was refused:\n%s", out)
	}
	if left, _ := filepath.Glob(filepath.Join(spool, "*", "*.sz")); len(left) == 0 {
		if left, _ = filepath.Glob(filepath.Join(spool, "*.sz")); len(left) == 0 {
			t.Errorf("no block kept in the spool %s", spool)
		}
	}
}

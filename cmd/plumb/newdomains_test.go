package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// seededBlock is a minute of generated traffic of seed at at, as block
// seq of site: the same seed asks the same names at any time.
func seededBlock(t *testing.T, site string, seq, seed uint64, at time.Time) client.Source {
	t.Helper()
	var raw bytes.Buffer
	w, _ := pcap.NewWriter(&raw, layers.LinkTypeEthernet, 65535, false)
	if _, err := synth.Generate(context.Background(), w, synth.Config{Seed: seed, Start: at, Duration: time.Minute, Rate: 20}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	return pcapBlock(t, site, seq, at, raw.Bytes())
}

// pcapBlock is a capture as block seq of site at at, snappy-compressed
// as agents ship it.
func pcapBlock(t *testing.T, site string, seq uint64, at time.Time, raw []byte) client.Source {
	t.Helper()
	var z bytes.Buffer
	zw, _ := codecs.Snappy.NewWriter(&z)
	zw.Write(raw)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	data := z.Bytes()
	sum := sha256.Sum256(data)
	return client.Source{Name: block.Name{Time: at, Seq: seq, Instance: site, Queue: "pcap.sz"}.String(), Size: int64(len(data)),
		SHA256: hex.EncodeToString(sum[:]), Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
}

// TestNewDomainsSurviveSIGKILL: through a real server, builtin:newdomains
// reports each registered domain of a site once, at its first query:
// the server is SIGKILLed after two blocks and started again, and a
// third block asking the first block's names again reports none of
// them, as its memory was committed with the blocks before.
func TestNewDomainsSurviveSIGKILL(t *testing.T) {
	data := t.TempDir()
	addr := testenv.FreeAddr(t)
	srv := startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
	waitListening(t, addr)
	ctx := context.Background()
	c := dialPlumb(t, addr)
	job := `job: nod
queues: [pcap.sz]
stages:
  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: 1d}
  - {name: new, inputs: [dns.arrow], program: "builtin:newdomains?horizon=7d&capacity=10000", outputs: [nod.arrow], retention: 1d}
`
	if res, err := c.SubmitJob(ctx, "nod.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	if _, err := c.Put(ctx, seededBlock(t, "lax", 1, 1, at), seededBlock(t, "lax", 2, 2, at.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	waitBlocks(t, c, "nod.arrow", 2, srv.log)
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.cmd.Wait()

	srv = startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
	waitListening(t, addr)
	c = dialPlumb(t, addr)
	// Block 3 asks block 1's names again; block 4 new ones.
	if _, err := c.Put(ctx, seededBlock(t, "lax", 3, 1, at.Add(2*time.Minute)), seededBlock(t, "lax", 4, 4, at.Add(3*time.Minute))); err != nil {
		t.Fatal(err)
	}
	waitBlocks(t, c, "nod.arrow", 4, srv.log)

	recs, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"seq", "qr", "registered_domain"}})
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	seq, qr, dom := testenv.ColumnStrings(t, recs, "seq"), testenv.ColumnStrings(t, recs, "qr"), testenv.ColumnStrings(t, recs, "registered_domain")
	first := map[string]string{} // domain → the block of its first query
	for _, s := range []string{"1", "2", "3", "4"} {
		for i := range seq {
			if d := strings.ToLower(dom[i]); seq[i] == s && qr[i] == "false" && d != "" && first[d] == "" {
				first[d] = s
			}
		}
	}
	nod, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "nod.arrow", Columns: []string{"seq", "domain"}})
	if err != nil {
		t.Fatal(err)
	}
	defer nod.Release()
	nseq, ndom := testenv.ColumnStrings(t, nod, "seq"), testenv.ColumnStrings(t, nod, "domain")
	got := map[string]string{}
	perBlock := map[string]int{}
	for i := range ndom {
		if got[ndom[i]] != "" {
			t.Errorf("%s reported new twice: blocks %s and %s", ndom[i], got[ndom[i]], nseq[i])
		}
		got[ndom[i]] = nseq[i]
		perBlock[nseq[i]]++
	}
	if len(got) != len(first) {
		t.Errorf("%d domains reported new, the records have %d", len(got), len(first))
	}
	for d, s := range first {
		if got[d] != s {
			t.Errorf("%s: first asked in block %s, reported in block %q", d, s, got[d])
		}
	}
	if perBlock["1"] == 0 || perBlock["4"] == 0 || perBlock["3"] != 0 {
		t.Errorf("new domains per block %v: want some in 1 and 4, none in 3 (block 1's names again)", perBlock)
	}
}

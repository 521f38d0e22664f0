package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestRecomputeLostBlocks: the bytes of derived blocks disappear from the
// store. A reader asking for one whose inputs are kept waits while its
// stage makes it again and gets the same bytes; one whose inputs are gone
// gets "data unavailable: inputs expired"; fsck --repair recomputes what
// it can and marks the rest lost.
func TestRecomputeLostBlocks(t *testing.T) {
	data := t.TempDir()
	addr := servePlumb(t, data, "--tick", "100ms")
	c := dialPlumb(t, addr)
	ctx := context.Background()
	for seq := 1; seq <= 2; seq++ {
		src, _ := snappyBlock(t, seq)
		if _, err := c.Put(ctx, src); err != nil {
			t.Fatal(err)
		}
	}
	// pcap.gz is made from the kept source queue; pcap.info from pcap,
	// which is deleted once consumed.
	res, err := c.SubmitJob(ctx, "lineage.yaml", []byte(`
job: lineage
from: earliest
stages:
  - {name: gz, inputs: [pcap.sz], program: "builtin:transcode?to=gzip", outputs: [pcap.gz], retention: forever}
  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [raw]}
  - {name: copy, inputs: [raw], program: [cat], outputs: [raw.copy], retention: forever}
`))
	if err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	if out, errOut, code := plumbExec(t, "stats", "--wait", "--server", addr); code != 0 {
		t.Fatalf("stats --wait: %s %s", out, errOut)
	}
	read := func(name string) ([]byte, error) {
		s, err := c.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		if !s.Next() {
			return nil, s.Err()
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(s)
		return b.Bytes(), err
	}
	gz, copied := "20250505-151105-00000001.site1.pcap.gz", "20250505-151105-00000001.site1.raw.copy"
	wantGz, err := read(gz)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := read("20250505-151105-00000001.site1.raw"); err == nil {
		t.Fatal("raw was kept after every stage consumed it; this test needs it gone")
	}
	// The bytes vanish (a store preempted, a disk replaced).
	for _, q := range []string{"pcap.gz", "raw.copy"} {
		files, _ := filepath.Glob(filepath.Join(data, "blobs", "blobs", q, "site1", "*"))
		for _, f := range files {
			os.Remove(f)
		}
	}
	got, err := read(gz)
	if err != nil || !bytes.Equal(got, wantGz) {
		t.Fatalf("a lost block whose inputs are kept: %d bytes, %v; want the %d bytes it had", len(got), err, len(wantGz))
	}
	if _, err := read(copied); err == nil || !strings.Contains(err.Error(), "data unavailable: inputs expired") || !strings.Contains(err.Error(), "raw") {
		t.Fatalf("a lost block whose inputs are gone: %v", err)
	}
	// fsck: seq 2 of pcap.gz is recomputed, seq 1 and 2 of raw.copy are lost.
	out, errOut, code := plumbExec(t, "fsck", "--repair", "--server", addr)
	if code != 0 || !strings.Contains(out, "1 blocks recomputed, 2 blocks marked lost") {
		t.Fatalf("fsck --repair: %d\n%s%s", code, out, errOut)
	}
	if out, _, code := plumbExec(t, "fsck", "--server", addr); code != 0 || !strings.Contains(out, "0 missing") {
		t.Fatalf("fsck after repair: %d\n%s", code, out)
	}
	testenv.WaitFor(t, 10*time.Second, "recomputed seq 2 of pcap.gz to be readable", func() bool {
		got, err := read("20250505-151105-00000002.site1.pcap.gz")
		return err == nil && len(got) > 0
	})
}

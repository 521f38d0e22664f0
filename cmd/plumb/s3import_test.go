package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// capsBucket starts a MinIO with a bucket "caps", its credentials in
// the environment as an operator's would be.
func capsBucket(t *testing.T) (testenv.MinIO, *blob.S3) {
	t.Helper()
	m := testenv.StartMinIO(t)
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	st, err := blob.NewS3(context.Background(), blob.S3Config{Endpoint: m.Endpoint, Bucket: "caps", AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return m, st
}

// TestImportFromS3SIGKILL: 50 captures in a real MinIO bucket (and one
// outside the prefix) imported with `plumb import s3://BUCKET/PREFIX`,
// SIGKILLed at random moments and run again until it finishes: every
// packet of the 50, in name order, is on the server exactly once; run
// once more, it imports nothing.
func TestImportFromS3SIGKILL(t *testing.T) {
	m, st := capsBucket(t)
	ctx := context.Background()
	var want []packet
	put := func(key string, seed uint64) []packet {
		path := filepath.Join(t.TempDir(), "c.pcap")
		pkts := makeCapture(t, path, 600, seed)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data)), blob.Sum(sha256.Sum256(data))); err != nil {
			t.Fatal(err)
		}
		return pkts
	}
	for i := range 50 {
		want = append(want, put(fmt.Sprintf("day1/cap-%02d.pcap", i), uint64(100+i))...)
	}
	put("day2/not-this.pcap", 99)
	src := "s3://caps/day1/?endpoint=" + m.Endpoint

	addr := servePlumb(t, t.TempDir())
	spool := filepath.Join(t.TempDir(), "spool")
	c := dialPlumb(t, addr)
	stored := func() int64 {
		st, _ := c.QueueStats(context.Background(), "pcap.sz")
		return st.Blocks
	}
	rng := rand.New(rand.NewPCG(7, 7))
	imp := []string{"import", "--quiet", "--server", addr, "--site", "s3", "--new-instance", "--spool", spool, "--block-size", "64KiB", "--log-level", "warn", src}
	kills := 0
	for run := 0; ; run++ {
		if run > 60 {
			t.Fatal("import did not finish in 60 runs")
		}
		base, more := stored(), int64(1+rng.IntN(40))
		p := startPlumb(t, imp...)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		finished := false
	wait:
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run %d: import failed: %v\n%s", run, err, p.log)
				}
				finished = true
				break wait
			case <-time.After(5 * time.Millisecond):
				if stored() >= base+more {
					p.cmd.Process.Signal(syscall.SIGKILL)
					<-done
					kills++
					break wait
				}
			}
		}
		if finished {
			t.Logf("import finished on run %d after %d SIGKILLs", run+1, kills)
			break
		}
	}
	got, nblocks := fetchInstance(t, c, "pcap.sz", "s3")
	samePackets(t, "the bucket's captures after SIGKILLs", got, want)
	if kills < 3 {
		t.Fatalf("only %d kills over %d blocks; the test should kill often", kills, nblocks)
	}
	out, errOut, code := plumbExec(t, imp...)
	if code != 0 || !strings.Contains(out, "imported 0 packets in 0 blocks") {
		t.Fatalf("import run again: %s %s", out, errOut)
	}
	if again, _ := fetchInstance(t, c, "pcap.sz", "s3"); len(again) != len(want) {
		t.Errorf("the import run again left %d packets on the server, want %d", len(again), len(want))
	}
}

// TestImportFromS3Errors: what a user gets wrong about the bucket is
// told before anything is cut.
func TestImportFromS3Errors(t *testing.T) {
	m := testenv.StartMinIO(t)
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	addr := servePlumb(t, t.TempDir())
	for _, c := range []struct{ src, want string }{
		{"s3://nobucket/x/?endpoint=" + m.Endpoint, "bucket nobucket at " + m.Endpoint + " does not exist"},
		{"s3://caps/x/", "want s3://BUCKET?endpoint=HOST:PORT (or AWS_ENDPOINT_URL set)"},
	} {
		_, errOut, code := plumbExec(t, "import", "--quiet", "--server", addr, "--site", "s3", "--spool", t.TempDir(), c.src)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("import %s: exit %d, %s\nwant %q", c.src, code, errOut, c.want)
		}
	}
}

// TestAgentWatchesS3Prefix: `plumb agent --watch s3://BUCKET/PREFIX`
// cuts the objects under the prefix as they appear, in key order; an
// agent stopped and started again cuts none twice and goes on with the
// objects that came meanwhile.
func TestAgentWatchesS3Prefix(t *testing.T) {
	m, st := capsBucket(t)
	ctx := context.Background()
	var want []packet
	put := func(i int) {
		path := filepath.Join(t.TempDir(), "c.pcap")
		want = append(want, makeCapture(t, path, 300, uint64(200+i))...)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Put(ctx, fmt.Sprintf("in/cap-%02d.pcap", i), bytes.NewReader(data), int64(len(data)), blob.Sum(sha256.Sum256(data))); err != nil {
			t.Fatal(err)
		}
	}
	addr := servePlumb(t, t.TempDir())
	c := dialPlumb(t, addr)
	spool := filepath.Join(t.TempDir(), "spool")
	args := []string{"agent", "--server", addr, "--site", "s3w", "--spool", spool, "--block-size", "64KiB", "--settle", "300ms",
		"--watch", "s3://caps/in/?endpoint=" + m.Endpoint}
	shipped := func(n int) {
		t.Helper()
		testenv.Eventually(t, time.Minute, fmt.Sprintf("%d packets shipped", n), func() (string, bool) {
			if _, err := c.Blocks(ctx, "pcap.sz"); err != nil {
				return err.Error(), false // no block yet
			}
			got, _ := fetchInstance(t, c, "pcap.sz", "s3w")
			return fmt.Sprint(len(got)), len(got) >= n
		})
	}
	for i := range 3 {
		put(i)
	}
	a := startPlumb(t, append(args, "--new-instance")...)
	shipped(len(want))
	put(3)
	put(4)
	shipped(len(want))
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.cmd.Wait()
	put(5)
	a = startPlumb(t, args...)
	shipped(len(want))
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.cmd.Wait()
	got, _ := fetchInstance(t, c, "pcap.sz", "s3w")
	samePackets(t, "the watched prefix's objects", got, want)
}

// TestImportFromS3RowsEqualLocal: DNS captures imported from a bucket
// through builtin:dns give the rows `plumb dns` gives of the same files
// on disk: each message once, as a multiset of (source, port, id,
// direction, name).
func TestImportFromS3RowsEqualLocal(t *testing.T) {
	m, st := capsBucket(t)
	ctx := context.Background()
	key := func(src, sport, id, qr, qname string) string {
		return strings.Join([]string{src, sport, id, qr, qname}, " ")
	}
	want := map[string]int{}
	start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for i := range 10 {
		var raw bytes.Buffer
		w, _ := pcap.NewWriter(&raw, layers.LinkTypeEthernet, 65535, false)
		if _, err := synth.Generate(ctx, w, synth.Config{Seed: uint64(i + 1), Start: start.Add(time.Duration(i) * time.Minute), Duration: time.Minute, Rate: 20}); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		path := filepath.Join(t.TempDir(), "c.pcap")
		os.WriteFile(path, raw.Bytes(), 0o644)
		jsonl := filepath.Join(t.TempDir(), "c.jsonl")
		if _, errOut, code := plumbExec(t, "dns", "-o", jsonl, path); code != 0 {
			t.Fatal(errOut)
		}
		lines, _ := os.ReadFile(jsonl)
		for l := range strings.Lines(string(lines)) {
			var r struct {
				Src   string
				Sport json.Number
				ID    json.Number
				QR    bool
				Qname *string
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			q := ""
			if r.Qname != nil {
				q = *r.Qname
			}
			want[key(r.Src, r.Sport.String(), r.ID.String(), strconv.FormatBool(r.QR), q)]++
		}
		if err := st.Put(ctx, fmt.Sprintf("dns/cap-%02d.pcap", i), bytes.NewReader(raw.Bytes()), int64(raw.Len()), blob.Sum(sha256.Sum256(raw.Bytes()))); err != nil {
			t.Fatal(err)
		}
	}
	addr := servePlumb(t, t.TempDir())
	c := dialPlumb(t, addr)
	if res, err := c.SubmitJob(ctx, "dns.yaml", []byte("job: dns\nqueues: [pcap.sz]\nstages:\n  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: 1d}\n")); err != nil || res.State != "accepted" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	if out, errOut, code := plumbExec(t, "import", "--quiet", "--server", addr, "--site", "s3", "--new-instance", "--spool", t.TempDir(),
		"--block-size", "256KiB", "s3://caps/dns/?endpoint="+m.Endpoint); code != 0 {
		t.Fatalf("import: %s %s", out, errOut)
	}
	if out, errOut, code := plumbExec(t, "stats", "--wait", "--server", addr); code != 0 {
		t.Fatalf("stats --wait: %s %s", out, errOut)
	}
	tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"src", "sport", "id", "qr", "qname"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	src, sport, id, qr, qname := testenv.ColumnStrings(t, tbl, "src"), testenv.ColumnStrings(t, tbl, "sport"), testenv.ColumnStrings(t, tbl, "id"),
		testenv.ColumnStrings(t, tbl, "qr"), testenv.ColumnStrings(t, tbl, "qname")
	got := map[string]int{}
	for i := range src {
		got[key(src[i], sport[i], id[i], qr[i], qname[i])]++
	}
	if len(want) < 1000 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows from the bucket (%d distinct) differ from plumb dns of the files (%d distinct)", len(got), len(want))
	}
}

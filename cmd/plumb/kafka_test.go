package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestKafkaSurvivesSIGKILL: through a real server and a real Kafka
// broker, builtin:kafka publishes the DNS records of the real captures
// of testdata while the server is SIGKILLed five times as it publishes; then every
// block is run again (the Kafka stage retracted and submitted anew from
// the queue's start). read_committed consumers (franz-go, and Debian's
// kcat as an outside reader) read exactly the records' rows: per block
// as many messages as rows, none twice, none missing.
func TestKafkaSurvivesSIGKILL(t *testing.T) {
	k := testenv.StartKafka(t)
	kc, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if res, err := kadm.NewClient(kc).CreateTopic(context.Background(), 3, 1, nil, "dns-records"); err != nil || res.Err != nil {
		t.Fatalf("create the topic: %v %v", err, res.Err)
	}
	data := t.TempDir()
	addr := testenv.FreeAddr(t)
	serve := func() *plumbProc {
		p := startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn", "--kafka-brokers", k.Brokers)
		waitListening(t, addr)
		return p
	}
	srv := serve()
	ctx := context.Background()
	c := dialPlumb(t, addr)
	job := `job: out
queues: [pcap.sz]
stages:
  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: 1d}
  - {name: kafka, inputs: [dns.arrow], program: "builtin:kafka?topic=dns-records&key=qname"}
`
	if res, err := c.SubmitJob(ctx, "out.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	// The real captures of testdata, in turn, as the site's blocks.
	files, _ := filepath.Glob("../../testdata/pcaps/*.pcap")
	if len(files) < 20 {
		t.Fatalf("%d captures in testdata/pcaps", len(files))
	}
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	seq := uint64(0)
	published := func() int64 {
		st, _ := c.Stats(ctx)
		for _, s := range st {
			if s.Stage == "out/kafka" {
				return s.Runs
			}
		}
		return 0
	}
	for kill := 1; kill <= 5; kill++ {
		var srcs []client.Source
		for range 6 {
			raw, err := os.ReadFile(files[seq%uint64(len(files))])
			if err != nil {
				t.Fatal(err)
			}
			seq++
			srcs = append(srcs, pcapBlock(t, "lax", seq, at.Add(time.Duration(seq)*time.Minute), raw))
		}
		if _, err := c.Put(ctx, srcs...); err != nil {
			t.Fatal(err)
		}
		// Killed as soon as it has published a block of these: the
		// next are being published.
		testenv.Eventually(t, time.Minute, "a block published", func() (string, bool) { return srv.log.String(), published() > 0 })
		srv.cmd.Process.Signal(syscall.SIGKILL)
		srv.cmd.Wait()
		srv = serve()
		c = dialPlumb(t, addr)
	}
	if out, errOut, code := plumbExec(t, "stats", "--wait", "--server", addr); code != 0 {
		t.Fatalf("stats --wait: %s %s\n%s", out, errOut, srv.log)
	}
	// The blocks recomputed: the job retracted and its Kafka stage
	// submitted again from the queue's start runs every block again,
	// and publishes nothing more.
	if err := c.RetractJob(ctx, "out"); err != nil {
		t.Fatal(err)
	}
	replay := "job: replay\nfrom: earliest\nstages:\n  - {name: kafka, inputs: [dns.arrow], program: \"builtin:kafka?topic=dns-records&key=qname\"}\n"
	if res, err := c.SubmitJob(ctx, "replay.yaml", []byte(replay)); err != nil || res.State != "accepted" {
		t.Fatalf("the replay: %+v %v", res, err)
	}
	testenv.Eventually(t, time.Minute, "every block run again", func() (string, bool) {
		st, _ := c.Stats(ctx)
		for _, s := range st {
			if s.Stage == "replay/kafka" {
				return fmt.Sprintf("%+v", s), s.Runs == int64(seq)
			}
		}
		return fmt.Sprintf("%+v", st), false
	})
	recs, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"seq"}})
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	want := map[string]int{}
	for _, s := range testenv.ColumnStrings(t, recs, "seq") {
		want[s]++
	}
	if len(want) < 20 { // a few captures hold no DNS message
		t.Fatalf("records of %d blocks, %d were put", len(want), seq)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers), kgo.ConsumeTopics("dns-records"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]int{}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			var row struct{ Seq json.Number }
			if err := json.Unmarshal(r.Value, &row); err != nil {
				t.Errorf("message %q: %v", r.Value, err)
			}
			got[row.Seq.String()]++
		})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows per block read_committed from Kafka:\n%v\nthe records':\n%v", got, want)
	}
	// An outside reader: Debian's kcat (librdkafka), read_committed.
	kcat := testenv.Tool(t, "kcat")
	out, err := testenv.Command(t, time.Minute, kcat, "-C", "-b", k.Brokers, "-t", "dns-records", "-X", "isolation.level=read_committed",
		"-o", "beginning", "-e", "-q", "-f", "%s\n").Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	byKcat := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct{ Seq json.Number }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("kcat's line %q: %v", line, err)
		}
		byKcat[row.Seq.String()]++
	}
	if fmt.Sprint(byKcat) != fmt.Sprint(want) {
		t.Errorf("rows per block kcat read:\n%v\nthe records':\n%v", byKcat, want)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestKafkaSurvivesSIGKILL: through a real server and a real Kafka
// broker, builtin:kafka publishes the DNS records of generated traffic
// while the server is SIGKILLed five times as it publishes; once the
// backlog is done, a read_committed consumer reads exactly the records'
// rows: per block as many messages as rows, none twice, none missing.
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
			seq++
			srcs = append(srcs, seededBlock(t, "lax", seq, seq, at.Add(time.Duration(seq)*time.Minute)))
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
	recs, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"seq"}})
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	want := map[string]int{}
	for _, s := range testenv.ColumnStrings(t, recs, "seq") {
		want[s]++
	}
	if len(want) != int(seq) {
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
}

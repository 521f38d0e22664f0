package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/kafkapub"
	"github.com/plumb-dev/plumb/stage"
)

// consumeCommitted reads every message of topic a read_committed
// consumer sees.
func consumeCommitted(t *testing.T, brokers, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// TestKafkaPublishesRecordsOnce: builtin:kafka over the DNS records of
// every real capture of testdata, through a real Kafka broker: each row
// is one JSON message keyed by its qname, and running every block again
// (a retry after a crash, a recomputation) publishes nothing more; as
// Arrow, each batch is one message that reads back as the block's rows.
func TestKafkaPublishesRecordsOnce(t *testing.T) {
	k := testenv.StartKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, topic := range []string{"dns-json", "dns-arrow"} {
		if res, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, nil, topic); err != nil || res.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, res.Err)
		}
	}
	reg := stage.NewRegistry()
	RegisterKafka(reg, kafkapub.Config{Brokers: []string{k.Brokers}})
	blocks := realRecords(t)
	var want []string // qname of each row
	rows := 0
	for _, data := range blocks {
		f, err := ipc.NewFileReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < f.NumRecords(); i++ {
			rec, _ := f.RecordBatchAt(i)
			rows += int(rec.NumRows())
			col := rec.Column(rec.Schema().FieldIndices("qname")[0])
			for r := 0; r < col.Len(); r++ {
				q := "" // a row without a qname is a message without a key
				if col.IsValid(r) {
					q = col.ValueStr(r)
				}
				want = append(want, q)
			}
		}
		f.Close()
	}
	publish := func(b stage.Builtin) {
		for i, data := range blocks {
			name := block.Name{Instance: "lax", Seq: uint64(i + 1), Queue: "dns.arrow", Time: time.Date(2026, 12, 7, 10, i, 0, 0, time.UTC)}
			if err := b.Run(context.Background(), stage.Input{Block: name}, bytes.NewReader(data), nil); err != nil {
				t.Fatalf("block %s: %v", name, err)
			}
		}
	}
	js, err := reg.New("kafka", url.Values{"topic": {"dns-json"}, "key": {"qname"}})
	if err != nil {
		t.Fatal(err)
	}
	publish(js)
	publish(js) // every block again: nothing more
	got := consumeCommitted(t, k.Brokers, "dns-json")
	if len(got) != rows {
		t.Fatalf("read_committed read %d messages; the records hold %d rows", len(got), rows)
	}
	keys := map[string]int{}
	for _, q := range want {
		keys[q]++
	}
	for _, r := range got {
		var row map[string]any
		if err := json.Unmarshal(r.Value, &row); err != nil {
			t.Fatalf("message %q: %v", r.Value, err)
		}
		if row["qname"] != nil && fmt.Sprint(row["qname"]) != string(r.Key) {
			t.Fatalf("message keyed %q holds qname %v", r.Key, row["qname"])
		}
		keys[string(r.Key)]--
	}
	for q, n := range keys {
		if n != 0 {
			t.Errorf("qname %q: %d rows more than messages", q, n)
		}
	}

	ar, err := reg.New("kafka", url.Values{"topic": {"dns-arrow"}, "format": {"arrow"}})
	if err != nil {
		t.Fatal(err)
	}
	publish(ar)
	publish(ar)
	n := 0
	for _, r := range consumeCommitted(t, k.Brokers, "dns-arrow") {
		rd, err := ipc.NewReader(bytes.NewReader(r.Value))
		if err != nil {
			t.Fatal(err)
		}
		for rd.Next() {
			n += int(rd.RecordBatch().NumRows())
		}
		rd.Release()
	}
	if n != rows {
		t.Errorf("the Arrow messages hold %d rows; the records %d", n, rows)
	}
}

// TestKafkaRefuses: what a job gets wrong is told at submission, and a
// server without brokers says which flag to set.
func TestKafkaRefuses(t *testing.T) {
	reg := stage.NewRegistry()
	RegisterKafka(reg, kafkapub.Config{Brokers: []string{"127.0.0.1:9"}})
	for args, want := range map[string]string{
		"":                               `topic="": want a Kafka topic name`,
		"topic=a/b":                      `topic="a/b": want a Kafka topic name`,
		"topic=t&format=csv":             `format="csv": want json`,
		"topic=t&format=arrow&key=qname": "with format=arrow a message is a batch",
		"topic=t&brokers=x:1":            `unknown argument "brokers"`,
	} {
		v, _ := url.ParseQuery(args)
		if _, err := reg.New("kafka", v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("?%s: %v; want %q", args, err, want)
		}
	}
	none := stage.NewRegistry()
	RegisterKafka(none, kafkapub.Config{})
	if _, err := none.New("kafka", url.Values{"topic": {"t"}}); err == nil || !strings.Contains(err.Error(), "--kafka-brokers") {
		t.Errorf("no brokers: %v", err)
	}
	b, _ := reg.New("kafka", url.Values{"topic": {"t"}})
	if err := b.Run(context.Background(), stage.Input{}, strings.NewReader(""), nil); err == nil || errors.Is(err, stage.ErrMalformed) {
		t.Errorf("a run outside a pipeline: %v", err)
	}
}

package kafkapub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/kafkapub"
)

func records(topic, prefix string, n int) []*kgo.Record {
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%d", prefix, i)})
	}
	return rs
}

// rows sends records as a block's run would.
func rows(rs []*kgo.Record) func(func(*kgo.Record)) error {
	return func(send func(*kgo.Record)) error {
		for _, r := range rs {
			send(r)
		}
		return nil
	}
}

// readCommitted counts what a read_committed consumer sees of topic, by
// value, reading until the end offsets it found at its start.
func readCommitted(t *testing.T, brokers, topic string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	return seen
}

// TestPublishOnce: through a real Kafka broker, a block's rows published
// twice under its transactional ID are read once by a read_committed
// consumer; an attempt that crashed with its transaction open is fenced
// by the next, whose rows are read once and the crashed one's never.
func TestPublishOnce(t *testing.T) {
	k := testenv.StartKafka(t)
	ctx := context.Background()
	cfg := kafkapub.Config{Brokers: []string{k.Brokers}, TransactionTimeout: 20 * time.Second}
	const topic = "rows"
	createTopic(t, k.Brokers, topic, 3)
	a := kafkapub.TxnID(topic, "20250505-151105-00000001.lax.dns.arrow")
	if ok, err := kafkapub.Publish(ctx, cfg, a, rows(records(topic, "a", 100))); !ok || err != nil {
		t.Fatalf("first publish: %v %v", ok, err)
	}
	if ok, err := kafkapub.Publish(ctx, cfg, a, rows(records(topic, "a", 100))); ok || err != nil {
		t.Fatalf("the same block again: published %v, %v; want nothing published", ok, err)
	}
	// An attempt that dies with its transaction open.
	b := kafkapub.TxnID(topic, "20250505-151105-00000002.lax.dns.arrow")
	zombie, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers), kgo.TransactionalID(b), kgo.TransactionTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.ProduceSync(ctx, records(topic, "zombie", 50)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if ok, err := kafkapub.Publish(ctx, cfg, b, rows(records(topic, "b", 70))); !ok || err != nil {
		t.Fatalf("the retry: %v %v", ok, err)
	}
	if err := zombie.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Error("the fenced attempt committed")
	}
	// A run that fails half-way: nothing of it is read.
	c := kafkapub.TxnID(topic, "20250505-151105-00000003.lax.dns.arrow")
	_, err = kafkapub.Publish(ctx, cfg, c, func(send func(*kgo.Record)) error {
		for _, r := range records(topic, "failed", 10) {
			send(r)
		}
		return errors.New("a malformed batch")
	})
	if err == nil || !strings.Contains(err.Error(), "a malformed batch") {
		t.Errorf("a failing run: %v", err)
	}
	if _, err := kafkapub.Publish(ctx, cfg, kafkapub.TxnID("nosuch", "x"), rows(records("nosuch", "x", 1))); err == nil ||
		!strings.Contains(err.Error(), `topic "nosuch" is not on the brokers`) {
		t.Errorf("a topic not created: %v", err)
	}
	seen := readCommitted(t, k.Brokers, topic)
	total := 0
	for v, n := range seen {
		if n != 1 {
			t.Errorf("%s read %d times", v, n)
		}
		total += n
	}
	if total != 170 || seen["zombie-0"] != 0 || seen["failed-0"] != 0 || seen["a-99"] != 1 || seen["b-69"] != 1 {
		t.Errorf("read_committed saw %d rows (zombie-0 %d); want the 100 of block 1 and the 70 of block 2's retry", total, seen["zombie-0"])
	}
}

// createTopic makes a topic of n partitions, as an operator would.
func createTopic(t *testing.T, brokers, topic string, n int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreateTopic(context.Background(), n, 1, nil, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

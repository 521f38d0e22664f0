// Package kafkapub publishes a block's rows to Kafka exactly once.
//
// Each block is one Kafka transaction whose transactional ID names the
// block (and the topic), so a later attempt of the same block fences an
// earlier one still running and aborts its open transaction. Before it
// produces, an attempt asks the transaction coordinator how the ID's
// last transaction ended (DescribeTransactions, KIP-664): committed, the
// block's rows are in Kafka already and nothing is produced again.
// Plumb's commit of the run comes after Kafka's: a crash between the two
// runs the block again, which finds the commit and publishes nothing.
// So a reader with isolation.level=read_committed sees each row once,
// across retries, crashes and recomputation, within these limits:
//
//   - the broker forgets a transactional ID transactional.id.expiration.ms
//     (7 days by default) after its last transaction: a block recomputed
//     later than that is published again;
//   - an attempt the engine gave up on (a worker cut off from the server
//     past its lease) that begins and commits its whole transaction in
//     the moment between a newer attempt's check and its fence publishes
//     the block twice.
package kafkapub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Config is how the server reaches Kafka: its brokers, TLS and SASL,
// from the server's flags, never from a job.
type Config struct {
	Brokers []string
	TLS     *tls.Config // nil: plaintext
	// SASL mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) with its
	// user and password; none when empty.
	Mechanism, User, Password string
	// TransactionTimeout bounds a block's transaction; the broker aborts
	// one left open longer (a crashed attempt's). 60 s when zero.
	TransactionTimeout time.Duration
}

// Check says whether c can be used, naming the flag to fix.
func (c Config) Check() error {
	if len(c.Brokers) == 0 {
		return errors.New("no Kafka brokers: start the server with --kafka-brokers HOST:PORT[,HOST:PORT…]")
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("--kafka-brokers %q: want HOST:PORT", b)
		}
	}
	switch strings.ToUpper(c.Mechanism) {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("--kafka-sasl %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.Mechanism)
	}
	return nil
}

func (c Config) opts(txnID string) []kgo.Opt {
	timeout := c.TransactionTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(timeout),
		kgo.ProducerBatchMaxBytes(1 << 20),
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS))
	}
	switch strings.ToUpper(c.Mechanism) {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: c.User, Pass: c.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.User, Pass: c.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.User, Pass: c.Password}.AsSha512Mechanism()))
	}
	return opts
}

// TxnID is the transactional ID of a block's rows in a topic.
func TxnID(topic, block string) string { return "plumb." + topic + "." + block }

// Publish produces what rows sends in one transaction of txnID, unless
// that ID's last transaction committed: then rows is not called and
// Publish reports false. rows sends records as it makes them (sending
// waits while the client's buffer is full, so a block's rows are never
// all held at once); an error from it, or from Kafka, aborts the
// transaction and leaves nothing visible to read_committed readers.
func Publish(ctx context.Context, c Config, txnID string, rows func(send func(*kgo.Record)) error) (published bool, err error) {
	if err := c.Check(); err != nil {
		return false, err
	}
	cl, err := kgo.NewClient(c.opts(txnID)...)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	if done, err := committed(ctx, kadm.NewClient(cl), txnID); err != nil || done {
		return false, err
	}
	if err := cl.BeginTransaction(); err != nil {
		return false, err
	}
	var (
		mu    sync.Mutex
		first error // the first record Kafka refused
		topic string
	)
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	rowsErr := rows(func(r *kgo.Record) {
		topic = r.Topic
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
			}
		})
	})
	flushErr := cl.Flush(ctx)
	mu.Lock()
	first = cmpErr(cmpErr(rowsErr, first), flushErr)
	mu.Unlock()
	if err := failed(); err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			err = fmt.Errorf("topic %q is not on the brokers %s: create it before the job runs (Plumb does not create topics): %w", topic, strings.Join(c.Brokers, ","), err)
		}
		// A fresh context: the run's may be what ended.
		abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return false, errors.Join(err, cl.EndTransaction(abortCtx, kgo.TryAbort))
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return false, fmt.Errorf("commit the Kafka transaction %s: %w", txnID, err)
	}
	return true, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// committed reports whether txnID's last transaction committed, waiting
// out one that is being committed or aborted.
func committed(ctx context.Context, adm *kadm.Client, txnID string) (bool, error) {
	wait := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
			return nil
		}
	}
	for {
		ds, err := adm.DescribeTransactions(ctx, txnID)
		d, ok := ds[txnID]
		if err == nil && ok {
			err = d.Err
		}
		switch {
		case isUnknownID(err):
			return false, nil // never used, or forgotten
		case kerr.IsRetriable(err) || errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.NotCoordinator):
			// The coordinator is moving or starting (a new cluster makes
			// its transaction log on first use).
			if err := wait(); err != nil {
				return false, err
			}
			continue
		case err != nil:
			return false, fmt.Errorf("ask Kafka how transaction %s ended: %w", txnID, err)
		case !ok:
			return false, nil
		}
		switch d.State {
		case "CompleteCommit":
			return true, nil
		case "PrepareCommit", "PrepareAbort", "PrepareEpochFence":
			if err := wait(); err != nil {
				return false, err
			}
		default:
			// Empty, Ongoing (an earlier attempt's, which this one's
			// fence aborts), CompleteAbort, Dead.
			return false, nil
		}
	}
}

func isUnknownID(err error) bool { return errors.Is(err, kerr.TransactionalIDNotFound) }

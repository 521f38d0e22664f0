package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/plumb-dev/plumb/internal/arrowjson"
	"github.com/plumb-dev/plumb/kafkapub"
	"github.com/plumb-dev/plumb/stage"
)

// RegisterKafka adds builtin:kafka, publishing to the Kafka cluster the
// server's flags name (cfg): a job names the topic, never the brokers or
// their credentials.
func RegisterKafka(reg *stage.Registry, cfg kafkapub.Config) {
	reg.Add(stage.Factory{
		Name: "kafka",
		Doc: "Publishes each block's Arrow rows (records, pairs, metrics, any Arrow queue) to the Kafka ?topic= of the " +
			"brokers the server's --kafka-brokers names, exactly once: one message per row as a JSON object (default), or " +
			"one Arrow IPC stream per batch (?format=arrow), keyed by a column's value (?key=qname) or not. A block is one " +
			"Kafka transaction named by the topic and the block; an attempt finds a committed one and publishes nothing, and " +
			"fences an earlier attempt still running, so a read_committed consumer reads each row once across retries, " +
			"crashes and recomputation (see docs/kafka.md for the limits). The topic must exist. Writes no output.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args, "topic", "format", "key"); err != nil {
				return nil, err
			}
			k := &Kafka{Config: cfg, Topic: args.Get("topic"), Format: args.Get("format"), Key: args.Get("key")}
			if !kafkaTopic.MatchString(k.Topic) || k.Topic == "." || k.Topic == ".." {
				return nil, fmt.Errorf("topic=%q: want a Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -)", k.Topic)
			}
			switch k.Format {
			case "":
				k.Format = "json"
			case "json", "arrow":
			default:
				return nil, fmt.Errorf("format=%q: want json (a message per row) or arrow (a message per batch)", k.Format)
			}
			if k.Key != "" && k.Format == "arrow" {
				return nil, errors.New("key= keys a message per row; with format=arrow a message is a batch")
			}
			if err := cfg.Check(); err != nil {
				return nil, fmt.Errorf("builtin:kafka: %w", err)
			}
			return k, nil
		},
	})
}

var kafkaTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// Kafka publishes a block's rows to a topic, exactly once (kafkapub).
type Kafka struct {
	Config kafkapub.Config
	Topic  string
	Format string // json or arrow
	Key    string // the column keying each row's message; none when empty
}

// Describe implements stage.Describer.
func (k *Kafka) Describe() string {
	return fmt.Sprintf("to topic %s as %s, one transaction per block", k.Topic, k.Format)
}

// Run implements stage.Builtin.
func (k *Kafka) Run(ctx context.Context, sin stage.Input, in io.Reader, _ io.Writer) error {
	if sin.Block.Queue == "" {
		return errors.New("builtin:kafka publishes a pipeline's blocks: a run outside one has no block to name its transaction")
	}
	_, isWindow, in, err := readWindow(in)
	if err != nil {
		return err
	}
	if isWindow {
		return errors.New("builtin:kafka publishes blocks; as a window stage it has no one block to name its transaction: make it a block stage")
	}
	data, err := io.ReadAll(io.LimitReader(in, maxRewriteArrow+1))
	if err != nil {
		return err
	}
	_, err = kafkapub.Publish(ctx, k.Config, kafkapub.TxnID(k.Topic, sin.Block.String()), func(send func(*kgo.Record)) error {
		return eachBatch(ctx, bytes.NewReader(data), func(sc *arrow.Schema) error {
			if k.Key != "" && len(sc.FieldIndices(k.Key)) == 0 {
				return fmt.Errorf("%w: key=%s: the block has no such column", stage.ErrMalformed, k.Key)
			}
			return nil
		}, func(_ int, rec arrow.RecordBatch) error {
			if k.Format == "arrow" {
				var b bytes.Buffer
				w := ipc.NewWriter(&b, ipc.WithSchema(rec.Schema()))
				if err := w.Write(rec); err != nil {
					return err
				}
				if err := w.Close(); err != nil {
					return err
				}
				send(&kgo.Record{Topic: k.Topic, Value: b.Bytes()})
				return nil
			}
			var key arrow.Array
			if k.Key != "" {
				key = rec.Column(rec.Schema().FieldIndices(k.Key)[0])
			}
			rows := arrowjson.New(rec)
			// One buffer for the batch's messages: a row's value is a
			// slice of it, so a batch costs a few allocations, not one a
			// row (when it grows, the values before still point into the
			// old array, which they keep).
			buf := make([]byte, 0, 256*int(rec.NumRows()))
			for i := range int(rec.NumRows()) {
				start := len(buf)
				buf = rows.Append(buf, i)
				r := &kgo.Record{Topic: k.Topic, Value: buf[start:len(buf):len(buf)]}
				if key != nil && key.IsValid(i) {
					r.Key = []byte(key.ValueStr(i))
				}
				send(r)
			}
			return nil
		})
	})
	return err
}

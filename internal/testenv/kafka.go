package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaVersion is the Apache Kafka broker the tests run (testdata/kafka).
const KafkaVersion = "4.1.1"

// Kafka is a real Apache Kafka broker started for one test.
type Kafka struct {
	Brokers string // 127.0.0.1:PORT
}

// kafkaLibs is where .ci/run puts the broker's jars.
func kafkaLibs() string {
	if d := os.Getenv("PLUMB_KAFKA_LIBS"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "plumb", "kafka-"+KafkaVersion, "libs")
}

// StartKafka starts Apache Kafka's own broker in KRaft mode (one
// combined broker and controller) on free loopback ports with a temp
// log directory, under the Java installed, waits until it answers, and
// stops it when the test ends. Transactions need no more than one
// replica here.
func StartKafka(t testing.TB) Kafka {
	t.Helper()
	java := Tool(t, "java")
	libs := kafkaLibs()
	if jars, _ := filepath.Glob(filepath.Join(libs, "kafka_2.13-*.jar")); len(jars) == 0 {
		Missing(t, "the Kafka broker's jars are not in "+libs+" (.ci/run copies them from Maven Central)")
	}
	k, stop, err := LaunchKafka(java, t.TempDir(), FreeAddr(t), FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return k
}

// LaunchKafka starts the broker as StartKafka does, outside a test (the
// benches): its log directory in dir, listening on addr with its
// controller on ctrl. stop kills it.
func LaunchKafka(java, dir, addr, ctrl string) (k Kafka, stop func(), err error) {
	libs := kafkaLibs()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return k, nil, err
	}
	props := filepath.Join(dir, "server.properties")
	conf := strings.Join([]string{
		"process.roles=broker,controller",
		"node.id=1",
		"controller.quorum.voters=1@" + ctrl,
		"listeners=PLAINTEXT://" + addr + ",CONTROLLER://" + ctrl,
		"advertised.listeners=PLAINTEXT://" + addr,
		"controller.listener.names=CONTROLLER",
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs=" + filepath.Join(dir, "data"),
		"num.partitions=1",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=1",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"transaction.state.log.num.partitions=1",
		"group.initial.rebalance.delay.ms=0",
	}, "\n") + "\n"
	if err := os.WriteFile(props, []byte(conf), 0o600); err != nil {
		return k, nil, err
	}
	cp := filepath.Join(libs, "*")
	jvm := []string{"-Xms128m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"}
	format := exec.Command(java, append(jvm, "-cp", cp, "kafka.tools.StorageTool", "format", "-t", "cGx1bWJwbHVtYnBsdW1icA", "-c", props)...)
	if out, err := format.CombinedOutput(); err != nil {
		return k, nil, fmt.Errorf("format the Kafka broker's storage: %v\n%s", err, out)
	}
	out, err := os.Create(filepath.Join(dir, "broker.log"))
	if err != nil {
		return k, nil, err
	}
	cmd := exec.Command(java, append(jvm, "-cp", cp, "kafka.Kafka", props)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return k, nil, fmt.Errorf("start the Kafka broker: %v", err)
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		out.Close()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		stop()
		return k, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		bs, err := adm.ListBrokers(ctx)
		if err == nil && len(bs) > 0 {
			return Kafka{Brokers: addr}, stop, nil
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(out.Name())
			stop()
			return k, nil, fmt.Errorf("the Kafka broker on %s did not answer in 90s (%v):\n%s", addr, err, log)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// String names the broker for messages.
func (k Kafka) String() string { return fmt.Sprintf("kafka %s", k.Brokers) }

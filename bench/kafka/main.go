// Command kafka measures DNS rows delivered to Kafka: Plumb (a capture
// imported, builtin:dns, then builtin:kafka publishing one JSON message
// per row in one transaction per block) beside go-dnscollector (the Go
// DNS collector most operators run, built from the module proxy: its
// file-ingestor reading the same capture, its Kafka producer logger
// writing JSON), both into one real Apache Kafka broker. For each it
// prints rows per second (wall clock, capture in to every row in Kafka),
// the CPU seconds per million rows of its processes, and how many rows
// each delivered: Plumb's must equal its records' rows.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
)

type result struct {
	rows      int64   // delivered
	records   int64   // the rows there were to deliver (Plumb's records)
	rate, cpu float64 // rows/s, CPU-s per million rows
}

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	size := flag.String("size", "64MiB", "size of the generated capture")
	rounds := flag.Int("rounds", 3, "runs of each")
	cache := flag.String("cache", "bin", "directory go-dnscollector is built into, once")
	flag.Parse()
	java, err := exec.LookPath("java")
	if err != nil {
		log.Fatal("java: ", err)
	}
	dir, err := os.MkdirTemp("", "plumb-bench-kafka-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	capture := filepath.Join(dir, "capture.pcap")
	if out, err := exec.Command(*plumb, "synth", "--out", capture, "--size", *size, "--seed", "1").CombinedOutput(); err != nil {
		log.Fatalf("synth: %v\n%s", err, out)
	}
	addr, _ := benchkit.FreeAddr()
	ctrl, _ := benchkit.FreeAddr()
	k, stop, err := testenv.LaunchKafka(java, filepath.Join(dir, "kafka"), addr, ctrl)
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	collector, err := benchkit.BuildCollector(*cache)
	if err != nil {
		log.Printf("%v; no go-dnscollector baseline", err)
	}
	model := cpuModel()
	var plumbRuns, collectorRuns []result
	for r := range *rounds {
		load, _ := os.ReadFile("/proc/loadavg")
		p := runPlumb(*plumb, k.Brokers, capture, fmt.Sprintf("plumb-%d", r), filepath.Join(dir, fmt.Sprint("p", r)))
		plumbRuns = append(plumbRuns, p)
		fmt.Printf("round %d  load %s  %s\n", r+1, strings.TrimSpace(string(load[:14])), model)
		fmt.Printf("  plumb builtin:kafka:        %8.0f rows/s  %6.2f CPU-s per million rows  delivered %d of %d records' rows\n", p.rate, p.cpu, p.rows, p.records)
		if collector != "" {
			c := runCollector(collector, k.Brokers, capture, fmt.Sprintf("collector-%d", r), filepath.Join(dir, fmt.Sprint("c", r)))
			collectorRuns = append(collectorRuns, c)
			fmt.Printf("  go-dnscollector %s kafka: %8.0f rows/s  %6.2f CPU-s per million rows  delivered %d\n", benchkit.CollectorVersion, c.rate, c.cpu, c.rows)
			fmt.Printf("  ratio (plumb / go-dnscollector): rate %.2f×, CPU per row %.2f×\n", p.rate/c.rate, p.cpu/c.cpu)
		}
	}
	med := func(rs []result, f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	if len(collectorRuns) > 0 {
		fmt.Printf("median of %d: plumb %.0f rows/s %.2f CPU-s/M; go-dnscollector %.0f rows/s %.2f CPU-s/M; CPU per row %.2f×\n", *rounds,
			med(plumbRuns, func(r result) float64 { return r.rate }), med(plumbRuns, func(r result) float64 { return r.cpu }),
			med(collectorRuns, func(r result) float64 { return r.rate }), med(collectorRuns, func(r result) float64 { return r.cpu }),
			med(plumbRuns, func(r result) float64 { return r.cpu })/med(collectorRuns, func(r result) float64 { return r.cpu }))
	}
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimLeft(v, "\t :"))
		}
	}
	return "unknown processor"
}

// createTopic makes a topic of one partition: go-dnscollector writes to
// one, so Plumb does too.
func createTopic(brokers, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	if res, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, topic); err != nil || res.Err != nil {
		log.Fatalf("create topic %s: %v %v", topic, err, res.Err)
	}
}

// delivered counts the rows a read_committed reader sees in topic.
func delivered(brokers, topic string) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(context.Background(), topic)
	if err != nil {
		log.Fatal(err)
	}
	starts, err := adm.ListStartOffsets(context.Background(), topic)
	if err != nil {
		log.Fatal(err)
	}
	// Offsets count transaction markers too: read the records.
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	starts.Each(func(o kadm.ListedOffset) { want -= o.Offset })
	if want == 0 {
		return 0
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer rd.Close()
	var n int64
	idle := time.Now()
	for time.Since(idle) < 3*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := rd.PollFetches(ctx)
		cancel()
		if c := int64(fs.NumRecords()); c > 0 {
			n += c
			idle = time.Now()
		}
	}
	return n
}

// endOffset is how far topic's partition has been written.
func endOffset(brokers, topic string) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return 0
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		return 0
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// runPlumb imports the capture into a server whose job turns it into DNS
// records and publishes them to topic, and times it until the Kafka
// stage has run every block.
func runPlumb(plumb, brokers, capture, topic, dir string) result {
	createTopic(brokers, topic)
	srv, c, err := benchkit.Serve(plumb, dir, "--kafka-brokers", brokers)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	job := fmt.Sprintf("job: out\nqueues: [pcap.sz]\nstages:\n  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: 1d}\n"+
		"  - {name: kafka, inputs: [dns.arrow], program: \"builtin:kafka?topic=%s\"}\n", topic)
	if res, err := c.SubmitJob(ctx, "out.yaml", []byte(job)); err != nil || res.State != "accepted" {
		log.Fatalf("job: %+v %v", res, err)
	}
	start := time.Now()
	imp := exec.Command(plumb, "import", "--quiet", "--server", srv.Addr, "--site", "bench", "--new-instance", "--spool", filepath.Join(dir, "spool"), capture)
	var impCPU time.Duration
	if out, err := imp.CombinedOutput(); err != nil {
		log.Fatalf("import: %v\n%s", err, out)
	}
	impCPU = imp.ProcessState.UserTime() + imp.ProcessState.SystemTime()
	blocks, err := c.Blocks(ctx, "pcap.sz")
	if err != nil {
		log.Fatal(err)
	}
	for {
		st, _ := c.Stats(ctx)
		var runs int64
		for _, s := range st {
			if s.Stage == "out/kafka" {
				runs = s.Runs
			}
		}
		if runs >= int64(len(blocks)) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	cpu, _ := srv.CPU()
	cpu += impCPU
	recs, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"seq"}})
	if err != nil {
		log.Fatal(err)
	}
	records := recs.NumRows()
	recs.Release()
	rows := delivered(brokers, topic)
	return result{rows: rows, records: records, rate: float64(rows) / took.Seconds(), cpu: cpu.Seconds() / (float64(rows) / 1e6)}
}

// collectorIdle is how long go-dnscollector's topic must stay still for
// its run to be over: it flushes on its own clock.
const collectorIdle = 10 * time.Second

// runCollector runs go-dnscollector as its users run it to ship a
// capture's DNS messages to Kafka: its file-ingestor on a directory
// holding the capture (pcap mode, DNS port 53), routed to its Kafka
// producer logger in JSON. It is timed until its topic stops growing
// for collectorIdle, which is not counted; what it dropped, it says in
// its log ("buffer is full"), which is counted here.
func runCollector(bin, brokers, capture, topic, dir string) result {
	createTopic(brokers, topic)
	in := filepath.Join(dir, "in")
	if err := os.MkdirAll(in, 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.Link(capture, filepath.Join(in, "capture.pcap")); err != nil {
		log.Fatal(err)
	}
	host, port, _ := strings.Cut(brokers, ":")
	config := fmt.Sprintf(`global:
  trace:
    verbose: false
multiplexer:
  collectors:
    - name: pcap
      file-ingestor:
        watch-dir: %s
        watch-mode: pcap
        pcap-dns-port: 53
  loggers:
    - name: kafka
      kafkaproducer:
        remote-address: %s
        remote-port: %s
        topic: %s
        partition: 0
        mode: json
        buffer-size: 100
        flush-interval: 1
  routes:
    - from: [pcap]
      to: [kafka]
`, in, host, port, topic)
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfg)
	logf, _ := os.Create(filepath.Join(dir, "collector.log"))
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	var last int64
	lastAt := time.Now()
	for time.Since(lastAt) < collectorIdle && time.Since(start) < 10*time.Minute {
		time.Sleep(100 * time.Millisecond)
		if n := endOffset(brokers, topic); n != last {
			last, lastAt = n, time.Now()
		}
	}
	took := lastAt.Sub(start)
	cpu, _ := benchkit.ProcCPU(cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	if b, _ := os.ReadFile(logf.Name()); bytes.Contains(b, []byte("buffer is full")) {
		fmt.Printf("  go-dnscollector's log says it dropped messages: %q\n", lastLine(b, "buffer is full"))
	}
	rows := delivered(brokers, topic)
	if rows == 0 {
		b, _ := os.ReadFile(logf.Name())
		log.Printf("go-dnscollector delivered nothing; its log:\n%s", tail(string(b), 2000))
		return result{}
	}
	return result{rows: rows, rate: float64(rows) / took.Seconds(), cpu: cpu.Seconds() / (float64(rows) / 1e6)}
}

// lastLine is the last line of log holding what.
func lastLine(log []byte, what string) string {
	var last string
	for l := range strings.Lines(string(log)) {
		if strings.Contains(l, what) {
			last = strings.TrimSpace(l)
		}
	}
	return last
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/plumb-dev/plumb/agent"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/server"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
	"github.com/plumb-dev/plumb/worker"
)

// recorder is a registry that remembers what is registered on it, so a
// test can walk every collector a process exports: a family with labels
// and no series yet is in its Describe, though not in a scrape.
type recorder struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func newRecorder() *recorder { return &recorder{Registry: prometheus.NewRegistry()} }

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// metricDoc is one metric family as the reference lists it.
type metricDoc struct {
	name, typ, help string
	labels          []string
}

// descFields reads a Desc's name, help and labels from its String, the
// only view client_golang gives of them.
var descFields = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// describe lists the metric families of the collectors. The type is the
// one a collected series carries; for a family with no series yet, the
// vector's kind, or else the naming rule promlint enforces (a counter's
// name ends in _total, nothing else's does).
func describe(t *testing.T, cs []prometheus.Collector) map[string]metricDoc {
	t.Helper()
	out := map[string]metricDoc{}
	for _, c := range cs {
		typed := map[string]string{}
		mch := make(chan prometheus.Metric, 64)
		go func() { c.Collect(mch); close(mch) }()
		for m := range mch {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				t.Fatal(err)
			}
			typ := "untyped"
			switch {
			case pb.Counter != nil:
				typ = "counter"
			case pb.Gauge != nil:
				typ = "gauge"
			case pb.Histogram != nil:
				typ = "histogram"
			case pb.Summary != nil:
				typ = "summary"
			}
			typed[m.Desc().String()] = typ
		}
		dch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(dch); close(dch) }()
		for d := range dch {
			f := descFields.FindStringSubmatch(d.String())
			if f == nil {
				t.Fatalf("cannot read %s", d)
			}
			name, _ := strconv.Unquote(f[1])
			help, _ := strconv.Unquote(f[2])
			if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
				continue
			}
			var labels []string
			for _, l := range strings.Split(f[4], ",") {
				if l != "" {
					labels = append(labels, l)
				}
			}
			for _, l := range strings.Split(f[3], ",") {
				if k, _, ok := strings.Cut(l, "="); ok {
					labels = append(labels, k)
				}
			}
			slices.Sort(labels)
			typ := typed[d.String()]
			if typ == "" {
				switch c.(type) {
				case *prometheus.CounterVec:
					typ = "counter"
				case *prometheus.GaugeVec:
					typ = "gauge"
				case *prometheus.HistogramVec:
					typ = "histogram"
				case *prometheus.SummaryVec:
					typ = "summary"
				default:
					typ = "gauge"
					if strings.HasSuffix(name, "_total") {
						typ = "counter"
					}
				}
			}
			if help == "" {
				t.Errorf("metric %s has no help text", name)
			}
			out[name] = metricDoc{name: name, typ: typ, help: help, labels: labels}
		}
	}
	return out
}

// TestMetricsReference: docs/reference/metrics.md is every metric the
// server, a worker and an agent export, walked from their registries
// (name, type, labels, help); a removed or renamed metric fails it, and
// so does a metric without help.
func TestMetricsReference(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The server, registered as plumb serve registers it.
	srvReg := newRecorder()
	srvReg.MustRegister(processMetrics()...)
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	ready := make(chan string, 1)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(sctx, server.Config{Data: t.TempDir(), Listen: "127.0.0.1:0", Logger: log, Registry: reg,
			Engine: engine.Config{Slots: 1, Tick: 20 * time.Millisecond, Registerer: srvReg}, Ready: func(a net.Addr) { ready <- a.String() }})
	}()
	defer func() { stop(); <-done }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	}

	// An agent, shipping a capture to it.
	agentReg := newRecorder()
	agentReg.MustRegister(processMetrics()...)
	src, err := agent.FileSource("../../testdata/pcaps/dnscap__dns.pcap")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Run(ctx, agent.Config{Server: addr, Queue: "pcap.sz", Instance: "lab", Spool: filepath.Join(t.TempDir(), "spool"),
		Codec: codecs.Snappy, MaxBytes: 1 << 20, NewInstance: true, Once: true, Metrics: agentReg, Live: &agent.LiveStats{}}, []agent.Source{src}, nil); err != nil {
		t.Fatal(err)
	}

	// A worker, as plumb worker registers it.
	workerReg := newRecorder()
	workerReg.MustRegister(processMetrics()...)
	worker.New(worker.Config{Slots: 1, Metrics: workerReg, Log: log})

	// The per-site families (and the DNS histograms, whose type a
	// collected series tells) have series once a run has committed DNS
	// counts of the capture.
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	job := "job: counts\nfrom: earliest\nstages:\n" +
		"  - {name: pairs, inputs: [pcap.sz], program: builtin:dnspairs, outputs: [dns.pairs.arrow]}\n" +
		"  - {name: counts, inputs: [dns.pairs.arrow], program: builtin:dnsmetrics}\n"
	if res, err := c.SubmitJob(ctx, "counts.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	for {
		fams, err := srvReg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(fams, func(f *dto.MetricFamily) bool { return f.GetName() == "plumb_dns_latency_seconds" }) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no DNS counts were committed")
		case <-time.After(20 * time.Millisecond):
		}
	}

	var b strings.Builder
	b.WriteString("# Metrics: every one\n\n*Find which metric counts what, its type and labels, and which process exports it.*\n\n")
	b.WriteString("Generated by walking each process's Prometheus registry (`go test ./cmd/plumb -run TestMetricsReference -update`);\n" +
		"a test fails when this page and the code differ. Each process also exports the Go runtime's `go_*` and the\n" +
		"process's `process_*` metrics. See [operations](../operations.md) for the alerts and the dashboard built on them.\n")
	for _, p := range []struct {
		title, how string
		docs       map[string]metricDoc
	}{
		{"Server", "`plumb serve --metrics ADDR` (or `--http ADDR`, under `/metrics`)", describe(t, srvReg.collectors)},
		{"Worker", "`plumb worker --metrics ADDR`", describe(t, workerReg.collectors)},
		{"Agent", "`plumb agent --metrics ADDR`", describe(t, agentReg.collectors)},
	} {
		fmt.Fprintf(&b, "\n## %s\n\nServed by %s.\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n", p.title, p.how)
		names := make([]string, 0, len(p.docs))
		for n := range p.docs {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			d := p.docs[n]
			labels := make([]string, len(d.labels))
			for i, l := range d.labels {
				labels[i] = "`" + l + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", n, d.typ, strings.Join(labels, ", "), strings.ReplaceAll(d.help, "|", `\|`))
		}
	}
	got := b.String()
	for _, want := range []string{"plumb_stage_backlog_blocks", "plumb_dns_queries_total", "plumb_worker_runs_total", "plumb_agent_kernel_dropped_packets_total", "plumb_queue_blocks", "plumb_build_info"} {
		if !strings.Contains(got, "`"+want+"`") {
			t.Errorf("the walk missed %s", want)
		}
	}
	checkGenerated(t, "../../docs/reference/metrics.md", got)
}

package main

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestMetricNames scrapes a server with a running pipeline and a capture
// agent, and holds every metric to Prometheus's naming rules and to the
// list an operator's dashboards and alerts rely on.
func TestMetricNames(t *testing.T) {
	dir := t.TempDir()
	srvMetrics, agentMetrics, workerMetrics := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	addr := servePlumb(t, filepath.Join(dir, "data"), "--metrics", srvMetrics)
	c := dialPlumb(t, addr)
	job := "job: raw\nqueues: [pcap.sz]\nstages:\n  - {name: decode, inputs: [pcap.sz], program: builtin:decode, outputs: [pcap]}\n"
	if res, err := c.SubmitJob(context.Background(), "raw.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("job: %+v %v", res, err)
	}
	// An agent following a growing capture stays up to be scraped.
	capture := filepath.Join(dir, "live.pcap")
	makeCapture(t, capture, 500, 3)
	startPlumb(t, "agent", "--server", addr, "--site", "lax", "--new-instance", "--spool", filepath.Join(dir, "spool"),
		"--block-size", "16KiB", "--follow", capture, "--settle", "200ms", "--metrics", agentMetrics, "--log-level", "warn")
	startPlumb(t, "worker", "--server", addr, "--slots", "1", "--scratch", filepath.Join(dir, "scratch"),
		"--metrics", workerMetrics, "--log-level", "warn")
	// A worker is ready once the server has answered it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + workerMetrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker's /readyz: %v %v", resp, err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "the pipeline to run a block", func() bool {
		st, _ := c.Stats(context.Background())
		return len(st) == 1 && st[0].Runs > 0
	})
	want := map[string][]string{
		srvMetrics: {"plumb_build_info", "plumb_queue_blocks", "plumb_queue_bytes", "plumb_site_last_seq", "plumb_site_missing_blocks",
			"plumb_site_last_arrival_timestamp_seconds", "plumb_site_last_event_timestamp_seconds", "plumb_uploads_total",
			"plumb_consumer_backlog_blocks", "plumb_queue_faulty_blocks", "plumb_auth_failures_total",
			"plumb_store_free_bytes", "plumb_store_used_bytes", "plumb_store_min_free_bytes", "plumb_stage_runs_total",
			"plumb_metadata_file_bytes", "plumb_metadata_free_pages", "plumb_metadata_page_writes_total", "plumb_metadata_write_seconds_total",
			"plumb_metadata_spill_seconds_total"},
		workerMetrics: {"plumb_worker_runs_total", "plumb_worker_runs_in_progress", "plumb_worker_lease_failures_total",
			"plumb_worker_slots", "plumb_worker_last_contact_timestamp_seconds", "plumb_build_info"},
		agentMetrics: {"plumb_agent_packets_total", "plumb_agent_blocks_acked_total", "plumb_agent_spool_bytes",
			"plumb_agent_lost_bytes_total", "plumb_agent_packets_dropped_total", "plumb_agent_spool_max_bytes", "plumb_agent_packets_filtered_total",
			"plumb_agent_oldest_unshipped_seconds", "plumb_agent_spool_state_bytes_written_total"},
	}
	for _, target := range []string{srvMetrics, agentMetrics, workerMetrics} {
		fams := scrapeFamilies(t, target)
		for _, name := range want[target] {
			if fams[name] == nil {
				t.Errorf("%s does not export %s", target, name)
			}
		}
		names := make([]string, 0, len(fams))
		for n := range fams {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if problem := namingProblem(fams[n]); problem != "" {
				t.Errorf("%s: %s: %s", target, n, problem)
			}
		}
		t.Logf("%s: %d metric families", target, len(fams))
	}
	// Per-site series are the source queue's only: pcap's "sites" are the
	// decode stage's, and a silent agent paged once per derived queue.
	var queues []string
	for _, m := range scrapeFamilies(t, srvMetrics)["plumb_site_last_seq"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "queue" {
				queues = append(queues, l.GetValue())
			}
		}
	}
	if !slices.Contains(queues, "pcap.sz") || slices.Contains(queues, "pcap") {
		t.Errorf("plumb_site_last_seq for queues %v; want pcap.sz, the source, and not pcap, which decode makes", queues)
	}
}

var (
	snake    = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	badUnits = regexp.MustCompile(`_(ms|milliseconds|us|microseconds|ns|nanoseconds|minutes|hours|days|kb|mb|gb|kib|mib|gib|percent)(_|$)`)
)

// namingProblem says what breaks Prometheus's naming conventions
// (prometheus.io/docs/practices/naming), or "".
func namingProblem(f *dto.MetricFamily) string {
	n := f.GetName()
	if strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") || strings.HasPrefix(n, "promhttp_") {
		return "" // the client library's own
	}
	switch {
	case !strings.HasPrefix(n, "plumb_"):
		return "not in the plumb_ namespace"
	case !snake.MatchString(n):
		return "not snake_case"
	case badUnits.MatchString(n):
		return "a unit other than the base units (seconds, bytes)"
	case f.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(n, "_total"):
		return "a counter whose name does not end in _total"
	case f.GetType() != dto.MetricType_COUNTER && strings.HasSuffix(n, "_total"):
		return "_total on something that is not a counter"
	case f.GetType() == dto.MetricType_HISTOGRAM && !strings.HasSuffix(n, "_seconds") && !strings.HasSuffix(n, "_bytes") && !strings.HasSuffix(n, "_ratio"):
		return "a histogram without its unit (_seconds, _bytes, _ratio)"
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			switch ln := l.GetName(); {
			case ln == "instance" || ln == "job":
				return "label " + ln + ", which Prometheus sets itself"
			case !snake.MatchString(ln):
				return "label " + ln + " is not snake_case"
			}
		}
	}
	return ""
}

func scrapeFamilies(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s/metrics: %v", addr, err)
	}
	return fams
}

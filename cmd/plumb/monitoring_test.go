package main

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// metricInQuery is a metric name in a PromQL expression.
var metricInQuery = regexp.MustCompile(`\bplumb_[a-z0-9_]+\b`)

// exportedMetrics are the metric names the processes export, read from
// docs/reference/metrics.md, which TestMetricsReference keeps equal to a
// walk of their registries.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	page, err := os.ReadFile("../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(page), "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ = strings.Cut(name, "`")
			names[name] = true
		}
	}
	return names
}

// unknownMetrics returns the metric names of a PromQL expression that the
// code does not export (a histogram's _bucket, _sum and _count count as
// the histogram's).
func unknownMetrics(expr string, exported map[string]bool) []string {
	var out []string
	for _, name := range metricInQuery.FindAllString(expr, -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && exported[b] {
				base = b
			}
		}
		if !exported[base] {
			out = append(out, name)
		}
	}
	return out
}

// TestMonitoringFiles: the shipped alert rules and Grafana dashboard name
// only metrics the code exports, cover what an operator is paged for,
// and pass promtool's checks and the rules' own unit tests.
func TestMonitoringFiles(t *testing.T) {
	exported := exportedMetrics(t)
	if len(exported) < 30 {
		t.Fatalf("found only %d exported metric names: %v", len(exported), exported)
	}
	// The check catches a name no code exports.
	if got := unknownMetrics(`rate(plumb_nope_total[5m]) + plumb_stage_arrival_to_output_seconds_bucket`, exported); !slices.Equal(got, []string{"plumb_nope_total"}) {
		t.Fatalf("unknown names found in a planted query: %v", got)
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	raw, err := os.ReadFile("../../deploy/prometheus/plumb-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	// The shipped scrape configuration names the jobs the rules expect.
	var prom struct {
		Scrape []struct {
			Job string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
	}
	raw, err = os.ReadFile("../../deploy/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &prom); err != nil {
		t.Fatal(err)
	}
	jobs := map[string]bool{}
	for _, s := range prom.Scrape {
		jobs[s.Job] = true
	}
	jobInQuery := regexp.MustCompile(`job="([^"]+)"`)
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if bad := unknownMetrics(r.Expr, exported); len(bad) > 0 {
				t.Errorf("alert %s uses metrics the code does not export: %v", r.Alert, bad)
			}
			for _, m := range jobInQuery.FindAllStringSubmatch(r.Expr, -1) {
				if !jobs[m[1]] {
					t.Errorf("alert %s expects a scrape job %q that deploy/prometheus/prometheus.yml does not have", r.Alert, m[1])
				}
			}
		}
	}
	for _, want := range []string{"PlumbSiteSilent", "PlumbSequenceGap", "PlumbFaultyBlocks", "PlumbStoreNearlyFull",
		"PlumbConsumerLag", "PlumbKernelDrops", "PlumbServerDown", "PlumbAgentDown", "PlumbAgentLosingBytes", "PlumbSpoolNearlyFull", "PlumbMetadataSlow"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s (have %v)", want, alerts)
		}
	}

	var dash struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	raw, err = os.ReadFile("../../deploy/grafana/plumb-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs++
			if bad := unknownMetrics(tg.Expr, exported); len(bad) > 0 {
				t.Errorf("dashboard panel %q uses metrics the code does not export: %v", p.Title, bad)
			}
		}
	}
	if exprs < 10 {
		t.Errorf("the dashboard has %d queries", exprs)
	}
	// Variables pick the queues, sites and stages shown, and every panel
	// of per-stage, per-site or per-agent series follows them (agents by
	// site, not by scrape address).
	var vars []string
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, want := range []string{"queue", "site", "stage"} {
		if !slices.Contains(vars, want) {
			t.Errorf("the dashboard has no $%s variable (has %v)", want, vars)
		}
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for prefix, v := range map[string]string{"plumb_stage_": "$stage", "plumb_site_": "$site", "plumb_agent_": "$site"} {
				if strings.Contains(tg.Expr, prefix) && !strings.Contains(tg.Expr, v) {
					t.Errorf("dashboard panel %q does not follow %s: %s", p.Title, v, tg.Expr)
				}
			}
			if strings.Contains(tg.Expr, "by (instance)") {
				t.Errorf("dashboard panel %q keys agents by scrape address: %s", p.Title, tg.Expr)
			}
		}
	}

	// The DNS traffic dashboard: only exported metrics, every panel
	// following $site.
	raw, err = os.ReadFile("../../deploy/grafana/plumb-dns-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dnsDash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dnsDash); err != nil {
		t.Fatalf("DNS dashboard: %v", err)
	}
	if len(dnsDash.Panels) < 6 {
		t.Errorf("the DNS dashboard has %d panels", len(dnsDash.Panels))
	}
	for _, p := range dnsDash.Panels {
		for _, tg := range p.Targets {
			if bad := unknownMetrics(tg.Expr, exported); len(bad) > 0 || !strings.Contains(tg.Expr, "plumb_dns_") {
				t.Errorf("DNS dashboard panel %q uses metrics the code does not export: %v", p.Title, bad)
			}
			if !strings.Contains(tg.Expr, "$site") {
				t.Errorf("DNS dashboard panel %q does not follow $site: %s", p.Title, tg.Expr)
			}
		}
	}

	promtool := testenv.Tool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "plumb-alerts.yml"}, {"test", "rules", "plumb-alerts.test.yml"}, {"check", "config", "prometheus.yml"}} {
		cmd := testenv.Command(t, time.Minute, promtool, args...)
		cmd.Dir = "../../deploy/prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// checkPlumbArgs fails unless the plumb subcommand accepts every flag of
// args: it parses them with the real flag set, ending at --help.
func checkPlumbArgs(t *testing.T, where string, args []string) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no plumb subcommand", where)
		return
	}
	i := slices.IndexFunc(commands(), func(c command) bool { return c.name == args[0] })
	if i < 0 {
		t.Errorf("%s: plumb has no command %q", where, args[0])
		return
	}
	fs := flag.NewFlagSet("plumb "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := commands()[i].run(context.Background(), fs, append(slices.Clone(args[1:]), "--help"))
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("%s: plumb %s does not accept %q: %v", where, args[0], args[1:], err)
	}
}

// shellWords splits a command line on spaces, keeping double-quoted words.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// TestDeployFiles checks deploy/: the systemd units and the Kubernetes
// manifests parse, have the fields their kind needs, refer to each other
// consistently, and run plumb with flags it has. No cluster runs here.
func TestDeployFiles(t *testing.T) {
	units, _ := filepath.Glob("../../deploy/systemd/*.service")
	if len(units) != 3 {
		t.Fatalf("systemd units: %v; want server, agent and worker", units)
	}
	for _, u := range units {
		f, _ := os.Open(u)
		sections := map[string]map[string]string{}
		var cur string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case line == "" || strings.HasPrefix(line, "#"):
			case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
				cur = strings.Trim(line, "[]")
				sections[cur] = map[string]string{}
			case cur != "" && strings.Contains(line, "="):
				k, v, _ := strings.Cut(line, "=")
				sections[cur][k] = v
			default:
				t.Errorf("%s: line %q is neither a section, a key=value nor a comment", u, line)
			}
		}
		f.Close()
		for _, need := range [][2]string{{"Unit", "Description"}, {"Service", "ExecStart"}, {"Service", "Restart"}, {"Install", "WantedBy"}} {
			if sections[need[0]][need[1]] == "" {
				t.Errorf("%s: [%s] has no %s", u, need[0], need[1])
			}
		}
		words := shellWords(sections["Service"]["ExecStart"])
		if len(words) == 0 || filepath.Base(words[0]) != "plumb" {
			t.Errorf("%s: ExecStart does not run plumb: %v", u, words)
			continue
		}
		checkPlumbArgs(t, u, words[1:])
	}

	raw, err := os.ReadFile("../../deploy/kubernetes/plumb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := os.ReadFile("../../engine/stats.go")
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	byKind := map[string][]map[string]any{}
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("plumb.yaml: %v", err)
		}
		kind, _ := doc["kind"].(string)
		meta, _ := doc["metadata"].(map[string]any)
		if doc["apiVersion"] == nil || kind == "" || meta["name"] == nil {
			t.Errorf("a document lacks apiVersion, kind or metadata.name: %v", doc)
			continue
		}
		byKind[kind] = append(byKind[kind], doc)
	}
	for _, kind := range []string{"Deployment", "StatefulSet", "Service", "HorizontalPodAutoscaler"} {
		if len(byKind[kind]) == 0 {
			t.Errorf("plumb.yaml has no %s", kind)
		}
	}
	get := func(v any, path ...string) any {
		for _, p := range path {
			m, _ := v.(map[string]any)
			v = m[p]
		}
		return v
	}
	plumbPods := 0
	for _, doc := range append(byKind["Deployment"], byKind["StatefulSet"]...) {
		name := get(doc, "metadata", "name")
		sel, _ := get(doc, "spec", "selector", "matchLabels").(map[string]any)
		labels, _ := get(doc, "spec", "template", "metadata", "labels").(map[string]any)
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%v: selector %s=%v does not match the pod labels %v", name, k, v, labels)
			}
		}
		containers, _ := get(doc, "spec", "template", "spec", "containers").([]any)
		if len(containers) == 0 {
			t.Errorf("%v: no containers", name)
		}
		for _, c := range containers {
			image, _ := get(c, "image").(string)
			if image == "" {
				t.Errorf("%v: a container has no image", name)
			}
			ports := map[string]bool{}
			cports, _ := get(c, "ports").([]any)
			for _, p := range cports {
				pn, _ := get(p, "name").(string)
				ports[pn] = true
			}
			for _, probe := range []string{"readinessProbe", "livenessProbe"} {
				if port, ok := get(c, probe, "httpGet", "port").(string); ok && !ports[port] {
					t.Errorf("%v: %s uses port %q the container does not name", name, probe, port)
				}
			}
			if !strings.Contains(image, "plumb") {
				continue
			}
			plumbPods++
			var args []string
			cargs, _ := get(c, "args").([]any)
			for _, a := range cargs {
				s, _ := a.(string)
				args = append(args, s)
			}
			checkPlumbArgs(t, "plumb.yaml "+name.(string), args)
			// The scrape port must be a --metrics listener: under --users,
			// --http answers /metrics with 401.
			if port, ok := get(doc, "spec", "template", "metadata", "annotations", "prometheus.io/port").(string); ok {
				i := slices.Index(args, "--metrics")
				if i < 0 || i+1 >= len(args) || !strings.HasSuffix(args[i+1], ":"+port) {
					t.Errorf("%v: Prometheus scrapes port %s, which is not its --metrics listener (args %v)", name, port, args)
				}
			}
		}
	}
	if plumbPods != 2 {
		t.Errorf("plumb.yaml runs plumb in %d pod templates; want the server and the workers", plumbPods)
	}
	for _, hpa := range byKind["HorizontalPodAutoscaler"] {
		target := get(hpa, "spec", "scaleTargetRef", "name")
		if !slices.ContainsFunc(byKind["Deployment"], func(d map[string]any) bool { return get(d, "metadata", "name") == target }) {
			t.Errorf("the autoscaler scales %v, which is not a Deployment here", target)
		}
		ms, _ := get(hpa, "spec", "metrics").([]any)
		if len(ms) == 0 {
			t.Error("the autoscaler has no metrics")
		}
		for _, m := range ms {
			metric, _ := get(m, "external", "metric", "name").(string)
			if metric == "" || !bytes.Contains(metrics, []byte(`"`+metric+`"`)) {
				t.Errorf("the autoscaler scales on %q, which the server does not export", metric)
			}
		}
	}
}

// TestAgentUnitHardened: systemd-analyze security rates the agent's unit
// OK (≤ 4.0): a dynamic user with raw sockets only, a spool directory
// systemd creates (a fresh host has none), the key handed in as a
// credential. The server and worker run bubblewrap sandboxes, which need
// namespaces and mounts; their units are not held to it yet.
func TestAgentUnitHardened(t *testing.T) {
	sa := testenv.Tool(t, "systemd-analyze")
	out, _ := testenv.Command(t, time.Minute, sa, "security", "--offline=true", "../../deploy/systemd/plumb-agent.service").CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for plumb-agent.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security said:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("plumb-agent.service exposure %.1f", score)
	if score > 4.0 {
		t.Errorf("plumb-agent.service exposure %.1f, want ≤ 4.0:\n%s", score, out)
	}
	unit, _ := os.ReadFile("../../deploy/systemd/plumb-agent.service")
	for _, want := range []string{"DynamicUser=yes", "StateDirectory=plumb-agent", "--spool /var/lib/plumb-agent/"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the agent unit lacks %q", want)
		}
	}
}

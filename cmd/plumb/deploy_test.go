package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
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

// checkUnitCreates fails unless everything a unit's plumb command names
// is made for it on a fresh machine: its user (by plumb.sysusers.conf, or
// DynamicUser=), each credential it reads (LoadCredential=, and none
// loaded unread), and its state, cache and spool directories
// (StateDirectory=, CacheDirectory=). Paths the operator provides (the
// users file, the TLS certificate) are named in the unit's comments.
func checkUnitCreates(t *testing.T, unit string, svc map[string]string, args []string, sysusers map[string]bool) {
	t.Helper()
	if u := svc["User"]; u != "" && !sysusers[u] {
		t.Errorf("%s: User=%s, which plumb.sysusers.conf does not create", unit, u)
	}
	if svc["User"] == "" && svc["DynamicUser"] != "yes" {
		t.Errorf("%s: neither User= nor DynamicUser=yes: it would run as root", unit)
	}
	loaded := map[string]bool{}
	if lc := svc["LoadCredential"]; lc != "" {
		name, _, _ := strings.Cut(lc, ":")
		loaded[name] = true
	}
	used := map[string]bool{}
	for _, a := range args {
		if rest, ok := strings.CutPrefix(a, "${CREDENTIALS_DIRECTORY}/"); ok {
			used[rest] = true
			if !loaded[rest] {
				t.Errorf("%s: reads credential %s, which no LoadCredential= loads", unit, rest)
			}
		}
	}
	for name := range loaded {
		if !used[name] {
			t.Errorf("%s: loads credential %s, which its command does not read", unit, name)
		}
	}
	for i, a := range args {
		if i == 0 || !slices.Contains([]string{"--data", "--spool", "--scratch"}, args[i-1]) {
			continue
		}
		dir, ok := "", false
		switch {
		case strings.HasPrefix(a, "/var/lib/"):
			dir, ok = strings.Split(strings.TrimPrefix(a, "/var/lib/"), "/")[0], svc["StateDirectory"] == strings.Split(strings.TrimPrefix(a, "/var/lib/"), "/")[0]
		case strings.HasPrefix(a, "/var/cache/"):
			dir, ok = strings.Split(strings.TrimPrefix(a, "/var/cache/"), "/")[0], svc["CacheDirectory"] == strings.Split(strings.TrimPrefix(a, "/var/cache/"), "/")[0]
		}
		if !ok {
			t.Errorf("%s: %s %s is not a directory the unit has systemd make (StateDirectory=%s or CacheDirectory=%s)", unit, args[i-1], a, dir, dir)
		}
	}
}

// TestDeployFiles checks deploy/: the systemd units and the Kubernetes
// manifests parse, have the fields their kind needs, refer to each other
// consistently, and run plumb with flags it has. No cluster runs here.
func TestDeployFiles(t *testing.T) {
	sysusers := map[string]bool{}
	raw0, err := os.ReadFile("../../deploy/systemd/plumb.sysusers.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(raw0), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "u" {
			sysusers[f[1]] = true
		}
	}
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
		checkUnitCreates(t, u, sections["Service"], words[1:], sysusers)
	}

	raw := kubeManifests(t, "../../deploy/kubernetes")
	metrics, _ := os.ReadFile("../../engine/stats.go")
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	byKind := map[string][]map[string]any{}
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("deploy/kubernetes: %v", err)
		}
		kind, _ := doc["kind"].(string)
		meta, _ := doc["metadata"].(map[string]any)
		if doc["apiVersion"] == nil || kind == "" || meta["name"] == nil {
			t.Errorf("a document lacks apiVersion, kind or metadata.name: %v", doc)
			continue
		}
		byKind[kind] = append(byKind[kind], doc)
	}
	for _, kind := range []string{"Deployment", "StatefulSet", "Service", "HorizontalPodAutoscaler", "ServiceMonitor"} {
		if len(byKind[kind]) == 0 {
			t.Errorf("deploy/kubernetes has no %s", kind)
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
			checkPlumbArgs(t, "deploy/kubernetes "+name.(string), args)
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
	// PodSecurity "restricted", field by field (no cluster runs here to
	// admit them).
	for _, doc := range append(byKind["Deployment"], byKind["StatefulSet"]...) {
		name := get(doc, "metadata", "name")
		pod := get(doc, "spec", "template", "spec")
		if get(pod, "securityContext", "runAsNonRoot") != true {
			t.Errorf("%v: pod securityContext.runAsNonRoot is not true", name)
		}
		if uid, ok := get(pod, "securityContext", "runAsUser").(int); !ok || uid == 0 {
			t.Errorf("%v: pod runs as user %v; want a non-zero uid", name, get(pod, "securityContext", "runAsUser"))
		}
		if get(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%v: seccompProfile is not RuntimeDefault", name)
		}
		containers, _ := get(pod, "containers").([]any)
		for _, c := range containers {
			cname := get(c, "name")
			if get(c, "securityContext", "allowPrivilegeEscalation") != false {
				t.Errorf("%v/%v: allowPrivilegeEscalation is not false", name, cname)
			}
			drop, _ := get(c, "securityContext", "capabilities", "drop").([]any)
			if !slices.Contains(drop, any("ALL")) || get(c, "securityContext", "capabilities", "add") != nil {
				t.Errorf("%v/%v: capabilities drop %v, add %v; want drop [ALL] and nothing added", name, cname, drop,
					get(c, "securityContext", "capabilities", "add"))
			}
			if get(c, "securityContext", "privileged") == true {
				t.Errorf("%v/%v: privileged", name, cname)
			}
			if img, _ := get(c, "image").(string); strings.Contains(img, "plumb") &&
				(get(c, "readinessProbe") == nil || get(c, "livenessProbe") == nil) {
				t.Errorf("%v/%v: a plumb container without readiness and liveness probes", name, cname)
			}
		}
		if name == "plumb-server" && get(containers[0], "startupProbe") == nil {
			t.Errorf("%v: no startupProbe; a slow start after a crash gets the server killed by its liveness probe", name)
		}
	}
	// Secrets mounted for a non-root user are readable through fsGroup,
	// not by the world.
	for _, doc := range byKind["StatefulSet"] {
		vols, _ := get(doc, "spec", "template", "spec", "volumes").([]any)
		for _, v := range vols {
			if mode, ok := get(v, "secret", "defaultMode").(int); ok && (mode&0o040 == 0 || mode&0o007 != 0) {
				t.Errorf("%v: secret volume %v has mode %o; want group-readable (fsGroup), not world-readable", get(doc, "metadata", "name"), get(v, "name"), mode)
			}
		}
	}
	if len(byKind["PodDisruptionBudget"]) == 0 {
		t.Error("no PodDisruptionBudget for the workers")
	}
	for _, sm := range byKind["ServiceMonitor"] {
		for _, ep := range get(sm, "spec", "endpoints").([]any) {
			port := get(ep, "port")
			found := false
			for _, svc := range byKind["Service"] {
				ports, _ := get(svc, "spec", "ports").([]any)
				found = found || slices.ContainsFunc(ports, func(p any) bool { return get(p, "name") == port })
			}
			if !found {
				t.Errorf("ServiceMonitor %v scrapes port %v, which no Service names", get(sm, "metadata", "name"), port)
			}
		}
	}
	if plumbPods != 2 {
		t.Errorf("deploy/kubernetes runs plumb in %d pod templates; want the server and the workers", plumbPods)
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

// kubeManifests is what kustomize builds of the kustomization in dir.
func kubeManifests(t *testing.T, dir string) []byte {
	t.Helper()
	kustomize := testenv.Tool(t, "kustomize")
	out, err := testenv.Command(t, time.Minute, kustomize, "build", dir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kustomize build %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return out
}

// TestKubeManifestsValid: the Kubernetes manifests, the base alone and
// with its components, and as make kube versions them, are valid
// against the Kubernetes API's schemas (kubernetes-validate --strict,
// pinned by .ci/run, which carries the schemas of each Kubernetes
// release): no misspelt or misplaced field, no value of the wrong
// type. The ServiceMonitor is a CRD those schemas do not hold;
// TestDeployFiles checks it.
func TestKubeManifestsValid(t *testing.T) {
	// kubernetes-validate as a module: pip puts its script where a
	// pyenv shim may not know it yet.
	python := testenv.Tool(t, "python3")
	if out, err := exec.Command(python, "-c", "import kubernetes_validate").CombinedOutput(); err != nil {
		t.Fatalf("kubernetes-validate is not installed (.ci/run installs it: python3 -m pip install kubernetes-validate==1.37.0): %v\n%s", err, out)
	}
	validate := func(args ...string) *exec.Cmd {
		return testenv.Command(t, 2*time.Minute, python, append([]string{"-m", "kubernetes_validate"}, args...)...)
	}
	kustomize := testenv.Tool(t, "kustomize")
	builds := map[string][]byte{
		"base":            kubeManifests(t, "../../deploy/kubernetes/base"),
		"with components": kubeManifests(t, "../../deploy/kubernetes"),
		"multi-server":    kubeManifests(t, "../../deploy/kubernetes/overlays/multi-server"),
	}
	mk := testenv.Command(t, time.Minute, "make", "-s", "-C", "../..", "kube", "VERSION=v9.8.7-test", "KUSTOMIZE="+kustomize)
	versioned, err := mk.Output()
	if err != nil {
		t.Fatalf("make kube: %v", err)
	}
	builds["make kube"] = versioned
	if n := strings.Count(string(versioned), "image: ghcr.io/plumb-dev/plumb:v9.8.7-test"); n != 2 {
		t.Errorf("make kube names the build's image %d times; want the server's and the workers'", n)
	}
	for name, raw := range builds {
		f := filepath.Join(t.TempDir(), "manifests.yaml")
		if err := os.WriteFile(f, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := validate("--strict", "--quiet", f).CombinedOutput()
		if err != nil {
			t.Errorf("deploy/kubernetes (%s) does not validate: %v\n%s", name, err, out)
		}
	}
	// A misspelt field is caught: the check can fail.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(string(builds["base"]), "replicas: 1", "replica: 1", 1)), 0o644)
	if out, err := validate("--strict", "--quiet", bad).CombinedOutput(); err == nil {
		t.Errorf("kubernetes-validate --strict passes a misspelt field: %s", out)
	}
}

// TestKubeMultiServer: the multi-server overlay runs three servers on
// the metadata in PostgreSQL, each command line accepted by the binary,
// and its workers name each server pod by the name the headless Service
// gives it.
func TestKubeMultiServer(t *testing.T) {
	raw := kubeManifests(t, "../../deploy/kubernetes/overlays/multi-server")
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var server, worker []string
	replicas, service, headless := 0, "", map[string]bool{}
	for {
		var doc struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				Replicas    int
				ServiceName string `yaml:"serviceName"`
				ClusterIP   string `yaml:"clusterIP"`
				Template    struct {
					Spec struct {
						Containers []struct{ Args []string }
					}
				}
			}
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch {
		case doc.Kind == "StatefulSet" && doc.Metadata.Name == "plumb-server":
			server, replicas, service = doc.Spec.Template.Spec.Containers[0].Args, doc.Spec.Replicas, doc.Spec.ServiceName
		case doc.Kind == "Deployment" && doc.Metadata.Name == "plumb-worker":
			worker = doc.Spec.Template.Spec.Containers[0].Args
		case doc.Kind == "Service" && doc.Spec.ClusterIP == "None":
			headless[doc.Metadata.Name] = true
		}
	}
	checkPlumbArgs(t, "multi-server plumb-server", server)
	checkPlumbArgs(t, "multi-server plumb-worker", worker)
	if i := slices.Index(server, "--meta"); i < 0 || server[i+1] != "$(PLUMB_META)" {
		t.Errorf("the servers do not take --meta from the plumb-meta secret: %v", server)
	}
	if replicas < 2 || !headless[service] {
		t.Errorf("%d server replicas, governed by Service %q (headless: %v); want several, with a name each", replicas, service, headless[service])
	}
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("plumb-server-%d.%s:8815", i, service))
	}
	if i := slices.Index(worker, "--server"); i < 0 || worker[i+1] != strings.Join(want, ",") {
		t.Errorf("the workers' --server: %v; want every server pod, %s", worker, strings.Join(want, ","))
	}
}

// TestUnitsHardened: systemd-analyze security rates every unit OK
// (≤ 4.0). The agent is a dynamic user with raw sockets only, a spool
// directory systemd creates (a fresh host has none) and its key handed in
// as a credential. The server and worker keep what their bubblewrap
// sandboxes need; sandbox.TestUnderServiceUnits checks that their system
// call filter lets a sandboxed run through.
func TestUnitsHardened(t *testing.T) {
	sa := testenv.Tool(t, "systemd-analyze")
	for _, unit := range []string{"plumb-agent.service", "plumb-server.service", "plumb-worker.service"} {
		out, _ := testenv.Command(t, time.Minute, sa, "security", "--offline=true", "../../deploy/systemd/"+unit).CombinedOutput()
		m := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(unit) + `: ([0-9.]+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("systemd-analyze security said:\n%s", out)
		}
		score, _ := strconv.ParseFloat(string(m[1]), 64)
		t.Logf("%s exposure %.1f", unit, score)
		if score > 4.0 {
			t.Errorf("%s exposure %.1f, want ≤ 4.0:\n%s", unit, score, out)
		}
	}
	unit, _ := os.ReadFile("../../deploy/systemd/plumb-agent.service")
	for _, want := range []string{"DynamicUser=yes", "StateDirectory=plumb-agent", "--spool /var/lib/plumb-agent/", "CapabilityBoundingSet=CAP_NET_RAW"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the agent unit lacks %q", want)
		}
	}
}

// TestContainerfile checks the image recipe without a container builder
// (none is installable here): base images pinned by version, the Go
// image at go.mod's version, a non-root user on a distroless static
// base, and its build command, run here, makes a static binary that
// needs no loader or libraries.
func TestContainerfile(t *testing.T) {
	raw, err := os.ReadFile("../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if goVersion == nil {
		t.Fatal("go.mod has no go line")
	}
	var froms, users []string
	var build string
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms = append(froms, f[1])
			users = append(users, "")
			_, tag, ok := strings.Cut(f[1][strings.LastIndexByte(f[1], '/')+1:], ":")
			if !ok || tag == "" || tag == "latest" {
				t.Errorf("FROM %s: pin the image by version", f[1])
			}
			if strings.Contains(f[1], "/golang:") && !strings.HasPrefix(tag, string(goVersion[1])+"-") {
				t.Errorf("FROM %s: go.mod asks for Go %s", f[1], goVersion[1])
			}
		case "USER":
			users[len(users)-1] = f[1]
		case "RUN":
			if strings.Contains(line, "go build") {
				build = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "RUN"))
			}
		}
	}
	if len(froms) < 2 {
		t.Fatalf("stages %v; want a build stage and a runtime stage", froms)
	}
	final := froms[len(froms)-1]
	if !strings.Contains(final, "distroless/static") && final != "scratch" {
		t.Errorf("the image runs on %s; want a distroless static or scratch base", final)
	}
	if u := users[len(users)-1]; u == "" || u == "0" || strings.HasPrefix(u, "0:") || u == "root" {
		t.Errorf("the image runs as %q; want a non-root user", u)
	}

	// Run the recipe's build command here, writing elsewhere, with the
	// build arguments make image passes.
	args := map[string]string{"VERSION": "v9.8.7-test", "COMMIT": "0123abc"}
	words := shellWords(build)
	for i, w := range words {
		words[i] = os.Expand(w, func(k string) string { return args[k] })
	}
	var env []string
	for len(words) > 0 && strings.Contains(words[0], "=") {
		env, words = append(env, words[0]), words[1:]
	}
	if !slices.Contains(env, "CGO_ENABLED=0") || len(words) < 2 || words[0] != "go" || words[1] != "build" {
		t.Fatalf("build command %q: want CGO_ENABLED=0 go build ...", build)
	}
	out := filepath.Join(t.TempDir(), "plumb")
	if i := slices.Index(words, "-o"); i < 0 || i+1 >= len(words) {
		t.Fatalf("build command %q has no -o", build)
	} else {
		words[i+1] = out
	}
	cmd := testenv.Command(t, 10*time.Minute, words[0], words[1:]...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, msg)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%s); a distroless static base has no loader", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs %v", libs)
	}
	// The image says which build it is, as make image tags it.
	if v, err := exec.Command(out, "version").Output(); err != nil || !strings.Contains(string(v), "v9.8.7-test") || !strings.Contains(string(v), "0123abc") {
		t.Errorf("plumb version in the image says %q (%v); want the VERSION and COMMIT build arguments", v, err)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(mk, []byte("--build-arg VERSION=$(VERSION)")) || !bytes.Contains(mk, []byte("-t $(IMAGE):$(VERSION)")) {
		t.Error("make image does not build and tag the image with the Makefile's VERSION")
	}
}

// TestNoBinaryTracked: no built program is committed (a 29 MB scale
// binary sat at the repository's root): every file git tracks is checked
// for the magic numbers of ELF and Mach-O executables.
func TestNoBinaryTracked(t *testing.T) {
	gitBin := testenv.Tool(t, "git")
	out, err := exec.Command(gitBin, "-C", "../..", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	magics := [][]byte{[]byte("\x7fELF"), {0xfe, 0xed, 0xfa, 0xce}, {0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe}, {0xce, 0xfa, 0xed, 0xfe}}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(filepath.Join("../..", name))
		if err != nil {
			continue // deleted in the work tree
		}
		head := make([]byte, 4)
		n, _ := io.ReadFull(f, head)
		f.Close()
		for _, m := range magics {
			if n == len(head) && bytes.HasPrefix(head, m) {
				t.Errorf("%s is a built program tracked by git: remove it (git rm --cached) and ignore it", name)
			}
		}
	}
}

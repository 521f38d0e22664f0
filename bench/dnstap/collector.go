package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// collectorVersion is the newest go-dnscollector the Go module proxy
// serves here (v0.39 and every v1 are refused).
const collectorVersion = "v0.38.0"

// buildCollector builds go-dnscollector from the module proxy into
// cache, once. Its filtering transformer imports inet.af/netaddr, which
// the proxy no longer serves; the successor package go4.org/netipx (the
// same authors, already in its go.mod) and net/netip have the same API
// under other names, so that one file is rewritten to them. Nothing on
// the dnstap path changes.
func buildCollector(cache string) (string, error) {
	bin := filepath.Join(cache, "go-dnscollector-"+collectorVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/dmachard/go-dnscollector@"+collectorVersion).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download go-dnscollector: %v", err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download go-dnscollector: %s", mod.Error)
	}
	src, err := os.MkdirTemp("", "go-dnscollector-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return "", err
	}
	patch := func(name string, edit func(string) string) error {
		p := filepath.Join(src, name)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		os.Chmod(p, 0o644)
		return os.WriteFile(p, []byte(edit(string(b))), 0o644)
	}
	dropNetaddr := func(s string) string {
		var keep []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.Contains(l, "inet.af/netaddr") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	toNetipx := strings.NewReplacer(
		`"inet.af/netaddr"`, "\"go4.org/netipx\"\n\t\"net/netip\"",
		"netaddr.IPSetBuilder", "netipx.IPSetBuilder",
		"netaddr.IPSet", "netipx.IPSet",
		"netaddr.ParseIPPrefix", "netip.ParsePrefix",
		"netaddr.ParseIP", "netip.ParseAddr",
	).Replace
	for name, edit := range map[string]func(string) string{"go.mod": dropNetaddr, "go.sum": dropNetaddr, "transformers/filtering.go": toNetipx} {
		if err := patch(name, edit); err != nil {
			return "", err
		}
	}
	os.MkdirAll(cache, 0o755)
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building go-dnscollector %s: %v\n%s", collectorVersion, err, out)
	}
	return bin, nil
}

// runCollector runs go-dnscollector as its users run it to keep dnstap:
// its dnstap collector on a unix socket, routed to its file logger in
// dnstap mode (the frames written again to a file, as the agent keeps
// them in its spool). It flushes on its own clock, so the sender's
// connection stays open (a closed one drops what is queued) until the
// file has stopped growing for 3 s (or after
// two minutes).
func runCollector(bin string, frames [][]byte, n int) (rate, cpuPerM, accounted float64) {
	dir, err := os.MkdirTemp("", "plumb-bench-collector-")
	if err != nil {
		log.Fatalf("%v", err)
	}
	defer os.RemoveAll(dir)
	sock, out := filepath.Join(dir, "tap.sock"), filepath.Join(dir, "out.fstrm")
	config := fmt.Sprintf(`global:
  trace:
    verbose: false
multiplexer:
  collectors:
    - name: tap
      dnstap:
        sock-path: %s
  loggers:
    - name: file
      logfile:
        file-path: %s
        mode: dnstap
        max-size: 100000
        max-files: 1
        flush-interval: 1
  routes:
    - from: [tap]
      to: [file]
`, sock, out)
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		log.Fatalf("%v", err)
	}
	cmd := exec.Command(bin, "-config", cfg)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		log.Fatalf("%v", err)
	}
	started := time.Now()
	took, conn := send(sock, frames, n, false)
	var size int64 = -1
	// It reports what it dropped every 10 s: one report at least.
	for stable, deadline := 0, time.Now().Add(2*time.Minute); (stable < 3 || time.Since(started) < 11*time.Second) && time.Now().Before(deadline); time.Sleep(time.Second) {
		fi, err := os.Stat(out)
		if err == nil && fi.Size() == size {
			stable++
		} else if err == nil {
			size, stable = fi.Size(), 0
		}
	}
	conn.Close() // only now: closing drops the frames it has queued
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	got := countFile("go-dnscollector", out, logs.String())
	if got != n {
		// Its own word for the loss, so that it is not taken for the bench's.
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "drop") {
				fmt.Printf("  go-dnscollector: %s\n", strings.TrimSpace(l))
			}
		}
	}
	return float64(n) / took.Seconds(), cpuOf(cmd) / (float64(n) / 1e6), float64(got)
}

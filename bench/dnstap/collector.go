package main

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

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

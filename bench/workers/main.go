// Command workers measures how the xz archive stage scales with remote
// workers: the same capture through a server that runs no stage itself,
// with one worker process and then two, each pinned to its own CPU with
// taskset (the server unpinned, on the side). It prints MB/s of capture and
// the scaling efficiency of the second worker; the aim is at least 85%.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/client"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	sizeMiB := flag.Int("size", 48, "MiB of generated DNS capture")
	blockMiB := flag.Int("block", 2, "block size in MiB")
	flag.Parse()
	if err := run(*plumb, *sizeMiB, *blockMiB); err != nil {
		log.Fatal(err)
	}
}

const job = `
job: archive
from: earliest
stages:
  - {name: xz, inputs: [pcap.sz], program: "builtin:transcode?to=xz", outputs: [pcap.xz], retention: forever}
`

func run(plumb string, sizeMiB, blockMiB int) error {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return errors.New("taskset not found (Debian: util-linux)")
	}
	dir, err := os.MkdirTemp("", "plumb-bench-workers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	capture := filepath.Join(dir, "synth.pcap")
	if out, err := exec.Command(plumb, "synth", "--out", capture, "--size", fmt.Sprintf("%dMiB", sizeMiB), "--seed", "3").CombinedOutput(); err != nil {
		return fmt.Errorf("synth: %v\n%s", err, out)
	}
	fmt.Printf("workers bench: %d MiB of generated DNS in %d MiB blocks through builtin:transcode?to=xz on remote workers pinned with taskset\n", sizeMiB, blockMiB)
	var results []benchkit.Result
	for _, n := range []int{1, 2} {
		r, err := once(plumb, taskset, filepath.Join(dir, fmt.Sprint("run", n)), capture, blockMiB, n)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	fmt.Printf("%-30s %8s %8s\n", "workers", "MB/s", "seconds")
	for _, r := range results {
		fmt.Printf("%-30s %8.1f %8.2f\n", r.Name, r.MBps(), r.Secs)
	}
	eff := (results[1].MBps() - results[0].MBps()) / results[0].MBps()
	fmt.Printf("second worker adds %5.0f%% of the first's throughput  (aim >= 85%%)\n", 100*eff)
	return nil
}

// once imports the capture into a fresh server, starts n pinned workers,
// submits the job and times it until every block is archived.
func once(plumb, taskset, dir, capture string, blockMiB, n int) (benchkit.Result, error) {
	srv, err := benchkit.StartServer(plumb, dir, "--remote-only", "--tick", "200ms")
	if err != nil {
		return benchkit.Result{}, err
	}
	defer srv.Stop()
	if out, err := exec.Command(plumb, "import", "--quiet", "--server", srv.Addr, "--site", "lax", "--new-instance",
		"--spool", filepath.Join(dir, "spool"), "--block-size", fmt.Sprintf("%dMiB", blockMiB), capture).CombinedOutput(); err != nil {
		return benchkit.Result{}, fmt.Errorf("import: %v\n%s", err, out)
	}
	c, err := client.Dial(srv.Addr)
	if err != nil {
		return benchkit.Result{}, err
	}
	defer c.Close()
	ctx := context.Background()
	blocks, err := c.Blocks(ctx, "pcap.sz")
	if err != nil {
		return benchkit.Result{}, err
	}
	var workers []*exec.Cmd
	defer func() {
		for _, w := range workers {
			w.Process.Kill()
			w.Wait()
		}
	}()
	for i := range n {
		w := exec.Command(taskset, "-c", fmt.Sprint(i), plumb, "worker", "--server", srv.Addr, "--slots", "1",
			"--scratch", filepath.Join(dir, fmt.Sprint("scratch", i)), "--log-level", "warn")
		w.Stderr = os.Stderr
		if err := w.Start(); err != nil {
			return benchkit.Result{}, err
		}
		workers = append(workers, w)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ws, _ := c.Workers(ctx)
		if len(ws) == n {
			break
		}
		if time.Now().After(deadline) {
			return benchkit.Result{}, fmt.Errorf("%d workers did not join", n)
		}
	}
	start := time.Now()
	if res, err := c.SubmitJob(ctx, "archive.yaml", []byte(job)); err != nil || res.State != "accepted" {
		return benchkit.Result{}, fmt.Errorf("submit: %+v %v", res, err)
	}
	fi, err := os.Stat(capture)
	if err != nil {
		return benchkit.Result{}, err
	}
	for deadline := time.Now().Add(30 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st, err := c.Stats(ctx)
		if err != nil {
			return benchkit.Result{}, err
		}
		if len(st) == 1 && st[0].Runs == int64(len(blocks)) {
			break
		}
		if time.Now().After(deadline) {
			return benchkit.Result{}, errors.New("the archive did not finish in 30 minutes")
		}
	}
	// MB/s of capture (uncompressed pcap) archived.
	return benchkit.Result{Name: fmt.Sprintf("%d worker(s), %d blocks", n, len(blocks)), Bytes: fi.Size(), Secs: time.Since(start).Seconds()}, nil
}

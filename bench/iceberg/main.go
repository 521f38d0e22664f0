// Command iceberg measures the Iceberg table of a lake over a site's day
// of 5-minute blocks: how many files and bytes per million DNS messages
// the table reads from before compaction (the lake's Hive layout, a
// file a block) and after it (a file a day, rows sorted by registered
// domain and name, ZSTD, a bloom filter on qname: the layout choices
// ENTRADA2 publishes for its Iceberg table), and the server's CPU for
// the compaction.
//
// A day of `plumb synth` traffic is imported as one site's blocks, a job
// runs builtin:dns and builtin:parquet into the lake, and the server
// keeps the table in step; it is then started again with compaction on.
// Printed: the two layouts, their ratio, the CPU seconds and the load
// average.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/laketable"
	"github.com/plumb-dev/plumb/state"
)

const job = `
job: lake
from: earliest
queues: [pcap]
stages:
  - {name: dns, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}
  - {name: lake, inputs: [dns.arrow], program: builtin:parquet, outputs: [dns.parquet], retention: forever}
`

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	rate := flag.Float64("rate", 5, "queries per second of the synthetic day")
	flag.Parse()
	if err := run(*plumb, *rate); err != nil {
		log.Fatal(err)
	}
}

func run(plumb string, rate float64) error {
	dir, err := os.MkdirTemp("", "plumb-bench-iceberg")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	capture := filepath.Join(dir, "day.pcap")
	if out, err := exec.Command(plumb, "synth", "--out", capture, "--duration", "24h", "--rate", fmt.Sprint(rate)).CombinedOutput(); err != nil {
		return fmt.Errorf("synth: %v: %s", err, out)
	}
	srv, err := benchkit.StartServer(plumb, dir, "--iceberg-every", "1s", "--iceberg-compact-every", "0")
	if err != nil {
		return err
	}
	cli := func(args ...string) error {
		cmd := exec.Command(plumb, args...)
		cmd.Env = append(os.Environ(), "PLUMB_SERVER="+srv.Addr)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("plumb %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	jobFile := filepath.Join(dir, "lake.yaml")
	if err := os.WriteFile(jobFile, []byte(job), 0o644); err != nil {
		return err
	}
	if err := cli("job", "submit", jobFile); err != nil {
		return err
	}
	if err := cli("import", "--quiet", "--site", "lax", "--new-instance", "--queue", "pcap", "--codec", "none",
		"--spool", filepath.Join(dir, "spool"), "--block-interval", "5m", "--block-size", "1GiB", capture); err != nil {
		return err
	}
	if err := cli("stats", "--wait"); err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // the last syncs
	srv.Stop()
	before, err := measure(dir)
	if err != nil {
		return err
	}

	// Again, with compaction: the day is before today.
	srv, err = benchkit.StartServer(plumb, dir, "--iceberg-every", "1s", "--iceberg-compact-every", "2s")
	if err != nil {
		return err
	}
	cpu0, _ := srv.CPU()
	compacted := filepath.Join(dir, "data", "iceberg", "warehouse", "plumb", "dns", "compacted")
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(time.Second) {
		if m, _ := filepath.Glob(filepath.Join(compacted, "*", "*", "*.parquet")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			srv.Stop()
			return fmt.Errorf("no compacted file after 10 minutes")
		}
	}
	time.Sleep(3 * time.Second)
	cpu1, _ := srv.CPU()
	srv.Stop()
	after, err := measure(dir)
	if err != nil {
		return err
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("iceberg table of a site's day (%s messages, 5-minute blocks), load average %s\n", fmtInt(before.rows), strings.Fields(string(load))[0])
	fmt.Printf("  lake layout (a file a block):   %4d files, %8.1f MB, %6.1f MB per million messages\n", before.files, float64(before.bytes)/1e6, perMillion(before))
	fmt.Printf("  compacted (sorted, bloom, ZSTD): %4d files, %8.1f MB, %6.1f MB per million messages\n", after.files, float64(after.bytes)/1e6, perMillion(after))
	fmt.Printf("  ratio compacted/lake: files %.4f, bytes %.3f; compaction took %.1f CPU-s on the server\n",
		float64(after.files)/float64(before.files), float64(after.bytes)/float64(before.bytes), (cpu1 - cpu0).Seconds())
	if after.rows != before.rows {
		return fmt.Errorf("compaction changed the table's rows: %d before, %d after", before.rows, after.rows)
	}
	return nil
}

type layout struct {
	files       int
	rows, bytes int64
}

func perMillion(l layout) float64 { return float64(l.bytes) / 1e6 / (float64(l.rows) / 1e6) }

// measure opens the stopped server's table and sums the files it reads.
func measure(dir string) (layout, error) {
	data := filepath.Join(dir, "data")
	db, err := state.Open(filepath.Join(data, "meta.db"), state.Options{})
	if err != nil {
		return layout{}, err
	}
	defer db.Close()
	store, err := blob.OpenDir(filepath.Join(data, "blobs"))
	if err != nil {
		return layout{}, err
	}
	defer store.Close()
	tables, err := laketable.Open(context.Background(), filepath.Join(data, "iceberg"), db, store)
	if err != nil {
		return layout{}, err
	}
	defer tables.Close()
	var l layout
	l.files, l.rows, l.bytes, err = tables.Sizes(context.Background(), "dns.parquet")
	return l, err
}

func fmtInt(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

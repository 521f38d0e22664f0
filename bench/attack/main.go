// Command attack measures issue 37's attack on builtin:dns through a
// server process: one block of TCP streams to port 53 that never finish
// a message (each 64,000 bytes in order and 256,000 past a hole, as
// anyone who can open connections to a captured resolver can send),
// followed by a block of real DNS from the same site.
//
// For 1,024, 4,096 and 65,536 streams, each on a fresh server with 2
// slots, it prints: the attack block's size (zstd) and the capture it
// holds, the server's peak RSS over its baseline, the seconds until both
// blocks have their rows, whether the real block's rows are all there,
// and the p50/p99 of another site's small puts while the attack runs
// beside their figures on the quiet server before it (aim: p99 within
// 2×). Then twelve 10 KB state-heavy blocks, and how much the metadata
// file grew (aim: < 1 MiB).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/hostile"
	"github.com/plumb-dev/plumb/internal/proc"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	real := flag.String("real", "testdata/pcaps/dnscap__dns.pcap", "a capture of real DNS, the site's block after the attack")
	sizes := flag.String("streams", "1024,4096,65536", "stream counts of the attack blocks, one server each")
	flag.Parse()
	good, err := os.ReadFile(*real)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("== builtin:dns given a block of half-open TCP streams (64,000 bytes in order, 256,000 past a hole, each), then a block of real DNS")
	fmt.Printf("%8s %9s %9s %14s %8s %9s %12s %12s  %s\n", "streams", "block KB", "holds MB", "peak RSS +MiB", "seconds", "real rows", "quiet p50/p99", "attack p50/p99", "loadavg before")
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			log.Fatalf("-streams %q: %v", s, err)
		}
		if err := attack(*plumb, n, good); err != nil {
			log.Fatalf("%d streams: %v", n, err)
		}
	}
	if err := metadata(*plumb); err != nil {
		log.Fatal(err)
	}
}

const job = "job: dns\nfrom: earliest\nstages:\n  - {name: dns, inputs: [pcap.zst], program: builtin:dns, outputs: [dns.arrow], retention: forever}\n"

func put(ctx context.Context, c *client.Client, name string, data []byte) error {
	sum := sha256.Sum256(data)
	_, err := c.Put(ctx, client.Source{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }})
	return err
}

// other puts small blocks to a site of its own, one after another, and
// keeps each put's seconds.
type other struct {
	c   *client.Client
	seq uint64
	mu  sync.Mutex
	lat []time.Duration
}

func (o *other) once(ctx context.Context) error {
	o.seq++
	name := block.Name{Time: time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC).Add(time.Duration(o.seq) * time.Second), Seq: o.seq, Instance: "other", Queue: "bin"}
	start := time.Now()
	if err := put(ctx, o.c, name.String(), []byte("abc")); err != nil {
		return err
	}
	o.mu.Lock()
	o.lat = append(o.lat, time.Since(start))
	o.mu.Unlock()
	return nil
}

// take returns the latencies so far and starts again.
func (o *other) take() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.lat
	o.lat = nil
	return l
}

func pct(l []time.Duration) string {
	if len(l) == 0 {
		return "n/a"
	}
	slices.Sort(l)
	at := func(p float64) time.Duration { return l[min(len(l)-1, int(p*float64(len(l))))] }
	return fmt.Sprintf("%.0f/%.0fms", at(0.5).Seconds()*1000, at(0.99).Seconds()*1000)
}

func attack(plumb string, streams int, good []byte) error {
	dir, err := os.MkdirTemp("", "plumb-bench-attack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bomb := hostile.HalfOpenStreamsZstd(streams, 64000, 256000)
	srv, c, err := benchkit.Serve(plumb, dir, "--slots", "2", "--tick", "100ms")
	if err != nil {
		return err
	}
	defer srv.Stop()
	ctx := context.Background()
	o := &other{c: c}
	for range 200 {
		if err := o.once(ctx); err != nil {
			return err
		}
	}
	quiet := o.take()
	// The site's second block (real DNS) first: it waits for the first.
	if err := put(ctx, c, "20250505-151106-00000002.lax.pcap.zst", zstdOf(good)); err != nil {
		return err
	}
	if res, err := c.SubmitJob(ctx, "dns.yaml", []byte(job)); err != nil || res.State != "accepted" {
		return fmt.Errorf("submit: %+v %v", res, err)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	base, err := proc.Status(srv.Pid(), "VmRSS:")
	if err != nil {
		return err
	}
	start := time.Now()
	if err := put(ctx, c, "20250505-151105-00000001.lax.pcap.zst", bomb); err != nil {
		return err
	}
	// Another site's puts go on while the attack runs.
	octx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var oerr error
	wg.Go(func() {
		for octx.Err() == nil {
			if err := o.once(octx); err != nil && octx.Err() == nil {
				oerr = err
				return
			}
		}
	})
	var rows int64
	for deadline := time.Now().Add(30 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st, err := c.Stats(ctx)
		if err != nil {
			stop()
			wg.Wait()
			return err
		}
		if len(st) == 1 && st[0].Runs+st[0].Faulty >= 2 {
			rows = -1
			if st[0].Faulty == 0 {
				rows, err = countRows(ctx, c)
				if err != nil {
					stop()
					wg.Wait()
					return err
				}
			}
			break
		}
		if time.Now().After(deadline) {
			stop()
			wg.Wait()
			return errors.New("the two blocks did not finish in 30 minutes")
		}
	}
	secs := time.Since(start).Seconds()
	stop()
	wg.Wait()
	if oerr != nil {
		return fmt.Errorf("the other site's put: %w", oerr)
	}
	peak, err := proc.Status(srv.Pid(), "VmHWM:")
	if err != nil {
		return err
	}
	held := int64(streams) * (64000 + 256000)
	real := fmt.Sprint(rows)
	if rows < 0 {
		real = "FAULTY"
	}
	fmt.Printf("%8d %9.1f %9.0f %14d %8.1f %9s %12s %12s  %s\n", streams, float64(len(bomb))/1e3, float64(held)/1e6, (peak-base)>>20, secs,
		real, pct(quiet), pct(o.take()), strings.Join(strings.Fields(string(load))[:3], " "))
	return nil
}

// countRows counts the rows of the real block (sequence 2).
func countRows(ctx context.Context, c *client.Client) (int64, error) {
	rows, err := c.Records(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"time"}, From: []byte("2"), To: []byte("2")})
	if err != nil {
		return 0, err
	}
	defer rows.Release()
	var n int64
	for rows.Next() {
		n += rows.RecordBatch().NumRows()
	}
	return n, rows.Err()
}

// metadata puts twelve small state-heavy blocks, then runs builtin:dns
// over them and prints how much the metadata file grew meanwhile.
func metadata(plumb string) error {
	dir, err := os.MkdirTemp("", "plumb-bench-attack-meta-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, c, err := benchkit.Serve(plumb, dir, "--slots", "2", "--tick", "100ms")
	if err != nil {
		return err
	}
	defer srv.Stop()
	ctx := context.Background()
	small := hostile.HalfOpenStreamsZstd(32, 64000, 256000)
	for seq := 1; seq <= 12; seq++ {
		name := block.Name{Time: time.Date(2025, 5, 5, 15, 11, seq, 0, time.UTC), Seq: uint64(seq), Instance: "lax", Queue: "pcap.zst"}
		if err := put(ctx, c, name.String(), small); err != nil {
			return err
		}
	}
	meta := filepath.Join(dir, "data", "meta.db")
	before, err := os.Stat(meta)
	if err != nil {
		return err
	}
	if res, err := c.SubmitJob(ctx, "dns.yaml", []byte(job)); err != nil || res.State != "accepted" {
		return fmt.Errorf("submit: %+v %v", res, err)
	}
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if len(st) == 1 && st[0].Runs+st[0].Faulty >= 12 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("twelve blocks did not finish in 10 minutes")
		}
	}
	after, err := os.Stat(meta)
	if err != nil {
		return err
	}
	fmt.Printf("twelve %.1f KB blocks, each holding %.0f MB in half-open streams: the metadata file grew %.2f MiB (aim < 1 MiB)\n",
		float64(len(small))/1e3, 32*(64000+256000)/1e6, float64(after.Size()-before.Size())/(1<<20))
	return nil
}

// zstdOf compresses a capture as an agent with --codec zstd would.
func zstdOf(data []byte) []byte {
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	return enc.EncodeAll(data, nil)
}

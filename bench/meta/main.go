// Command meta measures what the metadata store costs a server: puts of
// small blocks from several clients at once, then a consumer group
// reading and acknowledging them, on one server with its bbolt file and
// on one, two and three servers sharing --meta on PostgreSQL (Debian's,
// started here) and one store, in the same run; with several servers the
// clients are spread over them, and the consumer reads through one. It
// prints puts/s and acks/s, put latency p50/p99, and CPU seconds per 1,000
// puts of the servers (all of them) and of PostgreSQL.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/testenv"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	blocks := flag.Int("blocks", 2000, "blocks put per run")
	size := flag.Int("size", 4096, "bytes per block")
	clients := flag.Int("clients", 4, "clients putting at once (one site each)")
	reps := flag.Int("reps", 3, "runs of each, alternated")
	most := flag.Int("servers", 3, "measure 1 to this many servers on PostgreSQL")
	flag.Parse()
	url, stop, err := testenv.PostgresServer()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	fmt.Printf("== metadata: %d blocks of %d bytes from %d clients, then one consumer group reading and acking them\n", *blocks, *size, *clients)
	fmt.Printf("%-26s %9s %9s %9s %9s %14s %14s %s\n", "", "puts/s", "p50 ms", "p99 ms", "acks/s", "server CPU-s", "postgres CPU-s", "(per 1,000 puts; loadavg)")
	n := 0
	for rep := range *reps {
		for servers := 0; servers <= *most; servers++ {
			n++
			meta, name := "", "bbolt, 1 server"
			if servers > 0 {
				meta, name = url, fmt.Sprintf("postgres, %d server", servers)
				if servers > 1 {
					name += "s"
				}
			}
			r, err := measure(*plumb, meta, strings.Replace(url, "/postgres?", fmt.Sprintf("/bench%d?", n), 1), max(servers, 1), *blocks, *size, *clients)
			if err != nil {
				log.Fatal(err)
			}
			load, _ := os.ReadFile("/proc/loadavg")
			fmt.Printf("%-26s %9.0f %9.2f %9.2f %9.0f %14.3f %14.3f %s\n", fmt.Sprintf("%s, run %d", name, rep+1), r.puts, r.p50, r.p99, r.acks,
				r.serverCPU/float64(*blocks)*1000, r.pgCPU/float64(*blocks)*1000, strings.Join(strings.Fields(string(load))[:1], ""))
		}
	}
}

type result struct {
	puts, acks, p50, p99 float64
	serverCPU, pgCPU     float64
}

// measure runs servers (on PostgreSQL database dbURL when meta is set,
// sharing one store) and puts and acks the blocks.
func measure(plumb, meta, dbURL string, servers, blocks, size, clients int) (result, error) {
	var res result
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "plumb-bench-meta-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	if meta != "" {
		if out, err := exec.Command("psql", meta, "-c", "CREATE DATABASE "+dbURL[strings.LastIndex(dbURL, "/")+1:strings.Index(dbURL, "?")]).CombinedOutput(); err != nil {
			return res, fmt.Errorf("create database: %v: %s", err, out)
		}
	}
	var srvs []*benchkit.Server
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
	}()
	for i := range servers {
		var extra []string
		if meta != "" {
			extra = []string{"--meta", dbURL, "--store", "file://" + filepath.Join(dir, "blobs")}
		}
		srv, err := benchkit.StartServer(plumb, filepath.Join(dir, fmt.Sprint(i)), extra...)
		if err != nil {
			return res, err
		}
		srvs = append(srvs, srv)
	}
	cpu := func() time.Duration {
		var total time.Duration
		for _, s := range srvs {
			c, _ := s.CPU()
			total += c
		}
		return total
	}
	pgBefore := postgresCPU()
	cpuBefore := cpu()
	payloads := make([][]byte, blocks)
	for i := range payloads {
		payloads[i] = make([]byte, size)
		rand.Read(payloads[i])
	}
	var mu sync.Mutex
	var lat []time.Duration
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := client.Dial(srvs[c%len(srvs)].Addr) // sites spread over the servers
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			site := fmt.Sprintf("s%d", c)
			for i := c; i < blocks; i += clients {
				data := payloads[i]
				sum := sha256.Sum256(data)
				name := fmt.Sprintf("20250505-151105-%08d.%s.pcap", i/clients+1, site)
				src := client.Source{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
					Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
				t0 := time.Now()
				if _, err := cl.Put(ctx, src); err != nil {
					errs <- err
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	res.puts = float64(blocks) / time.Since(start).Seconds()
	res.serverCPU = (cpu() - cpuBefore).Seconds()
	res.pgCPU = postgresCPU() - pgBefore
	slices.Sort(lat)
	res.p50 = lat[len(lat)/2].Seconds() * 1000
	res.p99 = lat[len(lat)*99/100].Seconds() * 1000

	cl, err := client.Dial(srvs[len(srvs)-1].Addr)
	if err != nil {
		return res, err
	}
	defer cl.Close()
	start = time.Now()
	acked := 0
	err = cl.Consume(ctx, flight.Ticket{Queue: "pcap", Group: "bench", From: flight.FromEarliest}, func(flight.Header, io.Reader) error {
		acked++
		return nil
	})
	if err != nil {
		return res, err
	}
	if acked != blocks {
		return res, fmt.Errorf("the group read %d blocks of %d", acked, blocks)
	}
	res.acks = float64(blocks) / time.Since(start).Seconds()
	return res, nil
}

// postgresCPU is the CPU seconds every postgres process has used so far.
func postgresCPU() float64 {
	var total float64
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range procs {
		comm, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		cpu, _ := benchkit.ProcCPU(pid)
		total += cpu.Seconds()
	}
	return total
}

// Command streams measures the stream ticket: a consumer that reads and
// discards a site's blocks in order, beside reading the same blocks by
// block ticket, in MB/s; and the delay from a block's upload being
// acknowledged to a following stream consumer receiving it, at a steady
// upload rate.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
)

func source(site string, seq uint64, data []byte) client.Source {
	n := block.Name{Time: time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC).Add(time.Duration(seq) * time.Second), Seq: seq, Instance: site, Queue: "pcap"}
	sum := sha256.Sum256(data)
	return client.Source{Name: n.String(), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
}

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	blocks := flag.Int("blocks", 32, "blocks for the throughput runs")
	size := flag.Int("block-size", 16<<20, "bytes per block")
	rate := flag.Duration("every", 50*time.Millisecond, "upload interval for the delay run")
	n := flag.Int("delay-blocks", 200, "blocks for the delay run")
	flag.Parse()
	dir, err := os.MkdirTemp("", "plumb-bench-streams-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, c, err := benchkit.Serve(*plumb, dir)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 1))
	data := make([]byte, *size)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	var names []string
	for seq := uint64(1); seq <= uint64(*blocks); seq++ {
		data[0] = byte(seq) // each block its own bytes
		src := source("lax", seq, bytes.Clone(data))
		if _, err := c.Put(ctx, src); err != nil {
			log.Fatal(err)
		}
		names = append(names, src.Name)
	}
	total := float64(*blocks) * float64(*size)
	fmt.Printf("== streams: %d blocks of %d MiB of one site\n", *blocks, *size>>20)
	t0 := time.Now()
	for _, name := range names {
		s, err := c.Get(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		if !s.Next() {
			log.Fatal(s.Err())
		}
		if _, err := io.Copy(io.Discard, s); err != nil {
			log.Fatal(err)
		}
		s.Close()
	}
	byBlock := total / 1e6 / time.Since(t0).Seconds()
	t0 = time.Now()
	tk := flight.StreamTicket{Stream: "pcap", Instance: "lax", Consumer: "bench"}
	tk.From, _ = json.Marshal("earliest")
	s, err := c.Stream(ctx, tk)
	if err != nil {
		log.Fatal(err)
	}
	got := 0
	for s.Next() {
		if _, err := io.Copy(io.Discard, s); err != nil {
			log.Fatal(err)
		}
		got++
	}
	if s.Err() != nil || got != *blocks {
		log.Fatalf("stream read %d blocks: %v", got, s.Err())
	}
	s.Close()
	byStream := total / 1e6 / time.Since(t0).Seconds()
	fmt.Printf("   block tickets %.0f MB/s, stream ticket %.0f MB/s: ratio %.2f (aim at least 0.80)\n", byBlock, byStream, byStream/byBlock)

	// Delay: a following consumer of another site, blocks of 64 KiB
	// uploaded at a steady rate.
	tk = flight.StreamTicket{Stream: "pcap", Instance: "ams", Consumer: "follow", Follow: true}
	tk.From, _ = json.Marshal("1")
	cctx, cancel := context.WithCancel(ctx)
	fs, err := c.Stream(cctx, tk)
	if err != nil {
		log.Fatal(err)
	}
	acked := make([]time.Time, *n+1)
	recv := make(chan [2]int64, *n)
	go func() {
		for i := 1; i <= *n && fs.Next(); i++ {
			at := time.Now()
			io.Copy(io.Discard, fs)
			var seq uint64
			if bn, err := block.Parse(fs.Header().Name); err == nil {
				seq = bn.Seq
			}
			recv <- [2]int64{int64(seq), at.UnixNano()}
		}
		close(recv)
	}()
	small := data[:64<<10]
	tick := time.NewTicker(*rate)
	for seq := 1; seq <= *n; seq++ {
		<-tick.C
		small[0] = byte(seq)
		if _, err := c.Put(ctx, source("ams", uint64(seq), bytes.Clone(small))); err != nil {
			log.Fatal(err)
		}
		acked[seq] = time.Now()
	}
	tick.Stop()
	var delays []time.Duration
	for r := range recv {
		delays = append(delays, max(time.Unix(0, r[1]).Sub(acked[r[0]]), 0))
	}
	cancel()
	fs.Close()
	slices.Sort(delays)
	if len(delays) == 0 {
		log.Fatal("the following consumer received nothing")
	}
	fmt.Printf("   upload-to-consumer delay beyond the acknowledged upload, one block every %v: p50 %v, p99 %v over %d blocks (aim: p99 under 100ms)\n",
		*rate, delays[len(delays)/2].Round(time.Microsecond), delays[len(delays)*99/100].Round(time.Microsecond), len(delays))
}

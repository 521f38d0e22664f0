// Command dnstap measures dnstap ingest: the agent taking frames on a
// unix socket (Frame Streams, bidirectional) into its spool and shipping
// them to a server, beside fstrm_capture (the reference Frame Streams
// receiver, in C, which only writes the frames to a file) and
// go-dnscollector (the Go DNS collector most operators run, built from
// the module proxy, its dnstap collector writing dnstap to a file) on the
// same frames. For each it prints the rate the sender could send at, the CPU
// seconds per million frames of the receiving process (which does not
// depend on free cores), and the frames accounted for at the end: every
// frame sent must be in a block (or in the file), none lost; what the
// others lose is printed.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	framestream "github.com/farsightsec/golang-framestream"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/dns/dnstap"
	"github.com/plumb-dev/plumb/pcap"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	n := flag.Int("frames", 2_000_000, "frames sent per run")
	rounds := flag.Int("rounds", 3, "runs of each")
	cache := flag.String("cache", "bin", "directory go-dnscollector is built into, once")
	flag.Parse()
	frames := makeFrames(4096)
	fstrm, _ := exec.LookPath("fstrm_capture")
	collector, err := benchkit.BuildCollector(*cache)
	if err != nil {
		log.Printf("%v; no go-dnscollector baseline", err)
	}
	type result struct{ rate, cpu, accounted float64 }
	var plumbRuns, fstrmRuns, collectorRuns []result
	var loads []string
	for r := range *rounds {
		load, _ := os.ReadFile("/proc/loadavg")
		loads = append(loads, string(load[:14]))
		rate, cpu, got := runPlumb(*plumb, frames, *n)
		plumbRuns = append(plumbRuns, result{rate, cpu, got})
		fmt.Printf("round %d: plumb agent %.0f k frames/s, %.2f CPU-s per million, %d of %d frames in blocks\n", r+1, rate/1e3, cpu, int(got), *n)
		if fstrm != "" {
			rate, cpu, got := runFstrm(fstrm, frames, *n)
			fstrmRuns = append(fstrmRuns, result{rate, cpu, got})
			fmt.Printf("round %d: fstrm_capture %.0f k frames/s, %.2f CPU-s per million, %d of %d frames in its file\n", r+1, rate/1e3, cpu, int(got), *n)
		}
		if collector != "" {
			rate, cpu, got := runCollector(collector, frames, *n)
			collectorRuns = append(collectorRuns, result{rate, cpu, got})
			fmt.Printf("round %d: go-dnscollector %.0f k frames/s, %.2f CPU-s per million, %d of %d frames in its file\n", r+1, rate/1e3, cpu, int(got), *n)
		}
	}
	med := func(rs []result, f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	rate := func(r result) float64 { return r.rate }
	cpu := func(r result) float64 { return r.cpu }
	fmt.Printf("\n== dnstap ingest, %d frames a run, medians of %d (loadavg before each: %v)\n", *n, *rounds, loads)
	fmt.Printf("plumb agent (spool + ship): %8.0f k frames/s  %6.2f CPU-s per million frames\n", med(plumbRuns, rate)/1e3, med(plumbRuns, cpu))
	if len(fstrmRuns) > 0 {
		fmt.Printf("fstrm_capture (file only): %8.0f k frames/s  %6.2f CPU-s per million frames\n", med(fstrmRuns, rate)/1e3, med(fstrmRuns, cpu))
		fmt.Printf("plumb / fstrm_capture: %.2fx the rate, %.2fx the CPU per frame\n", med(plumbRuns, rate)/med(fstrmRuns, rate), med(plumbRuns, cpu)/med(fstrmRuns, cpu))
	} else {
		fmt.Println("(fstrm_capture not installed: Debian's fstrm-bin; no baseline)")
	}
	if len(collectorRuns) > 0 {
		fmt.Printf("go-dnscollector %s (dnstap to file): %8.0f k frames/s  %6.2f CPU-s per million frames\n", benchkit.CollectorVersion, med(collectorRuns, rate)/1e3, med(collectorRuns, cpu))
		fmt.Printf("plumb / go-dnscollector: %.2fx the rate, %.2fx the CPU per frame\n", med(plumbRuns, rate)/med(collectorRuns, rate), med(plumbRuns, cpu)/med(collectorRuns, cpu))
		for _, r := range collectorRuns {
			if r.accounted != float64(*n) {
				fmt.Printf("go-dnscollector lost %d of %d frames (%.1f%%)\n", *n-int(r.accounted), *n, 100*(1-r.accounted/float64(*n)))
			}
		}
	}
	for _, r := range plumbRuns {
		if r.accounted != float64(*n) {
			fmt.Printf("FRAMES LOST: %d of %d in blocks\n", int(r.accounted), *n)
		}
	}
}

// makeFrames makes distinct query and response frames of a resolver.
func makeFrames(k int) [][]byte {
	var out [][]byte
	at := time.Now().UTC()
	for i := range k {
		name := fmt.Sprintf("host%d.example%d.com", i, i%97)
		q := dnsMsg(&layers.DNS{ID: uint16(i), RD: true, Questions: []layers.DNSQuestion{{Name: []byte(name), Type: layers.DNSTypeA, Class: layers.DNSClassIN}}})
		r := dnsMsg(&layers.DNS{ID: uint16(i), QR: true, RA: true, Questions: []layers.DNSQuestion{{Name: []byte(name), Type: layers.DNSTypeA, Class: layers.DNSClassIN}},
			Answers: []layers.DNSResourceRecord{{Name: []byte(name), Type: layers.DNSTypeA, Class: layers.DNSClassIN, TTL: 300, IP: []byte{192, 0, 2, byte(i)}}}})
		c := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		s := netip.MustParseAddr("10.255.0.53")
		t := at.Add(time.Duration(i) * time.Millisecond)
		out = append(out,
			dnstap.Encode(&dnstap.Message{Identity: "bench", Type: 5, Protocol: 1, QueryAddr: c, ResponseAddr: s, QueryPort: uint16(1024 + i), ResponsePort: 53, QueryTime: t, QueryMessage: q}),
			dnstap.Encode(&dnstap.Message{Identity: "bench", Type: 6, Protocol: 1, QueryAddr: c, ResponseAddr: s, QueryPort: uint16(1024 + i), ResponsePort: 53, QueryTime: t, ResponseTime: t.Add(time.Millisecond), ResponseMessage: r}))
	}
	return out
}

func dnsMsg(d *layers.DNS) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := d.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		log.Fatal(err)
	}
	return buf.Bytes()
}

// send connects to sock as a DNS server's dnstap does and sends n
// frames, returning how long it took and the connection, to be closed.
// With stop it ends the stream as a server does, waiting for the
// receiver's FINISH; go-dnscollector never sends one, so it is only
// flushed.
func send(sock string, frames [][]byte, n int, stop bool) (time.Duration, io.Closer) {
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conn, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("connect %s: %v", sock, err)
		}
	}
	start := time.Now()
	w, err := framestream.NewWriter(conn, &framestream.WriterOptions{ContentTypes: [][]byte{[]byte(dnstap.ContentType)}, Bidirectional: true, Timeout: 30 * time.Second})
	if err != nil {
		log.Fatalf("handshake: %v", err)
	}
	for i := range n {
		if _, err := w.WriteFrame(frames[i%len(frames)]); err != nil {
			log.Fatalf("frame %d: %v", i, err)
		}
	}
	if !stop {
		if err := w.Flush(); err != nil {
			log.Fatalf("flush: %v", err)
		}
	} else if err := w.Close(); err != nil {
		log.Fatalf("close: %v", err)
	}
	return time.Since(start), conn
}

func cpuOf(cmd *exec.Cmd) float64 {
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

func runPlumb(plumb string, frames [][]byte, n int) (rate, cpuPerM, accounted float64) {
	dir, err := os.MkdirTemp("", "plumb-bench-dnstap-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, c, err := benchkit.Serve(plumb, dir)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	addr := srv.Addr
	sock := filepath.Join(dir, "tap.sock")
	var agentLog bytes.Buffer
	agent := exec.Command(plumb, "agent", "--server", addr, "--site", "bench", "--queue", "dnstap.sz", "--new-instance",
		"--spool", filepath.Join(dir, "spool"), "--dnstap-socket", sock, "--settle", "1s", "--log-level", "warn")
	agent.Stdout, agent.Stderr = &agentLog, &agentLog
	if err := agent.Start(); err != nil {
		log.Fatal(err)
	}
	took, conn := send(sock, frames, n, true)
	conn.Close()
	agent.Process.Signal(syscall.SIGTERM) // ships what is spooled, then ends
	if err := agent.Wait(); err != nil {
		log.Fatalf("agent: %v: %s", err, agentLog.String())
	}
	return float64(n) / took.Seconds(), cpuOf(agent) / (float64(n) / 1e6), float64(countShipped(c))
}

// countShipped counts the frames in the server's dnstap blocks.
func countShipped(c *client.Client) int {
	ctx := context.Background()
	blocks, err := c.Blocks(ctx, "dnstap.sz")
	if err != nil {
		log.Fatal(err)
	}
	total := 0
	for _, b := range blocks {
		s, err := c.Get(ctx, b.Name)
		if err != nil {
			log.Fatal(err)
		}
		var data bytes.Buffer
		for s.Next() {
			data.ReadFrom(s)
		}
		s.Close()
		r, closer, err := pcap.NewReader(&data)
		if err != nil {
			log.Fatalf("%s: %v", b.Name, err)
		}
		for {
			if _, _, err := r.Next(); err != nil {
				break
			}
			total++
		}
		closer.Close()
	}
	return total
}

func runFstrm(fstrm string, frames [][]byte, n int) (rate, cpuPerM, accounted float64) {
	dir, err := os.MkdirTemp("", "plumb-bench-fstrm-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock, out := filepath.Join(dir, "tap.sock"), filepath.Join(dir, "out.fstrm")
	cmd := exec.Command(fstrm, "-t", dnstap.ContentType, "-u", sock, "-w", out)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	took, conn := send(sock, frames, n, true)
	conn.Close()
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	got := countFile("fstrm_capture", out, stderr.String())
	return float64(n) / took.Seconds(), cpuOf(cmd) / (float64(n) / 1e6), float64(got)
}

// countFile counts the frames in the Frame Streams file a receiver
// wrote; a torn last frame is not counted.
func countFile(who, path, logs string) int {
	f, err := os.Open(path)
	if err != nil {
		log.Fatalf("%s wrote nothing: %v: %s", who, err, logs)
	}
	defer f.Close()
	got := 0
	if err := dnstap.ReadFile(f, func([]byte) error { got++; return nil }); err != nil && err != io.ErrUnexpectedEOF {
		log.Printf("reading %s's file: %v", who, err)
	}
	return got
}

// Command dns measures builtin:dns's extraction (`plumb dns`, the same
// code) on generated captures of the normal and the attack mix, beside
// tshark doing the same extraction in the same run, and reports the
// packets/s ratio and the extractor's peak memory.
//
// tshark reads a prefix of each capture (the same seed gives the same
// first packets): at its rate a whole GiB would take minutes, and a rate
// per packet does not need the whole file.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	size := flag.String("size", "1GiB", "capture size per mix")
	tsharkSize := flag.String("tshark-size", "32MiB", "prefix tshark reads")
	flag.Parse()
	dir, err := os.MkdirTemp("", "plumb-bench-dns-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	tshark, _ := exec.LookPath("tshark")
	fmt.Printf("== builtin:dns on %s of generated DNS per mix, beside tshark (on a %s prefix)\n", *size, *tsharkSize)
	fmt.Printf("%-7s %12s %12s %9s %12s %14s %7s\n", "mix", "packets", "plumb pkt/s", "MB/s", "peak MiB", "tshark pkt/s", "ratio")
	for _, mix := range []string{"normal", "attack"} {
		full := filepath.Join(dir, mix+".pcap")
		prefix := filepath.Join(dir, mix+"-prefix.pcap")
		for _, f := range []struct{ path, size string }{{full, *size}, {prefix, *tsharkSize}} {
			if out, err := exec.Command(*plumb, "synth", "--out", f.path, "--mix", mix, "--size", f.size, "--seed", "11").CombinedOutput(); err != nil {
				log.Fatalf("synth: %v: %s", err, out)
			}
		}
		fi, _ := os.Stat(full)
		start := time.Now()
		cmd := exec.Command(*plumb, "dns", full)
		out, err := cmd.CombinedOutput()
		secs := time.Since(start).Seconds()
		if err != nil {
			log.Fatalf("plumb dns: %v: %s", err, out)
		}
		packets := number(`^(\d+) packets`, out)
		peak := float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024
		rate := packets / secs
		tsRate := 0.0
		if tshark != "" {
			pp := packetsOf(*plumb, prefix)
			t0 := time.Now()
			ts := exec.Command(tshark, "-r", prefix, "-n", "-o", "tcp.desegment_tcp_streams:TRUE", "-o", "tcp.reassemble_out_of_order:TRUE",
				"-o", "ip.defragment:TRUE", "-o", "ipv6.defragment:TRUE", "-Y", "dns", "-T", "fields",
				"-e", "frame.time_epoch", "-e", "ip.src", "-e", "ipv6.src", "-e", "ip.dst", "-e", "ipv6.dst",
				"-e", "udp.srcport", "-e", "tcp.srcport", "-e", "udp.dstport", "-e", "tcp.dstport",
				"-e", "dns.id", "-e", "dns.flags.response", "-e", "dns.flags.opcode", "-e", "dns.flags.rcode",
				"-e", "dns.count.queries", "-e", "dns.count.answers", "-e", "dns.count.auth_rr", "-e", "dns.count.add_rr",
				"-e", "dns.qry.name", "-e", "dns.qry.type", "-e", "dns.qry.class", "-e", "dns.rr.udp_payload_size")
			if err := ts.Run(); err != nil {
				log.Fatalf("tshark: %v", err)
			}
			tsRate = pp / time.Since(t0).Seconds()
		}
		ratio := "n/a"
		if tsRate > 0 {
			ratio = fmt.Sprintf("%.0fx", rate/tsRate)
		}
		fmt.Printf("%-7s %12.0f %12.0f %9.1f %12.1f %14.0f %7s\n", mix, packets, rate, float64(fi.Size())/1e6/secs, peak, tsRate, ratio)
	}
	fmt.Println("aim: at least 40x tshark on the normal mix; peak memory under 256 MiB on the attack mix")
}

func number(pattern string, out []byte) float64 {
	m := regexp.MustCompile(`(?m)` + pattern).FindSubmatch(out)
	if m == nil {
		log.Fatalf("no %q in %s", pattern, out)
	}
	n, _ := strconv.ParseFloat(string(m[1]), 64)
	return n
}

func packetsOf(plumb, path string) float64 {
	out, err := exec.Command(plumb, "dns", path).CombinedOutput()
	if err != nil {
		log.Fatalf("plumb dns %s: %v: %s", path, err, out)
	}
	return number(`^(\d+) packets`, out)
}

// Command dns measures the DNS stages on generated captures of the
// normal, the attack and the signed mix (plumb synth --mix), and on a
// real signed authoritative capture (real.go), beside tshark doing the
// same extraction in the same run:
//
//   - builtin:dns (`plumb dns -o`, the same code, writing every column of
//     the records as Arrow): packets/s, the ratio to tshark, peak memory;
//   - builtin:dnspairs (`plumb dns --pairs -o`): packets/s, peak memory;
//   - the lake: the records written by builtin:parquet, in bytes per
//     million messages, against the Arrow IPC block and the gzip'd pcap.
//
// Then, on the real capture and on the normal and signed mixes at 256
// MiB (real.go), it runs plumb dns with every section, with the question
// only and with no derived names, the build before the richer records,
// dnsjit parsing header and question and tshark, three alternated
// rounds each, and prints CPU seconds per GB, records bytes per million
// messages and the ratios the records are held to.
//
// tshark reads a prefix of each capture (the same seed gives the same
// first packets): at its rate a whole GiB would take minutes, and a rate
// per packet does not need the whole file.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	size := flag.String("size", "1GiB", "capture size per mix")
	realSize := flag.String("real-size", "256MiB", "size the real capture is replicated to")
	realOnly := flag.Bool("real-only", false, "measure the real capture only, not the generated mixes")
	baseline := flag.String("baseline", "", "an earlier plumb `binary` (built from git) measured beside on the real capture and the versus mixes")
	previousRev := flag.String("previous-rev", "15431a8^", "git `revision` of the build before the richer records (header and question only), built and measured beside for CPU and records bytes (empty: skip)")
	versusMixes := flag.String("versus-mixes", "normal,signed", "generated mixes measured as the real capture is, against dnsjit, tshark and the previous build (empty: none)")
	mixList := flag.String("mixes", "normal,attack,signed", "generated mixes to measure (plumb synth --mix)")
	tsharkSize := flag.String("tshark-size", "32MiB", "prefix tshark reads")
	lakeSize := flag.String("lake-size", "256MiB", "capture per mix the lake's bytes are measured on, a block's size: builtin:parquet holds a block's records whole, up to 1 GiB")
	toParquet := flag.String("parquet", "", "internal: write this Arrow file as Parquet and as ZSTD IPC and print the sizes")
	flag.Parse()
	if *toParquet != "" {
		fmt.Println(int64(parquetSize(*toParquet)), int64(zstdSize(*toParquet)))
		return
	}
	dir, err := os.MkdirTemp("", "plumb-bench-dns-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var mixes []string
	if *mixList != "" {
		mixes = strings.Split(*mixList, ",")
	}
	vo := versusOpts{plumb: *plumb, baseline: *baseline, tsharkSize: *tsharkSize}
	if *previousRev != "" {
		bin, err := benchkit.BuildRev(dir, *previousRev)
		if err != nil {
			fmt.Printf("(the previous build at %s is not measured: %v)\n", *previousRev, err)
		}
		vo.previous = bin
	}
	if *realOnly {
		realTraffic(vo, dir, *realSize)
		return
	}
	if len(mixes) > 0 {
		generated(*plumb, dir, mixes, *size, *lakeSize, *tsharkSize)
	}
	realTraffic(vo, dir, *realSize)
	for _, mix := range strings.Split(*versusMixes, ",") {
		if mix != "" {
			generatedVersus(vo, dir, mix, *realSize)
		}
	}
}

// generated measures builtin:dns and builtin:dnspairs on size of each
// generated mix beside tshark, and the lake's bytes.
func generated(plumb, dir string, mixes []string, size, lakeSize, tsharkSize string) {
	tshark, _ := exec.LookPath("tshark")
	fmt.Printf("== builtin:dns and builtin:dnspairs on %s of generated DNS per mix, beside tshark (on a %s prefix)\n", size, tsharkSize)
	fmt.Printf("%-7s %10s %10s %6s %8s %12s %6s %11s %8s | %12s %12s %10s\n", "mix", "packets", "dns pkt/s", "MB/s", "peak MiB",
		"tshark pkt/s", "ratio", "pairs pkt/s", "peak MiB", "dns CPU s/GB", "tshark CPU/GB", "CPU ratio")
	type sizes struct{ messages, pcap, gz, arrow, zstd, parquet float64 }
	lake := map[string]sizes{}
	for _, mix := range mixes {
		full := filepath.Join(dir, mix+".pcap")
		prefix := filepath.Join(dir, mix+"-prefix.pcap")
		synth(plumb, full, mix, size)
		synth(plumb, prefix, mix, tsharkSize)
		fi, _ := os.Stat(full)
		records := filepath.Join(dir, mix+".arrow")
		out, secs, peak, cpu := run(plumb, "dns", "-o", records, full)
		packets := number(`^(\d+) packets`, out)
		messages := number(`packets, (\d+) DNS messages`, out)
		rate := packets / secs
		_, psecs, ppeak, _ := run(plumb, "dns", "--pairs", "-o", filepath.Join(dir, mix+".pairs.arrow"), full)
		os.Remove(filepath.Join(dir, mix+".pairs.arrow"))
		tsRate, tsCPU := 0.0, 0.0
		if tshark != "" {
			pp := number(`^(\d+) packets`, first(run(plumb, "dns", prefix)))
			t0 := time.Now()
			ts := exec.Command(tshark, "-r", prefix, "-n", "-o", "tcp.desegment_tcp_streams:TRUE", "-o", "tcp.reassemble_out_of_order:TRUE",
				"-o", "ip.defragment:TRUE", "-o", "ipv6.defragment:TRUE", "-Y", "dns", "-T", "fields",
				"-e", "frame.time_epoch", "-e", "ip.src", "-e", "ipv6.src", "-e", "ip.dst", "-e", "ipv6.dst",
				"-e", "udp.srcport", "-e", "tcp.srcport", "-e", "udp.dstport", "-e", "tcp.dstport",
				"-e", "dns.id", "-e", "dns.flags.response", "-e", "dns.flags.opcode", "-e", "dns.flags.rcode",
				"-e", "dns.count.queries", "-e", "dns.count.answers", "-e", "dns.count.auth_rr", "-e", "dns.count.add_rr",
				"-e", "dns.qry.name", "-e", "dns.qry.type", "-e", "dns.qry.class", "-e", "dns.rr.udp_payload_size",
				"-e", "dns.a", "-e", "dns.aaaa", "-e", "dns.cname", "-e", "dns.ns", "-e", "dns.resp.ttl",
				"-e", "dns.opt.client.addr4", "-e", "dns.opt.client.netmask", "-e", "dns.opt.code")
			if err := ts.Run(); err != nil {
				log.Fatalf("tshark: %v", err)
			}
			tsRate = pp / time.Since(t0).Seconds()
			pfi, _ := os.Stat(prefix)
			tsCPU = (ts.ProcessState.UserTime() + ts.ProcessState.SystemTime()).Seconds() / (float64(pfi.Size()) / 1e9)
		}
		ratio := "n/a"
		if tsRate > 0 {
			ratio = fmt.Sprintf("%.0fx", rate/tsRate)
		}
		dnsCPU := cpu / (float64(fi.Size()) / 1e9)
		cpuRatio := "n/a"
		if tsCPU > 0 {
			cpuRatio = fmt.Sprintf("%.0fx", tsCPU/dnsCPU)
		}
		fmt.Printf("%-7s %10.0f %10.0f %6.1f %8.1f %12.0f %6s %11.0f %8.1f | %12.1f %12.1f %10s\n", mix, packets, rate,
			float64(fi.Size())/1e6/secs, peak, tsRate, ratio, packets/psecs, ppeak, dnsCPU, tsCPU, cpuRatio)
		os.Remove(full)
		os.Remove(records)
		// The lake's bytes, on a block's worth of the same mix (its first
		// packets are the same).
		synth(plumb, full, mix, lakeSize)
		out, _, _, _ = run(plumb, "dns", "-o", records, full)
		messages = number(`packets, (\d+) DNS messages`, out)
		lfi, _ := os.Stat(full)
		pq, zs := parquetChild(records)
		lake[mix] = sizes{messages, float64(lfi.Size()), gzipSize(full), fileSize(records), zs, pq}
		os.Remove(full)
		os.Remove(records)
	}
	fmt.Println("aim: builtin:dns at least 30x tshark on the normal mix (20x on the signed); peak memory under 256 MiB on the attack mix")
	fmt.Println("(wall rates depend on the cores free while each runs; CPU seconds per GB of capture do not: plumb uses")
	fmt.Println(" up to three goroutines, tshark one thread, so the CPU ratio is the lower, steadier figure)")
	fmt.Printf("\n== the lake: bytes per million DNS messages, on %s of each mix (a block)\n", lakeSize)
	fmt.Printf("%-7s %11s %11s %11s %11s %11s %11s %15s %15s %13s\n", "mix", "messages", "pcap", "pcap.gz", "arrow", "arrow zstd", "parquet",
		"parquet/arrow", "parquet/zstd", "parquet/gz")
	for _, mix := range mixes {
		s := lake[mix]
		per := func(b float64) string { return fmt.Sprintf("%.1f MB", b/s.messages*1e6/1e6) }
		fmt.Printf("%-7s %11.0f %11s %11s %11s %11s %11s %15.2f %15.2f %13.2f\n", mix, s.messages, per(s.pcap), per(s.gz), per(s.arrow),
			per(s.zstd), per(s.parquet), s.parquet/s.arrow, s.parquet/s.zstd, s.parquet/s.gz)
	}
	fmt.Println("aim: parquet at most 0.5x the Arrow IPC blocks (arrow: the blocks as stored, ZSTD at the records' level, fast;")
	fmt.Println("arrow zstd: the same batches at ?zstd=small, SpeedBetterCompression)")
}

// synth writes size of a generated mix to path, always from the same
// seed: captures of one mix share their first packets, so a prefix
// measures what the whole does.
func synth(plumb, path, mix, size string) {
	if out, err := exec.Command(plumb, "synth", "--out", path, "--mix", mix, "--size", size, "--seed", "11").CombinedOutput(); err != nil {
		log.Fatalf("synth --mix %s --size %s: %v: %s", mix, size, err, out)
	}
}

// run runs plumb and returns its output, wall seconds, peak RSS (MiB)
// and CPU seconds.
func run(plumb string, args ...string) ([]byte, float64, float64, float64) {
	start := time.Now()
	cmd := exec.Command(plumb, args...)
	out, err := cmd.CombinedOutput()
	secs := time.Since(start).Seconds()
	if err != nil {
		log.Fatalf("plumb %v: %v: %s", args, err, out)
	}
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return out, secs, float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024, cpu
}

func first(out []byte, _, _, _ float64) []byte { return out }

func fileSize(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		log.Fatal(err)
	}
	return float64(fi.Size())
}

// gzipSize is the size of the capture as `gzip -6` (the default) writes it.
func gzipSize(path string) float64 {
	cmd := exec.Command("gzip", "-6", "-c", path)
	var n countWriter
	cmd.Stdout = &n
	if err := cmd.Run(); err != nil {
		log.Fatalf("gzip: %v", err)
	}
	return float64(n)
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// parquetChild runs parquetSize and zstdSize in a child process: Linux hands a
// process's peak RSS to the children it starts after (exec records the
// parent's high-water mark in the child's rusage), so work done in the
// bench itself would show in the peaks measured of plumb.
func parquetChild(records string) (parquet, zstd float64) {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	out, err := exec.Command(self, "-parquet", records).Output()
	if err != nil {
		log.Fatalf("parquet of %s: %v", records, err)
	}
	if _, err := fmt.Sscan(string(out), &parquet, &zstd); err != nil {
		log.Fatalf("parquet of %s: %q: %v", records, out, err)
	}
	return parquet, zstd
}

// zstdSize is the size of an Arrow file's batches written again as an
// Arrow IPC file with ZSTD, arrow-go's other codec.
func zstdSize(records string) float64 {
	f, err := os.Open(records)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	r, err := ipc.NewFileReader(f)
	if err != nil {
		log.Fatalf("%s: %v", records, err)
	}
	defer r.Close()
	var out countWriter
	w, err := ipc.NewFileWriter(&out, ipc.WithSchema(r.Schema()), ipc.WithZstdLevel(7))
	if err != nil {
		log.Fatal(err)
	}
	for i := range r.NumRecords() {
		rec, err := r.RecordBatch(i)
		if err != nil {
			log.Fatalf("%s: %v", records, err)
		}
		if err := w.Write(rec); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}
	return float64(out)
}

// parquetSize runs builtin:parquet on an Arrow file, as the lake stage
// does, and returns the Parquet file's size.
func parquetSize(records string) float64 {
	f, err := os.Open(records)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	var out countWriter
	p := &builtin.Parquet{RowGroupRows: builtin.DefaultRowGroupRows}
	if err := p.Run(context.Background(), stage.Input{}, f, &out); err != nil {
		log.Fatalf("builtin:parquet on %s: %v", records, err)
	}
	return float64(out)
}

func number(pattern string, out []byte) float64 {
	m := regexp.MustCompile(`(?m)` + pattern).FindSubmatch(out)
	if m == nil {
		log.Fatalf("no %q in %s", pattern, out)
	}
	n, _ := strconv.ParseFloat(string(m[1]), 64)
	return n
}

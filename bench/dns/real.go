package main

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/pipeline"
)

// realTraffic measures builtin:dns on real traffic: zeek's capture of a
// signed authoritative server (DNSSEC signatures in most responses, up
// to 13 records each, TCP and EDNS client subnet; testdata/pcaps, see
// PROVENANCE.tsv) replicated to size, against dnsjit parsing header and
// question (bench/dns/dnsjit-hq.lua) and tshark on a prefix, and beside
// an earlier plumb binary (baseline, when set) doing the same. Each is
// run three times, alternated, and the median CPU seconds per GB printed.
func realTraffic(plumb, baseline, dir, size, tsharkSize string) {
	n, err := pipeline.ParseSize(size)
	if err != nil {
		log.Fatal(err)
	}
	pn, err := pipeline.ParseSize(tsharkSize)
	if err != nil {
		log.Fatal(err)
	}
	src := "testdata/pcaps/zeek__dns-edns-ecs.pcap"
	full, prefix := filepath.Join(dir, "real.pcap"), filepath.Join(dir, "real-prefix.pcap")
	if err := benchkit.Replicate(src, full, n); err != nil {
		log.Fatal(err)
	}
	if err := benchkit.Replicate(src, prefix, pn); err != nil {
		log.Fatal(err)
	}
	gb := fileSize(full) / 1e9
	fmt.Printf("\n== real traffic: %s (a signed authoritative server) replicated to %s\n", filepath.Base(src), size)
	dnsjit, _ := exec.LookPath("dnsjit")
	tshark, _ := exec.LookPath("tshark")
	for tool, path := range map[string]string{"dnsjit": dnsjit, "tshark": tshark} {
		if path == "" {
			fmt.Printf("%s is not installed (apt-get install %s): its rows and ratios are left out\n", tool, tool)
		}
	}
	type measure struct {
		name string
		cpu  func() float64 // CPU seconds per GB
		out  string         // the records written, if any
	}
	records := func(name, bin, sections, names string) measure {
		out := filepath.Join(dir, "real-"+filepath.Base(bin)+"-"+sections+"-"+names+".arrow")
		return measure{name: name, out: out, cpu: func() float64 {
			_, _, _, cpu := run(bin, "dns", "--sections", sections, "--names", names, "-o", out, full)
			return cpu / gb
		}}
	}
	ms := []measure{records("plumb dns, every section", plumb, "all", "all"), records("plumb dns --sections question", plumb, "question", "all"),
		records("  and --names none", plumb, "question", "none")}
	if baseline != "" {
		ms = append(ms, records("baseline, every section", baseline, "all", "all"), records("baseline --sections question", baseline, "question", "all"))
	}
	dnsjitAt := len(ms)
	if dnsjit != "" {
		ms = append(ms, measure{name: "dnsjit, header and question", cpu: func() float64 {
			cmd := exec.Command(dnsjit, "bench/dns/dnsjit-hq.lua", full)
			if out, err := cmd.CombinedOutput(); err != nil {
				log.Fatalf("dnsjit: %v: %s", err, out)
			}
			return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds() / gb
		}})
	}
	if tshark != "" {
		ms = append(ms, measure{name: "tshark, same fields (prefix)", cpu: func() float64 {
			cmd := exec.Command(tshark, "-r", prefix, "-n", "-o", "tcp.desegment_tcp_streams:TRUE", "-Y", "dns", "-T", "fields",
				"-e", "frame.time_epoch", "-e", "dns.id", "-e", "dns.flags.response", "-e", "dns.qry.name", "-e", "dns.resp.name",
				"-e", "dns.resp.type", "-e", "dns.resp.ttl", "-e", "dns.a", "-e", "dns.aaaa", "-e", "dns.ns", "-e", "dns.rrsig.signature")
			if err := cmd.Run(); err != nil {
				log.Fatalf("tshark: %v", err)
			}
			return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds() / (fileSize(prefix) / 1e9)
		}})
	}
	runs := make([][]float64, len(ms))
	var loads []string
	for range 3 {
		load, _ := os.ReadFile("/proc/loadavg")
		loads = append(loads, string(load[:14]))
		for i, m := range ms {
			runs[i] = append(runs[i], m.cpu())
		}
	}
	messages := number(`packets, (\d+) DNS messages`, first(run(plumb, "dns", full)))
	median := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	fmt.Printf("%-34s %14s %24s %18s\n", "", "CPU s/GB (med)", "three runs", "records MB/M msgs")
	for i, m := range ms {
		size := ""
		if m.out != "" {
			size = fmt.Sprintf("%.1f", fileSize(m.out)/messages)
		}
		fmt.Printf("%-34s %14.2f %8.2f %7.2f %7.2f %18s\n", m.name, median(runs[i]), runs[i][0], runs[i][1], runs[i][2], size)
	}
	if baseline != "" {
		fmt.Printf("this build / baseline: every section %.2fx CPU, %.2fx bytes; question %.2fx CPU, %.2fx bytes\n",
			median(runs[0])/median(runs[3]), fileSize(ms[0].out)/fileSize(ms[3].out), median(runs[1])/median(runs[4]), fileSize(ms[1].out)/fileSize(ms[4].out))
	}
	if dnsjit != "" {
		j := median(runs[dnsjitAt])
		fmt.Printf("every section / dnsjit: %.2fx CPU (aim <= 1.5x); question / dnsjit: %.2fx (aim <= 1.0x); question, no derived names / dnsjit: %.2fx\n",
			median(runs[0])/j, median(runs[1])/j, median(runs[2])/j)
	}
	if tshark != "" {
		ti := len(ms) - 1
		fmt.Printf("tshark / every section: %.1fx (aim >= 20x); tshark / question: %.1fx (aim >= 30x)\n",
			median(runs[ti])/median(runs[0]), median(runs[ti])/median(runs[1]))
	}
	fmt.Printf("(loadavg before each round: %v; dnsjit reassembles neither TCP nor fragments and writes nothing)\n", loads)
	os.Remove(full)
	os.Remove(prefix)
}

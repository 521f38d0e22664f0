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

// versusRuns is how many alternated rounds versus runs: each figure it
// prints is their median, beside all of them.
const versusRuns = 3

// realTraffic measures builtin:dns on real traffic: zeek's capture of a
// signed authoritative server (DNSSEC signatures in most responses, up
// to 13 records each, TCP and EDNS client subnet; testdata/pcaps, see
// PROVENANCE.tsv) replicated to size, as versus does.
func realTraffic(o versusOpts, dir, size string) {
	n, err := pipeline.ParseSize(size)
	if err != nil {
		log.Fatal(err)
	}
	pn, err := pipeline.ParseSize(o.tsharkSize)
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
	versus(o, dir, fmt.Sprintf("real traffic: %s (a signed authoritative server) replicated to %s", filepath.Base(src), size), full, prefix)
}

// generatedVersus measures a generated mix as versus does, at size.
func generatedVersus(o versusOpts, dir, mix, size string) {
	full, prefix := filepath.Join(dir, mix+"-versus.pcap"), filepath.Join(dir, mix+"-versus-prefix.pcap")
	synth(o.plumb, full, mix, size)
	synth(o.plumb, prefix, mix, o.tsharkSize)
	versus(o, dir, fmt.Sprintf("the %s mix (plumb synth --mix %s), %s", mix, mix, size), full, prefix)
}

// versusOpts are what versus measures beside this build.
type versusOpts struct {
	plumb      string
	baseline   string // an earlier binary, run as this one is ("" for none)
	previous   string // the build before the richer records, header and question only ("" for none)
	tsharkSize string
}

// versus measures builtin:dns (plumb dns) on a capture with every
// section, with the question only, with no derived names, and with
// every section and the question only at --zstd small and balanced,
// against dnsjit parsing header and question (bench/dns/dnsjit-hq.lua)
// and tshark on a prefix, beside an earlier binary doing the same
// (o.baseline) and the build before the richer records (o.previous),
// which wrote header and question only. Each is run versusRuns times,
// alternated; the median CPU seconds per GB is printed with every run,
// and the records' bytes per million messages.
func versus(o versusOpts, dir, title, full, prefix string) {
	gb := fileSize(full) / 1e9
	fmt.Printf("\n== %s\n", title)
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
	files := 0
	records := func(name, bin string, args ...string) measure {
		files++
		out := filepath.Join(dir, fmt.Sprintf("versus-%d.arrow", files))
		return measure{name: name, out: out, cpu: func() float64 {
			_, _, _, cpu := run(bin, append(append([]string{"dns"}, args...), "-o", out, full)...)
			return cpu / gb
		}}
	}
	const all, question, noNames, allSmall, questionSmall, allBalanced, questionBalanced, base, baseQuestion = 0, 1, 2, 3, 4, 5, 6, 7, 8
	ms := []measure{records("plumb dns, every section", o.plumb, "--sections", "all"), records("plumb dns --sections question", o.plumb, "--sections", "question"),
		records("  and --names none", o.plumb, "--sections", "question", "--names", "none"),
		records("every section, --zstd small", o.plumb, "--sections", "all", "--zstd", "small"),
		records("question, --zstd small", o.plumb, "--sections", "question", "--zstd", "small"),
		records("every section, --zstd balanced", o.plumb, "--sections", "all", "--zstd", "balanced"),
		records("question, --zstd balanced", o.plumb, "--sections", "question", "--zstd", "balanced")}
	if o.baseline != "" {
		ms = append(ms, records("baseline, every section", o.baseline, "--sections", "all"), records("baseline --sections question", o.baseline, "--sections", "question"))
	}
	previousAt := len(ms)
	if o.previous != "" {
		ms = append(ms, records("previous build (header, question)", o.previous))
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
	for range versusRuns {
		load, _ := os.ReadFile("/proc/loadavg")
		loads = append(loads, string(load[:14]))
		for i, m := range ms {
			runs[i] = append(runs[i], m.cpu())
		}
	}
	messages := number(`packets, (\d+) DNS messages`, first(run(o.plumb, "dns", full)))
	median := func(i int) float64 { s := slices.Clone(runs[i]); slices.Sort(s); return s[len(s)/2] }
	perM := func(i int) float64 { return fileSize(ms[i].out) / messages }
	fmt.Printf("%-34s %14s %24s %18s\n", "", "CPU s/GB (med)", "runs", "records MB/M msgs")
	for i, m := range ms {
		size := ""
		if m.out != "" {
			size = fmt.Sprintf("%.1f", perM(i))
		}
		fmt.Printf("%-34s %14.2f %24s %18s\n", m.name, median(i), fmt.Sprintf("%.2f", runs[i]), size)
	}
	if o.baseline != "" {
		fmt.Printf("this build / baseline: every section %.2fx CPU, %.2fx bytes; question %.2fx CPU, %.2fx bytes\n",
			median(all)/median(base), perM(all)/perM(base), median(question)/median(baseQuestion), perM(question)/perM(baseQuestion))
	}
	if o.previous != "" {
		p := previousAt
		fmt.Printf("records bytes / previous build: every section %.2fx (aim <= 1.5x), question %.2fx (aim <= 1.0x); "+
			"question CPU / previous build: %.2fx (aim <= 1.0x), no derived names %.2fx\n",
			perM(all)/perM(p), perM(question)/perM(p), median(question)/median(p), median(noNames)/median(p))
		for _, l := range []struct {
			name            string
			every, question int
		}{{"small", allSmall, questionSmall}, {"balanced", allBalanced, questionBalanced}} {
			fmt.Printf("at --zstd %s: records bytes / previous build: every section %.2fx, question %.2fx; CPU / the default level (fast): every section %.2fx, question %.2fx\n",
				l.name, perM(l.every)/perM(p), perM(l.question)/perM(p), median(l.every)/median(all), median(l.question)/median(question))
		}
	}
	if dnsjit != "" {
		j := median(dnsjitAt)
		fmt.Printf("every section / dnsjit: %.2fx CPU (aim <= 1.5x); question / dnsjit: %.2fx (aim <= 1.0x); question, no derived names / dnsjit: %.2fx\n",
			median(all)/j, median(question)/j, median(noNames)/j)
	}
	if tshark != "" {
		ti := len(ms) - 1
		fmt.Printf("tshark / every section: %.1fx (aim >= 20x); tshark / question: %.1fx (aim >= 30x)\n",
			median(ti)/median(all), median(ti)/median(question))
	}
	fmt.Printf("(loadavg before each round: %v; dnsjit reassembles neither TCP nor fragments and writes nothing)\n", loads)
	os.Remove(full)
	os.Remove(prefix)
	for _, m := range ms {
		if m.out != "" {
			os.Remove(m.out)
		}
	}
}

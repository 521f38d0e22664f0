// Command anon measures builtin:anonymize beside builtin:decode on the same
// snappy blocks of a generated capture, in the same run: MB/s of capture
// and CPU seconds per GiB (which does not depend on how many cores are
// free), and the ratio of the two. Anonymizing decodes too, so the ratio
// is what rewriting the addresses adds.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary (for plumb synth)")
	size := flag.String("size", "256MiB", "capture size")
	rounds := flag.Int("rounds", 3, "runs of each")
	flag.Parse()
	dir, err := os.MkdirTemp("", "plumb-bench-anon-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	capture := filepath.Join(dir, "synth.pcap.sz")
	if out, err := exec.Command(*plumb, "synth", "--out", capture, "--size", *size, "--seed", "5").CombinedOutput(); err != nil {
		log.Fatalf("synth: %v: %s", err, out)
	}
	raw := pcapBytes(capture)
	os.WriteFile(filepath.Join(dir, "k"), []byte(strings.Repeat("a7", 32)), 0o600)
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	builtin.RegisterAnonymize(reg, dir)
	stage := func(name, query string) stage.Builtin {
		args, _ := url.ParseQuery(query)
		b, err := reg.New(name, args)
		if err != nil {
			log.Fatal(err)
		}
		return b
	}
	// A stage is made anew for each round, so each starts with no
	// address cached (a running stage keeps its cache from block to block).
	runs := []struct{ name, builtin, query string }{
		{"decode", "decode", ""},
		{"anonymize cryptopan", "anonymize", "key=k&codec=none"},
		{"anonymize cryptopan, rdata", "anonymize", "key=k&codec=none&rdata=true"},
		{"anonymize truncate", "anonymize", "method=truncate&codec=none"},
	}
	gib := float64(raw) / (1 << 30)
	fmt.Printf("== builtin:anonymize beside builtin:decode: %s of generated DNS (%.0f MB decoded), snappy blocks in, pcap out\n", *size, float64(raw)/1e6)
	fmt.Printf("%-28s %6s %9s %11s %9s\n", "stage", "round", "MB/s", "CPU s/GiB", "CPU ratio")
	var base float64
	for _, r := range runs {
		for round := 1; round <= *rounds; round++ {
			wall, cpu := measure(stage(r.builtin, r.query), capture)
			cpuPerGiB := cpu / gib
			if r.name == "decode" && round == *rounds {
				base = cpuPerGiB
			}
			ratio := "-"
			if base > 0 && r.name != "decode" {
				ratio = fmt.Sprintf("%.2fx", cpuPerGiB/base)
			}
			fmt.Printf("%-28s %6d %9.0f %11.2f %9s\n", r.name, round, float64(raw)/1e6/wall, cpuPerGiB, ratio)
		}
	}
	fmt.Println("aim: anonymize at most 2x decode's CPU (ratio against decode's last round)")
}

// measure runs b over the file once: wall seconds and CPU seconds (user
// and system) of this process.
func measure(b stage.Builtin, path string) (float64, float64) {
	f, err := os.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	before := cpuSeconds()
	start := time.Now()
	if err := b.Run(context.Background(), stage.Input{}, f, io.Discard); err != nil {
		log.Fatal(err)
	}
	return time.Since(start).Seconds(), cpuSeconds() - before
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// pcapBytes is the decoded size of a compressed capture.
func pcapBytes(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	dec, err := codecs.Snappy.NewReader(f)
	if err != nil {
		log.Fatal(err)
	}
	defer dec.Close()
	n, err := io.Copy(io.Discard, dec)
	if err != nil {
		log.Fatal(err)
	}
	return n
}

// Command capture measures live capture on a veth pair into a network
// namespace it makes: `plumb agent --interface` (shipping to a local
// server) beside `tcpdump -w FILE` on the same traffic, with the same
// filter and the same ring size, at rising packet rates. For each it
// prints the packets captured and dropped by the kernel, and the CPU
// microseconds per packet (which do not depend on how many cores are
// free), and then the rate at which each first dropped. It needs root.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
)

const (
	ns, outer, inner = "plumbbench", "pbo0", "pbi0"
	filterExpr       = "udp dst port 53"
)

func main() {
	if os.Getenv("PLUMB_BENCH_SENDER") != "" {
		sender()
		return
	}
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	rates := flag.String("rates", "20000,50000,100000,200000,400000", "packets per second to try")
	secs := flag.Duration("duration", 3*time.Second, "traffic at each rate")
	ring := flag.Int("ring-mib", 8, "ring buffer of each, MiB (tcpdump -B, plumb --buffer-size)")
	flag.Parse()
	if os.Geteuid() != 0 {
		log.Fatal("capture bench needs root (a network namespace and AF_PACKET)")
	}
	dir, err := os.MkdirTemp("", "plumb-bench-capture-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	setUp()
	defer tearDown()
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		log.Fatal("tcpdump is needed as the baseline")
	}
	fmt.Printf("== live capture on a veth, filter %q, ring %d MiB each, %s per rate\n", filterExpr, *ring, *secs)
	fmt.Printf("%9s %9s | %10s %9s %8s | %10s %9s %8s\n", "rate", "sent", "plumb got", "dropped", "CPU µs/p", "tcpdump", "dropped", "CPU µs/p")
	firstDrop := map[string]string{}
	for _, r := range strings.Split(*rates, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil {
			log.Fatal(err)
		}
		p := runPlumb(*plumb, dir, rate, *secs, *ring)
		t := runTcpdump(tcpdump, dir, rate, *secs, *ring)
		fmt.Printf("%9d %9d | %10d %9d %8.2f | %10d %9d %8.2f\n", rate, p.sent, p.got, p.dropped, p.cpuPerPacket(), t.got, t.dropped, t.cpuPerPacket())
		for name, m := range map[string]measure{"plumb": p, "tcpdump": t} {
			if _, ok := firstDrop[name]; !ok && float64(m.dropped) > 0.001*float64(m.sent) {
				firstDrop[name] = fmt.Sprintf("%d pps", rate)
			}
		}
	}
	for _, name := range []string{"plumb", "tcpdump"} {
		fmt.Printf("%s first dropped more than 0.1%% at: %s\n", name, orNone(firstDrop[name]))
	}
	fmt.Println("aim: plumb captures at least as much as tcpdump -w at every rate (ratio ≥ 1)")
}

func orNone(s string) string {
	if s == "" {
		return "none of the rates tried"
	}
	return s
}

type measure struct {
	sent, got, dropped int
	cpu                time.Duration
}

func (m measure) cpuPerPacket() float64 {
	if m.got == 0 {
		return 0
	}
	return float64(m.cpu.Microseconds()) / float64(m.got)
}

func run(name string, args ...string) {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		log.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func setUp() {
	tearDown()
	run("ip", "netns", "add", ns)
	run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
	run("ip", "link", "set", inner, "netns", ns)
	run("ip", "addr", "add", "198.18.0.1/24", "dev", outer)
	run("ip", "link", "set", outer, "up")
	run("ip", "netns", "exec", ns, "ip", "addr", "add", "198.18.0.2/24", "dev", inner)
	run("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
	mac, err := os.ReadFile("/sys/class/net/" + outer + "/address")
	if err != nil {
		log.Fatal(err)
	}
	run("ip", "netns", "exec", ns, "ip", "neigh", "replace", "198.18.0.1", "lladdr", strings.TrimSpace(string(mac)), "dev", inner, "nud", "permanent")
}

func tearDown() {
	exec.Command("ip", "link", "del", outer).Run()
	exec.Command("ip", "netns", "del", ns).Run()
}

// send runs this program in the namespace as the sender and returns how
// many datagrams it sent.
func send(rate int, d time.Duration) int {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self)
	cmd.Env = append(os.Environ(), "PLUMB_BENCH_SENDER=1", fmt.Sprintf("RATE=%d", rate), "SECS="+d.String())
	out, err := cmd.Output()
	if err != nil {
		log.Fatalf("sender: %v", err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

// sender sends DNS-sized datagrams to port 53 at RATE per second for SECS.
func sender() {
	rate, _ := strconv.Atoi(os.Getenv("RATE"))
	d, _ := time.ParseDuration(os.Getenv("SECS"))
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP("198.18.0.1"), Port: 53})
	if err != nil {
		log.Fatal(err)
	}
	msg := make([]byte, 80) // a DNS query's size
	start := time.Now()
	sent := 0
	for {
		el := time.Since(start)
		if el >= d {
			break
		}
		for due := int(el.Seconds() * float64(rate)); sent < due; sent++ {
			msg[0], msg[1] = byte(sent>>8), byte(sent)
			c.Write(msg)
		}
		time.Sleep(200 * time.Microsecond)
	}
	fmt.Println(sent)
}

var capturedLine = regexp.MustCompile(`(\d+) packets captured, (\d+) packets dropped by kernel`)

func runPlumb(plumb, dir string, rate int, d time.Duration, ring int) measure {
	srv, err := benchkit.StartServer(plumb, filepath.Join(dir, fmt.Sprint("srv", rate)))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	agent := exec.Command(plumb, "agent", "--server", srv.Addr, "--site", "bench", "--new-instance",
		"--spool", filepath.Join(dir, fmt.Sprint("spool", rate)), "--block-size", "32MiB",
		"--interface", outer, "--filter", filterExpr, "--buffer-size", fmt.Sprintf("%dMiB", ring))
	stderr, _ := agent.StderrPipe()
	if err := agent.Start(); err != nil {
		log.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitFor(lines, "live capture started")
	sent := send(rate, d)
	time.Sleep(time.Second)
	agent.Process.Signal(syscall.SIGTERM)
	var m measure
	m.sent = sent
	for l := range lines {
		if g := capturedLine.FindStringSubmatch(l); g != nil {
			m.got, _ = strconv.Atoi(g[1])
			m.dropped, _ = strconv.Atoi(g[2])
		}
	}
	agent.Wait()
	m.cpu = cpuOf(agent)
	return m
}

func runTcpdump(tcpdump, dir string, rate int, d time.Duration, ring int) measure {
	cmd := exec.Command(tcpdump, "-i", outer, "-n", "-s", "0", "-B", fmt.Sprint(ring*1024), "-Z", "root",
		"-w", filepath.Join(dir, fmt.Sprint("tcpdump", rate, ".pcap")), filterExpr)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitFor(lines, "listening on")
	sent := send(rate, d)
	time.Sleep(time.Second)
	cmd.Process.Signal(syscall.SIGINT)
	m := measure{sent: sent}
	num := regexp.MustCompile(`^(\d+) packets (captured|dropped by kernel)`)
	for l := range lines {
		if g := num.FindStringSubmatch(l); g != nil {
			n, _ := strconv.Atoi(g[1])
			if g[2] == "captured" {
				m.got = n
			} else {
				m.dropped = n
			}
		}
	}
	cmd.Wait()
	m.cpu = cpuOf(cmd)
	return m
}

func waitFor(lines <-chan string, what string) {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				log.Fatalf("the capture ended before %q", what)
			}
			if strings.Contains(l, what) {
				return
			}
		case <-timeout:
			log.Fatalf("no %q within 30s", what)
		}
	}
}

func cpuOf(c *exec.Cmd) time.Duration {
	ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

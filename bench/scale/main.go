// Command scale fills a plumb server with N tiny blocks from S sites
// through real DoPut (several in flight), with a job of three stages
// including an hourly window stage over all of it and a consumer group
// acking every block, and reports at each N of -points: put and ack
// p50/p99 under a fixed load, list and stats latency, restart-to-ready
// time, the server's RSS, metadata bytes per block, the window firing
// delay and the rate of the fill, with each figure's ratio to the first
// point. Then it imports -agent-files small capture files with `plumb
// import` and reports the spool's state bytes written per block.
//
// The fill runs as fast as the server takes blocks (-inflight uploads
// at once), so its latencies are only the in-flight count over the
// rate: they say how fast the server is, which the rate says better.
// Agents do not wait for the server before they cut the next block, so
// the latencies are taken after each fill, in a probe of -probe seconds
// that puts at a fixed rate, the same at every point: half the first
// fill's rate unless -probe-rate says. A put's latency runs from when it
// was due, not from when it began, so a slow put also counts against the
// puts that waited for it (no coordinated omission). The probe's puts
// add to the history: at the first point they about double it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/pcap"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	sites := flag.Int("sites", 20, "sites (instances) shipping")
	inflight := flag.Int("inflight", 16, "uploads in flight")
	points := flag.String("points", "10000,100000,1000000", "block counts to report at")
	huge := flag.Bool("huge", false, "also report at 10,000,000 blocks")
	keep := flag.Bool("keep", false, "keep the server's data directory, for a look inside")
	agentFiles := flag.String("agent-files", "10000,100000", "capture file counts `plumb import` backfills, each to a queue and spool of its own (empty: none)")
	probe := flag.Duration("probe", 30*time.Second, "how long each point's fixed-rate probe puts")
	probeRate := flag.Float64("probe-rate", 0, "puts per second of the probe (0: half the first fill's rate)")
	flag.Parse()
	var ns []int
	for _, p := range strings.Split(*points, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			log.Fatalf("-points: %v", err)
		}
		ns = append(ns, n)
	}
	if *huge {
		ns = append(ns, 10_000_000)
	}
	dir, err := os.MkdirTemp("", "plumb-bench-scale-")
	if err != nil {
		log.Fatal(err)
	}
	if *keep {
		fmt.Println("data kept in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	b := &bench{plumb: *plumb, dir: dir, sites: *sites, inflight: *inflight}
	b.start()
	defer func() { b.srv.Stop() }()
	b.submit()
	fmt.Printf("== scale: tiny blocks from %d sites through DoPut, a job of three stages (an hourly window over every block), a consumer group acking what it has read\n", *sites)
	fmt.Printf("   filled with %d uploads in flight (fill puts/s); put and ack latencies from a %s probe at a fixed rate after each fill\n", *inflight, *probe)
	var first row
	for i, n := range ns {
		r := b.fill(n)
		if i == 0 && *probeRate == 0 {
			*probeRate = r.rate / 2
		}
		if i == 0 {
			fmt.Printf("   probe rate: %.0f puts/s\n", *probeRate)
			fmt.Printf("%10s %9s %9s %9s %9s %9s %9s %10s %9s %9s %11s %12s %10s %11s %11s\n", "blocks", "put p50", "put p99", "ack p50", "ack p99", "list", "stats", "restart", "RSS MiB", "anon MiB", "meta B/blk", "window delay", "fill put/s", "writes/put", "write ms/put")
		}
		b.probe(&r, *probeRate, *probe)
		r.restart = b.restart()
		if i == 0 {
			first = r
		}
		r.print(first, i > 0)
	}
	if *agentFiles == "" {
		return
	}
	fmt.Printf("\n== agent: plumb import of small capture files (one block each), spool state bytes written per block\n")
	fmt.Printf("%10s %10s %12s %9s\n", "files", "blocks", "state B/blk", "ratio")
	var firstPer float64
	for i, f := range strings.Split(*agentFiles, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			log.Fatalf("-agent-files: %v", err)
		}
		blocks, per := b.agentImport(n)
		if i == 0 {
			firstPer = per
		}
		fmt.Printf("%10d %10d %12.0f %8.2fx\n", n, blocks, per, per/firstPer)
	}
}

// agentImport writes n capture files of one packet each, five minutes
// apart (a backfill of rotated 5-minute captures), and backfills
// them with `plumb import` to a queue of their own, with a fresh spool;
// it returns the blocks imported and the spool's state bytes written per
// block, as the import's last line says.
func (b *bench) agentImport(n int) (int, float64) {
	dir := filepath.Join(b.dir, fmt.Sprintf("agent-%d", n))
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o755); err != nil {
		log.Fatal(err)
	}
	pkt := udpPacket()
	files := make([]string, n)
	for i := range n {
		files[i] = filepath.Join(dir, "files", fmt.Sprintf("f%07d.pcap", i))
		var buf bytes.Buffer
		w, _ := pcap.NewWriter(&buf, layers.LinkTypeEthernet, 65535, false)
		w.WritePacket(gopacket.CaptureInfo{Timestamp: base.Add(time.Duration(i) * 5 * time.Minute), CaptureLength: len(pkt), Length: len(pkt)}, pkt)
		w.Flush()
		if err := os.WriteFile(files[i], buf.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	// The file names go in a --config file's sources, not the command
	// line (100,000 of them are more than exec takes).
	conf := filepath.Join(dir, "import.yaml")
	if err := os.WriteFile(conf, []byte("sources:\n  - "+strings.Join(files, "\n  - ")+"\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(b.plumb, "import", "--quiet", "--server", b.srv.Addr, "--queue", fmt.Sprintf("agent%d", n), "--site", "imp",
		"--spool", filepath.Join(dir, "spool"), "--block-interval", "5m", "--config", conf)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		log.Fatalf("plumb import of %d files: %v\n%s", n, err, out)
	}
	var blocks int
	var written, per float64
	for _, l := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(l, "spool state: %f bytes written, %f per block", &written, &per); err == nil {
			blocks = int(written / max(per, 1))
		}
		var pk, bl int
		if _, err := fmt.Sscanf(l, "imported %d packets in %d blocks", &pk, &bl); err == nil {
			blocks = bl
		}
	}
	if per == 0 {
		log.Fatalf("plumb import printed no spool state line:\n%s", out)
	}
	return blocks, per
}

// udpPacket is one small UDP datagram over Ethernet and IPv4.
func udpPacket() []byte {
	eth := &layers.Ethernet{SrcMAC: []byte{2, 0, 0, 0, 0, 1}, DstMAC: []byte{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: []byte{192, 0, 2, 1}, DstIP: []byte{192, 0, 2, 53}}
	udp := &layers.UDP{SrcPort: 40000, DstPort: 53}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload("0123456789abcdef"))
	return buf.Bytes()
}

type bench struct {
	metrics  string // the server's metrics address
	plumb    string
	dir      string
	sites    int
	inflight int
	srv      *benchkit.Server
	c        *client.Client
	sentN    atomic.Int64 // blocks put
	seq      []uint64
	ackStop  context.CancelFunc
	ackMu    sync.Mutex
	acks     []ack // the latest ack calls
	ackWG    sync.WaitGroup
}

type row struct {
	blocks                         int
	put50, put99, ack50, ack99     time.Duration
	list, stats, restart, winDelay time.Duration
	rss, anon                      int64 // VmRSS, and RssAnon (the rest is mapped metadata file)
	metaPerBlock                   float64
	rate                           float64 // puts/s over the fill
	// What the probe's span cost the metadata file, per put: its
	// commits' write calls and the time they took, fdatasync included.
	metaWrites, metaWriteMs float64
}

func (r row) print(first row, ratio bool) {
	fmt.Printf("%10d %9s %9s %9s %9s %9s %9s %10s %9d %9d %11.0f %12s %10.0f %11.1f %11.2f\n", r.blocks, ms(r.put50), ms(r.put99), ms(r.ack50), ms(r.ack99),
		ms(r.list), ms(r.stats), ms(r.restart), r.rss>>20, r.anon>>20, r.metaPerBlock, ms(r.winDelay), r.rate, r.metaWrites, r.metaWriteMs)
	if ratio {
		f := func(a, b time.Duration) string {
			return fmt.Sprintf("%.2fx", float64(a)/float64(max(b, time.Microsecond)))
		}
		fmt.Printf("%10s %9s %9s %9s %9s %9s %9s %10s %9s %9s %11s %12s %10s %11s %11s\n", "ratio", f(r.put50, first.put50), f(r.put99, first.put99), f(r.ack50, first.ack50), f(r.ack99, first.ack99),
			f(r.list, first.list), f(r.stats, first.stats), f(r.restart, first.restart), fmt.Sprintf("%.2fx", float64(r.rss)/float64(first.rss)),
			fmt.Sprintf("%.2fx", float64(r.anon)/float64(first.anon)), fmt.Sprintf("%.2fx", r.metaPerBlock/first.metaPerBlock), f(r.winDelay, first.winDelay),
			fmt.Sprintf("%.2fx", r.rate/first.rate), fmt.Sprintf("%.2fx", r.metaWrites/first.metaWrites), fmt.Sprintf("%.2fx", r.metaWriteMs/first.metaWriteMs))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }

func (b *bench) start() {
	srv, err := benchkit.StartServer(b.plumb, b.dir, "--tick", "1s", "--slots", "2", "--metrics", b.metricsAddr())
	if err != nil {
		log.Fatal(err)
	}
	b.srv = srv
	if b.c, err = client.Dial(srv.Addr); err != nil {
		log.Fatal(err)
	}
	if b.seq == nil {
		b.seq = make([]uint64, b.sites)
	}
	b.startAcker()
}

// submit puts a first block (a job reads only a queue that exists) and
// the job: an hourly window stage over every site, and two stages over
// its outputs.
func (b *bench) submit() {
	b.put(0)
	job := `job: scale
from: earliest
stages:
  - {name: hourly, abstraction: window, window: {size: 1h}, inputs: [tiny], program: [wc, -c], outputs: [tiny.hourly], retention: 1d}
  - {name: copy, inputs: [tiny.hourly], program: [cat], outputs: [tiny.copy], retention: 1d}
  - {name: count, inputs: [tiny.copy], program: [wc, -c], outputs: [tiny.count], retention: 1d}
`
	if res, err := b.c.SubmitJob(context.Background(), "scale.yaml", []byte(job)); err != nil || res.State != "accepted" {
		log.Fatalf("submit: %+v %v", res, err)
	}
}

// base is the event time of every site's first block; blocks are a
// minute apart, so an hour holds 60 of a site's.
var base = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

var payload = bytes.Repeat([]byte("x"), 64)

// put sends site's next block and returns how long the put took.
func (b *bench) put(site int) time.Duration {
	b.seq[site]++
	seq := b.seq[site]
	n := block.Name{Time: base.Add(time.Duration(seq-1) * time.Minute), Seq: seq, Instance: fmt.Sprintf("s%03d", site), Queue: "tiny"}
	src := client.Source{Name: n.String(), Size: int64(len(payload)), Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(payload)), nil }}
	start := time.Now()
	if _, err := b.c.Put(context.Background(), src); err != nil {
		log.Fatalf("put %s: %v", n, err)
	}
	b.sentN.Add(1)
	return time.Since(start)
}

// startAcker follows the queue as a consumer group and acks what it has
// read, all that has come since its last ack in one call (as a consumer
// keeping up does; acking block by block, one round trip each, it fell
// ever further behind the puts), timing each ack.
func (b *bench) startAcker() {
	ctx, stop := context.WithCancel(context.Background())
	b.ackStop = stop
	read := make(chan string, 1<<16)
	b.ackWG.Go(func() {
		defer close(read)
		for ctx.Err() == nil {
			s, err := b.c.DoGet(ctx, flight.Ticket{Queue: "tiny", Group: "reader", Follow: true, From: "earliest"})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for s.Next() {
				h := s.Header()
				io.Copy(io.Discard, s)
				select {
				case read <- h.Name:
				case <-ctx.Done():
				}
			}
			s.Close()
		}
	})
	b.ackWG.Go(func() {
		for name := range read {
			names := []string{name}
			for len(names) < 256 && len(read) > 0 {
				names = append(names, <-read)
			}
			start := time.Now()
			if _, err := b.c.Ack(ctx, "tiny", "reader", names...); err != nil {
				continue // redelivered once their reservations lapse
			}
			b.ackMu.Lock()
			b.acks = append(b.acks, ack{at: time.Now(), took: time.Since(start)})
			if len(b.acks) > 1<<18 {
				b.acks = slices.Delete(b.acks, 0, 1<<17)
			}
			b.ackMu.Unlock()
		}
	})
}

// owes says whether the reader's group or a stage after the window
// stage has blocks not done. (The window stage's group owes the blocks
// of every window not yet closed, so its count never falls to zero.)
func (b *bench) owes() bool {
	for _, q := range []string{"tiny", "tiny.hourly", "tiny.copy"} {
		gs, err := b.c.Groups(context.Background(), q)
		if err != nil {
			return true
		}
		for _, g := range gs {
			if (q != "tiny" || g.Group == "reader") && g.Unreserved+g.Reserved > 0 {
				return true
			}
		}
	}
	return false
}

// ack is when an ack call ended and how long it took.
type ack struct {
	at   time.Time
	took time.Duration
}

// acksSince returns how long the ack calls that ended after t took.
func (b *bench) acksSince(t time.Time) []time.Duration {
	b.ackMu.Lock()
	defer b.ackMu.Unlock()
	var out []time.Duration
	for _, a := range b.acks {
		if a.at.After(t) {
			out = append(out, a.took)
		}
	}
	return out
}

// fill puts blocks until n are stored, as fast as the server takes
// them, and measures what does not need a load. Each uploader owns every
// inflight-th site and sends its sites' blocks in turn, so a site's
// numbers go in order and sites go in parallel.
func (b *bench) fill(n int) row {
	left := max(n-int(b.sentN.Load()), 0)
	var wg sync.WaitGroup
	began := time.Now()
	for w := range b.inflight {
		var mine []int
		for site := w; site < b.sites; site += b.inflight {
			mine = append(mine, site)
		}
		if len(mine) == 0 {
			continue
		}
		share := left / min(b.inflight, b.sites)
		if w < left%min(b.inflight, b.sites) {
			share++
		}
		wg.Go(func() {
			for i := range share {
				b.put(mine[i%len(mine)])
			}
		})
	}
	wg.Wait()
	r := row{blocks: n, rate: float64(left) / time.Since(began).Seconds()}
	b.drain()
	ctx := context.Background()
	start := time.Now()
	if _, err := b.c.Queues(ctx); err != nil {
		log.Fatal(err)
	}
	r.list = time.Since(start)
	start = time.Now()
	if _, err := b.c.Stats(ctx); err != nil {
		log.Fatal(err)
	}
	r.stats = time.Since(start)
	r.rss, r.anon = rss(b.srv, "VmRSS:"), rss(b.srv, "RssAnon:")
	r.metaPerBlock = float64(fileSize(filepath.Join(b.dir, "data", "meta.db"))) / float64(b.sentN.Load())
	r.winDelay = b.windowDelay()
	return r
}

// drain waits until the reader has acked every block, as the server
// counts them (an ack the server took whose answer a restart cut off is
// not sent again), and the stages have caught up.
func (b *bench) drain() {
	for deadline := time.Now().Add(10 * time.Minute); b.owes() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
}

// probe puts at rate per second for d, each site in turn at its share of
// the rate, and takes the put and ack latencies of that span. A put is
// timed from when it was due: when the one before it on its site ran
// late, it waited too.
func (b *bench) probe(r *row, rate float64, d time.Duration) {
	every := time.Duration(float64(time.Second) * float64(b.sites) / rate)
	var mu sync.Mutex
	var puts []time.Duration
	var wg sync.WaitGroup
	writes0, secs0 := b.scrape("plumb_metadata_page_writes_total"), b.scrape("plumb_metadata_write_seconds_total")
	began := time.Now()
	for site := range b.sites {
		first := began.Add(every * time.Duration(site) / time.Duration(b.sites))
		wg.Go(func() {
			for due := first; due.Before(began.Add(d)); due = due.Add(every) {
				time.Sleep(time.Until(due))
				b.put(site)
				took := time.Since(due)
				mu.Lock()
				puts = append(puts, took)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.drain()
	r.metaWrites = (b.scrape("plumb_metadata_page_writes_total") - writes0) / float64(len(puts))
	r.metaWriteMs = (b.scrape("plumb_metadata_write_seconds_total") - secs0) * 1e3 / float64(len(puts))
	acks := b.acksSince(began)
	r.put50, r.put99 = quantile(puts, 0.5), quantile(puts, 0.99)
	r.ack50, r.ack99 = quantile(acks, 0.5), quantile(acks, 0.99)
}

// windowDelay puts, for a fresh site, an hour's blocks and one past it,
// and times from that last put to the window's output.
func (b *bench) windowDelay() time.Duration {
	site := len(b.seq)
	b.seq = append(b.seq, 0)
	for range 60 {
		b.put(site)
	}
	ctx := context.Background()
	before := count(ctx, b.c, "tiny.hourly")
	start := time.Now()
	b.put(site) // the first block of the next hour brackets the window
	for time.Since(start) < 5*time.Minute {
		if count(ctx, b.c, "tiny.hourly") > before {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

func count(ctx context.Context, c *client.Client, q string) int64 {
	st, err := c.QueueStats(ctx, q)
	if err != nil {
		return 0
	}
	return st.Blocks
}

// restart stops the server with SIGTERM, starts it again and returns the
// time until it answers a list of the queues.
func (b *bench) restart() time.Duration {
	b.ackStop()
	b.c.Close()
	b.ackWG.Wait()
	b.srv.Stop()
	start := time.Now()
	srv, err := benchkit.StartServer(b.plumb, b.dir, "--tick", "1s", "--slots", "2", "--metrics", b.metricsAddr())
	if err != nil {
		log.Fatal(err)
	}
	b.srv = srv
	if b.c, err = client.Dial(srv.Addr); err != nil {
		log.Fatal(err)
	}
	for {
		if _, err := b.c.Queues(context.Background()); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	d := time.Since(start)
	b.startAcker()
	return d
}

// metricsAddr picks the server's metrics address, once.
func (b *bench) metricsAddr() string {
	if b.metrics == "" {
		addr, err := benchkit.FreeAddr()
		if err != nil {
			log.Fatal(err)
		}
		b.metrics = addr
	}
	return b.metrics
}

// scrape returns a metric without labels from the server's /metrics.
func (b *bench) scrape(name string) float64 {
	resp, err := http.Get("http://" + b.metrics + "/metrics")
	if err != nil {
		log.Fatalf("scrape %s: %v", name, err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		log.Fatalf("scrape %s: %v", name, err)
	}
	f := fams[name]
	if f == nil || len(f.GetMetric()) != 1 {
		log.Fatalf("the server's /metrics has no %s", name)
	}
	m := f.GetMetric()[0]
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// rss is a line of the server's /proc status: VmRSS, its resident set,
// or RssAnon, what of it is not mapped from a file (the metadata file is
// mapped, and its pages count in VmRSS once read).
func rss(s *benchkit.Server, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			f := strings.Fields(v)
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

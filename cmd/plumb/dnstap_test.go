package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	framestream "github.com/farsightsec/golang-framestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/dns/dnstap"
	"github.com/plumb-dev/plumb/internal/proc"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestDnstapFromKnot: a real DNS server from Debian (Knot, its dnstap
// module on) logs to the agent's unix socket; dig-like queries over UDP
// and TCP (kdig) each appear once as a query and once as a response row
// through the server, with dnstap's type and identity, and the blocks'
// sequence numbers run on without a gap across an agent restart.
func TestDnstapFromKnot(t *testing.T) {
	kdig := testenv.Tool(t, "kdig")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	addr := servePlumb(t, data)
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	job := "job: tap\nqueues: [dnstap.sz]\nstages:\n  - {name: dns, inputs: [dnstap.sz], program: builtin:dns, outputs: [dns.arrow], retention: 1d}\n"
	if res, err := c.SubmitJob(ctx, "tap.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	sock := filepath.Join(dir, "tap.sock")
	agentArgs := []string{"agent", "--server", addr, "--site", "ns1", "--queue", "dnstap.sz", "--spool", filepath.Join(dir, "spool"),
		"--dnstap-socket", sock, "--settle", "300ms"}
	agent := startPlumb(t, append(agentArgs, "--new-instance")...)

	p, knotLog := startKnot(t, dir, sock)

	ask := func(name string, tcp bool) error {
		args := []string{"@127.0.0.1", "-p", p, "+short", "+retry=0", name + ".q.example.com", "A"}
		if tcp {
			args = append(args, "+tcp")
		}
		out, err := testenv.Command(t, 30*time.Second, kdig, args...).CombinedOutput()
		if err == nil && !strings.Contains(string(out), "192.0.2.80") {
			err = fmt.Errorf("answered %q", out)
		}
		return err
	}
	var asked []string
	query := func(name string, tcp bool) {
		t.Helper()
		if err := ask(name, tcp); err != nil {
			t.Fatalf("kdig %s: %v\nknot: %s", name, err, knotLog)
		}
		asked = append(asked, name+".q.example.com")
	}
	// A server finds its dnstap receiver gone only when it next writes
	// (Frame Streams has no way for a receiver to say it stops), and
	// then reconnects: queries prime it until the agent has it, and are
	// not counted.
	connected := func(a *plumbProc) {
		t.Helper()
		for i, deadline := 0, time.Now().Add(60*time.Second); !strings.Contains(a.log.String(), "dnstap sender connected"); i++ {
			if time.Now().After(deadline) {
				t.Fatalf("knot did not connect to the agent's socket in 60 s; knot: %s\nagent: %s", knotLog, a.log)
			}
			ask(fmt.Sprintf("prime%d", i), false)
			time.Sleep(200 * time.Millisecond)
		}
	}
	connected(agent)
	for i := range 6 {
		query(fmt.Sprintf("a%d", i), i%2 == 1)
	}
	// The agent is stopped and started again: Knot reconnects, and the
	// blocks go on from the next sequence number. It is stopped once
	// what was asked is in (frames still in Knot's buffer when it stops
	// are Knot's to lose: Frame Streams acknowledges no data).
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"qname"}})
		if err == nil {
			names := testenv.ColumnStrings(t, tbl, "qname")
			tbl.Release()
			if !slices.ContainsFunc(asked, func(n string) bool { return slices.Index(names, n) < 0 }) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first queries' rows did not arrive in 60 s (%v)\nagent: %s\nknot: %s", err, agent.log, knotLog)
		}
	}
	agent.cmd.Process.Signal(syscall.SIGTERM)
	agent.cmd.Wait()
	agent = startPlumb(t, agentArgs...)
	connected(agent)
	for i := range 6 {
		query(fmt.Sprintf("b%d", i), i%2 == 1)
	}

	// Every name asked has its rows, besides the primes that arrived.
	var qnames, types []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"qname", "dnstap_type", "dnstap_identity", "transport"}})
		all := err == nil
		if all {
			names := testenv.ColumnStrings(t, tbl, "qname")
			all = !slices.ContainsFunc(asked, func(n string) bool { return slices.Index(names, n) < 0 })
			if !all {
				tbl.Release()
			}
		}
		if all {
			qnames, types = testenv.ColumnStrings(t, tbl, "qname"), testenv.ColumnStrings(t, tbl, "dnstap_type")
			if ids := testenv.ColumnStrings(t, tbl, "dnstap_identity"); slices.ContainsFunc(ids, func(s string) bool { return s != "knot-test" }) {
				t.Errorf("identities %v", ids)
			}
			if tr := testenv.ColumnStrings(t, tbl, "transport"); !slices.Contains(tr, "udp") || !slices.Contains(tr, "tcp") {
				t.Errorf("transports %v", tr)
			}
			tbl.Release()
			break
		}
		if time.Now().After(deadline) {
			faulty, _ := c.Faulty(ctx, "")
			t.Fatalf("not every name asked has rows after 60 s (%v); faulty %+v\nagent: %s", err, faulty, agent.log)
		}
	}
	for _, name := range asked {
		q, r := 0, 0
		for i := range qnames {
			if qnames[i] == name {
				switch types[i] {
				case "AUTH_QUERY":
					q++
				case "AUTH_RESPONSE":
					r++
				}
			}
		}
		if q != 1 || r != 1 {
			t.Errorf("%s: %d query and %d response rows, want one each", name, q, r)
		}
	}
	blocks, err := c.Blocks(ctx, "dnstap.sz")
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks {
		if !strings.Contains(b.Name, fmt.Sprintf("-%08d.ns1.", i+1)) {
			t.Errorf("block %d is %s: the sequence has a gap", i+1, b.Name)
		}
	}
	if len(blocks) < 2 {
		t.Errorf("%d blocks across a restart", len(blocks))
	}
}

// waitBlocks waits a minute at most until a queue has at least n
// blocks; logs (of the agent, say) are shown if it does not.
func waitBlocks(t *testing.T, c *client.Client, queue string, n int, logs ...fmt.Stringer) {
	t.Helper()
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%d blocks in %s", n, queue), func() (string, bool) {
		bs, err := c.Blocks(context.Background(), queue)
		if err == nil && len(bs) >= n {
			return "", true
		}
		return fmt.Sprintf("%d blocks (%v)%s", len(bs), err, joinLogs(logs)), false
	})
}

// joinLogs shows the logs of the processes a test ran, for a failure.
func joinLogs(logs []fmt.Stringer) string {
	var b strings.Builder
	for _, l := range logs {
		fmt.Fprintf(&b, "\nlog:\n%s", l)
	}
	return b.String()
}

// TestDnstapFromUnbound: Debian's Unbound, a resolver answering from
// local data, logs its clients' queries and responses by dnstap to the
// agent; queries over UDP, TCP and TLS (DoT) each appear once as a
// CLIENT_QUERY and a CLIENT_RESPONSE row, the DoT ones on the TLS port.
// (Unbound 1.17 names DoT's socket protocol TCP; later versions say DOT,
// which the rows' transport then shows.)
func TestDnstapFromUnbound(t *testing.T) {
	unbound, kdig, openssl := testenv.Tool(t, "unbound"), testenv.Tool(t, "kdig"), testenv.Tool(t, "openssl")
	dir := t.TempDir()
	addr := servePlumb(t, filepath.Join(dir, "data"))
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	job := "job: tap\nqueues: [dnstap.sz]\nstages:\n  - {name: dns, inputs: [dnstap.sz], program: builtin:dns, outputs: [dns.arrow], retention: 1d}\n"
	if res, err := c.SubmitJob(ctx, "tap.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	sock := filepath.Join(dir, "tap.sock")
	agent := startPlumb(t, "agent", "--server", addr, "--site", "r1", "--queue", "dnstap.sz", "--new-instance",
		"--spool", filepath.Join(dir, "spool"), "--dnstap-socket", sock, "--settle", "300ms")
	if out, err := exec.Command(openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
		"-keyout", filepath.Join(dir, "key.pem"), "-out", filepath.Join(dir, "cert.pem"), "-days", "1", "-subj", "/CN=localhost").CombinedOutput(); err != nil {
		t.Fatalf("openssl: %v: %s", err, out)
	}
	_, plain, _ := strings.Cut(testenv.FreeAddr(t), ":")
	_, tlsPort, _ := strings.Cut(testenv.FreeAddr(t), ":")
	conf := fmt.Sprintf(`server:
    username: ""
    chroot: ""
    directory: "%[1]s"
    pidfile: "%[1]s/unbound.pid"
    use-syslog: no
    logfile: ""
    do-daemonize: no
    interface: 127.0.0.1@%[2]s
    interface: 127.0.0.1@%[3]s
    tls-port: %[3]s
    tls-service-key: "%[1]s/key.pem"
    tls-service-pem: "%[1]s/cert.pem"
    access-control: 127.0.0.0/8 allow
    local-zone: "q.example.com." redirect
    local-data: "q.example.com. 300 IN A 192.0.2.80"
dnstap:
    dnstap-enable: yes
    dnstap-socket-path: "%[4]s"
    dnstap-send-identity: yes
    dnstap-identity: "unbound-test"
    dnstap-log-client-query-messages: yes
    dnstap-log-client-response-messages: yes
`, dir, plain, tlsPort, sock)
	os.WriteFile(filepath.Join(dir, "unbound.conf"), []byte(conf), 0o644)
	ub := exec.Command(unbound, "-d", "-c", filepath.Join(dir, "unbound.conf"))
	ubLog := &procLog{}
	ub.Stdout, ub.Stderr = ubLog, ubLog
	if err := ub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ub.Process.Kill(); ub.Wait() })
	waitLog(t, 30*time.Second, agent.log, "dnstap sender connected", ubLog)
	// Unbound connects its dnstap before it answers: wait until it does
	// (these queries are not counted).
	for i, deadline := 0, time.Now().Add(30*time.Second); ; i++ {
		out, _ := testenv.Command(t, 30*time.Second, kdig, "@127.0.0.1", "-p", plain, "+short", "+retry=0", "+timeout=1", fmt.Sprintf("ready%d.q.example.com", i), "A").CombinedOutput()
		if strings.Contains(string(out), "192.0.2.80") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unbound does not answer after 30 s: %s\nunbound: %s", out, ubLog)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ways := map[string][]string{"udp": {"-p", plain}, "tcp": {"-p", plain, "+tcp"}, "dot": {"-p", tlsPort, "+tls"}}
	for way, args := range ways {
		for i := range 3 {
			name := fmt.Sprintf("%s%d.q.example.com", way, i)
			out, err := testenv.Command(t, 30*time.Second, kdig, append([]string{"@127.0.0.1", "+short", "+retry=0", name, "A"}, args...)...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "192.0.2.80") {
				t.Fatalf("kdig %s over %s: %v: %s\nunbound: %s", name, way, err, out, ubLog)
			}
		}
	}
	want := 2 * 3 * len(ways)
	var rows map[string][]string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"qname", "dnstap_type", "dnstap_identity", "sport", "dport"}})
		if err == nil {
			all := map[string][]string{}
			for _, col := range []string{"qname", "dnstap_type", "dnstap_identity", "sport", "dport"} {
				all[col] = testenv.ColumnStrings(t, tbl, col)
			}
			tbl.Release()
			rows = map[string][]string{}
			for i, q := range all["qname"] {
				if !strings.HasPrefix(q, "ready") {
					for col, v := range all {
						rows[col] = append(rows[col], v[i])
					}
				}
			}
			if len(rows["qname"]) >= want {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d rows after 60 s (%v); agent: %s", want, err, agent.log)
		}
	}
	if len(rows["qname"]) != want {
		t.Fatalf("%d rows for %d queries and responses", len(rows["qname"]), want)
	}
	seen := map[string]int{}
	for i, q := range rows["qname"] {
		typ, server := rows["dnstap_type"][i], rows["dport"][i]
		if typ == "CLIENT_RESPONSE" {
			server = rows["sport"][i]
		}
		way := q[:3]
		if wantPort := ways[way][1]; server != wantPort || rows["dnstap_identity"][i] != "unbound-test" {
			t.Errorf("%s %s: server port %s, identity %q; want %s", q, typ, server, rows["dnstap_identity"][i], wantPort)
		}
		seen[q+" "+typ]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s: %d rows", k, n)
		}
	}
	if len(seen) != want {
		t.Errorf("%d distinct query and response rows, want %d", len(seen), want)
	}
}

// startKnot starts Debian's Knot on a free port with one zone,
// example.com (*.q answers 192.0.2.80), logging every query and response
// by dnstap to the unix socket sock, identity knot-test. It returns the
// port and Knot's log.
func startKnot(t *testing.T, dir, sock string) (string, *procLog) {
	t.Helper()
	knotd := testenv.Tool(t, "knotd")
	port := testenv.FreeAddr(t)
	_, p, _ := strings.Cut(port, ":")
	os.WriteFile(filepath.Join(dir, "example.com.zone"), []byte("$ORIGIN example.com.\n$TTL 300\n@ SOA ns1 hostmaster 1 3600 600 86400 300\n@ NS ns1\nns1 A 192.0.2.53\n*.q A 192.0.2.80\n"), 0o644)
	conf := fmt.Sprintf(`server:
    rundir: %[1]s
    listen: 127.0.0.1@%[2]s
database:
    storage: %[1]s
log:
  - target: stderr
    any: info
mod-dnstap:
  - id: tap
    sink: unix:%[3]s
    identity: knot-test
    log-queries: on
    log-responses: on
template:
  - id: default
    storage: %[1]s
    global-module: mod-dnstap/tap
zone:
  - domain: example.com
    file: %[1]s/example.com.zone
`, dir, p, sock)
	if os.Geteuid() == 0 {
		conf = strings.Replace(conf, "server:\n", "server:\n    user: root\n", 1)
	}
	os.WriteFile(filepath.Join(dir, "knot.conf"), []byte(conf), 0o644)
	knot := exec.Command(knotd, "-c", filepath.Join(dir, "knot.conf"))
	knotLog := &procLog{}
	knot.Stdout, knot.Stderr = knotLog, knotLog
	if err := knot.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { knot.Process.Kill(); knot.Wait() })
	// Ready once it answers for its zone: a busy machine takes seconds
	// to start it, and a query before then is lost, not late.
	kdig := testenv.Tool(t, "kdig")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, _ := testenv.Command(t, 30*time.Second, kdig, "@127.0.0.1", "-p", p, "+short", "+retry=0", "+timeout=1", "example.com", "SOA").CombinedOutput()
		if strings.Contains(string(out), "hostmaster") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("knot does not answer after 60 s: %s\nknot: %s", out, knotLog)
		}
	}
	return p, knotLog
}

// TestDnstapFlood is issue 61's attack on the agent's dnstap socket:
// 3,000 connections, each sending one 200 KiB frame and staying open,
// against an agent whose open-files limit is 2,048. It used to hold a
// 256 KiB buffer per connection for ever (1.69 GB at 4,000), lose its
// listener to EMFILE, and die when the spool could not create a block.
// Now the agent stays up within 256 MiB of its resting memory, and a
// real Knot connecting after the flood has its frames shipped.
func TestDnstapFlood(t *testing.T) {
	prlimit, kdig := testenv.Tool(t, "prlimit"), testenv.Tool(t, "kdig")
	dir := t.TempDir()
	addr := servePlumb(t, filepath.Join(dir, "data"))
	c := dialPlumb(t, addr)
	sock := filepath.Join(dir, "tap.sock")
	cmd := exec.Command(prlimit, "--nofile=2048:2048", "--", os.Args[0], "agent", "--server", addr, "--site", "ns1", "--queue", "dnstap.sz",
		"--spool", filepath.Join(dir, "spool"), "--dnstap-socket", sock, "--settle", "300ms", "--new-instance", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	agentLog := &procLog{}
	cmd.Stdout, cmd.Stderr = agentLog, agentLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testenv.WaitFor(t, time.Minute, "the agent's socket", func() bool { _, err := os.Stat(sock); return err == nil })
	time.Sleep(500 * time.Millisecond)
	base, err := proc.Status(cmd.Process.Pid, "VmRSS:")
	if err != nil {
		t.Fatal(err)
	}

	frame := bytes.Repeat([]byte{0xAB}, 200<<10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent, refused := 0, 0
	hold := make(chan struct{})
	for i := range 3000 {
		wg.Go(func() {
			conn, err := net.DialTimeout("unix", sock, 30*time.Second)
			if err != nil {
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			defer conn.Close()
			w, err := framestream.NewWriter(conn, &framestream.WriterOptions{ContentTypes: [][]byte{[]byte(dnstap.ContentType)}, Bidirectional: true, Timeout: 30 * time.Second})
			if err == nil {
				conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
				_, err = w.WriteFrame(frame)
				if err == nil {
					err = w.Flush()
				}
			}
			mu.Lock()
			if err == nil {
				sent++
			} else {
				refused++
			}
			mu.Unlock()
			if err == nil && i%2 == 0 {
				<-hold // half the senders stay connected through the flood
			}
		})
	}
	testenv.WaitFor(t, time.Minute, "the flood's senders", func() bool { mu.Lock(); defer mu.Unlock(); return sent+refused >= 3000-1500 })
	time.Sleep(2 * time.Second)
	if cmd.ProcessState != nil || cmd.Process.Signal(syscall.Signal(0)) != nil {
		t.Fatalf("the agent died in the flood:\n%s", agentLog)
	}
	close(hold)
	wg.Wait()
	peak, err := proc.Status(cmd.Process.Pid, "VmHWM:")
	if err != nil {
		t.Fatalf("the agent is gone: %v\n%s", err, agentLog)
	}
	t.Logf("flood: %d senders' frames taken, %d refused or cut; agent RSS %d MiB at rest, peak %d MiB", sent, refused, base>>20, peak>>20)
	if peak-base > 256<<20 {
		t.Errorf("the agent's memory rose from %d MiB to %d MiB in the flood, more than 256 MiB", base>>20, peak>>20)
	}
	if sent == 0 {
		t.Error("no sender's frame was taken in the flood")
	}
	if !strings.Contains(agentLog.String(), "at its cap of connections") {
		t.Errorf("the agent's log does not say it refused senders:\n%.2000s", agentLog)
	}

	// A real server after the flood: its frames are shipped.
	p, knotLog := startKnot(t, dir, sock)
	found := func() bool {
		testenv.Command(t, 30*time.Second, kdig, "@127.0.0.1", "-p", p, "+short", "+retry=0", "after.q.example.com", "A").Run()
		if _, err := c.Blocks(context.Background(), "dnstap.sz"); status.Code(err) == codes.NotFound {
			return false // no block has arrived yet
		}
		pkts, _ := fetchInstance(t, c, "dnstap.sz", "ns1")
		for _, pk := range pkts {
			if m, err := dnstap.Decode(pk.data); err == nil && m.Identity == "knot-test" {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(2 * time.Minute); !found(); time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Knot's frames did not arrive after the flood; knot: %s\nagent: %.3000s", knotLog, agentLog)
		}
	}
	if cmd.ProcessState != nil || cmd.Process.Signal(syscall.Signal(0)) != nil {
		t.Fatalf("the agent died:\n%s", agentLog)
	}
}

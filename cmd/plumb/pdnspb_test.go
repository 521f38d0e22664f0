package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestProtobufFromDnsdist: Debian's dnsdist in front of a real Knot logs
// every query and response to the agent's --protobuf-listen (dnsdist's
// RemoteLogger, PowerDNS protobuf), while Knot logs the same queries by
// dnstap to another agent. Queried over UDP and TCP with kdig, each name
// has one CLIENT_QUERY and one CLIENT_RESPONSE row from dnsdist, equal in
// name, type, rcode and addresses to Knot's AUTH_QUERY and AUTH_RESPONSE
// rows, with dnsdist's identity and transport.
func TestProtobufFromDnsdist(t *testing.T) {
	kdig := testenv.Tool(t, "kdig")
	dnsdist := testenv.Tool(t, "dnsdist")
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
	knotAgent := startPlumb(t, "agent", "--server", addr, "--site", "ns1", "--queue", "dnstap.sz", "--spool", filepath.Join(dir, "spool-ns1"),
		"--dnstap-socket", sock, "--settle", "300ms", "--new-instance")
	pbAddr := testenv.FreeAddr(t)
	pbAgent := startPlumb(t, "agent", "--server", addr, "--site", "lb1", "--queue", "dnstap.sz", "--spool", filepath.Join(dir, "spool-lb1"),
		"--protobuf-listen", pbAddr, "--settle", "300ms", "--new-instance")
	waitListening(t, pbAddr)
	knotPort, knotLog := startKnot(t, dir, sock)

	lb := testenv.FreeAddr(t)
	_, lbPort, _ := strings.Cut(lb, ":")
	conf := fmt.Sprintf(`setLocal(%q)
newServer({address="127.0.0.1:%s"})
rl = newRemoteLogger(%q)
addAction(AllRule(), RemoteLogAction(rl, nil, {serverID="dnsdist-test"}))
addResponseAction(AllRule(), RemoteLogResponseAction(rl, nil, true, {serverID="dnsdist-test"}))
`, lb, knotPort, pbAddr)
	if err := os.WriteFile(filepath.Join(dir, "dnsdist.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	dd := exec.Command(dnsdist, "--supervised", "--disable-syslog", "-C", filepath.Join(dir, "dnsdist.conf"))
	ddLog := &procLog{}
	dd.Stdout, dd.Stderr = ddLog, ddLog
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dd.Process.Kill(); dd.Wait() })

	ask := func(name string, tcp bool) error {
		args := []string{"@127.0.0.1", "-p", lbPort, "+short", "+retry=0", "+timeout=2", name + ".q.example.com", "A"}
		if tcp {
			args = append(args, "+tcp")
		}
		out, err := testenv.Command(t, 30*time.Second, kdig, args...).CombinedOutput()
		if err == nil && !strings.Contains(string(out), "192.0.2.80") {
			err = fmt.Errorf("answered %q", out)
		}
		return err
	}
	// dnsdist answers once it has found its backend up, and both
	// senders connect when they first log: prime until dnsdist answers
	// and both agents have them (the primes are not counted).
	for i, deadline := 0, time.Now().Add(60*time.Second); ask(fmt.Sprintf("ready%d", i), false) != nil ||
		!strings.Contains(knotAgent.log.String(), "dnstap sender connected") ||
		!strings.Contains(pbAgent.log.String(), "PowerDNS protobuf sender connected"); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the servers did not connect to the agents in 60 s\ndnsdist: %s\nknot: %s\nagents: %s\n%s", ddLog, knotLog, knotAgent.log, pbAgent.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var asked []string
	for i := range 8 {
		name := fmt.Sprintf("n%d", i)
		if err := ask(name, i%2 == 1); err != nil {
			out, _ := testenv.Command(t, 30*time.Second, kdig, "@127.0.0.1", "-p", lbPort, name+".q.example.com", "A").CombinedOutput()
			t.Fatalf("kdig %s through dnsdist: %v\n%s\ndnsdist: %s", name, err, out, ddLog)
		}
		asked = append(asked, name+".q.example.com")
	}
	cols := []string{"qname", "qtype", "rcode", "src", "dst", "dnstap_type", "dnstap_identity", "transport"}
	var rows map[string][][]string // qname → rows of cols
	testenv.Eventually(t, time.Minute, "every name's rows from both servers", func() (string, bool) {
		tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: cols})
		if err != nil {
			return err.Error(), false
		}
		defer tbl.Release()
		vals := make([][]string, len(cols))
		for i, col := range cols {
			vals[i] = testenv.ColumnStrings(t, tbl, col)
		}
		rows = map[string][][]string{}
		for r := range vals[0] {
			row := make([]string, len(cols))
			for i := range cols {
				row[i] = vals[i][r]
			}
			rows[row[0]] = append(rows[row[0]], row)
		}
		for _, n := range asked {
			if len(rows[n]) < 4 {
				return fmt.Sprintf("%s: %v\nagents: %s\n%s", n, rows[n], knotAgent.log, pbAgent.log), false
			}
		}
		return "", true
	})
	for i, name := range asked {
		by := map[string][]string{}
		for _, r := range rows[name] {
			if by[r[5]] != nil {
				t.Errorf("%s: two %s rows", name, r[5])
			}
			by[r[5]] = r
		}
		cq, cr, aq, ar := by["CLIENT_QUERY"], by["CLIENT_RESPONSE"], by["AUTH_QUERY"], by["AUTH_RESPONSE"]
		if cq == nil || cr == nil || aq == nil || ar == nil || len(rows[name]) != 4 {
			t.Errorf("%s: rows %v; want one query and one response from each server", name, rows[name])
			continue
		}
		for _, pair := range [][2][]string{{cq, aq}, {cr, ar}} {
			// name, type, rcode and addresses as the backend logged them
			if fmt.Sprint(pair[0][1:5]) != fmt.Sprint(pair[1][1:5]) {
				t.Errorf("%s: dnsdist's %s row %v, Knot's %v", name, pair[0][5], pair[0], pair[1])
			}
		}
		transport := "udp"
		if i%2 == 1 {
			transport = "tcp"
		}
		if cq[6] != "dnsdist-test" || cq[7] != transport || cr[6] != "dnsdist-test" {
			t.Errorf("%s: dnsdist's rows %v %v; want identity dnsdist-test over %s", name, cq, cr, transport)
		}
	}
}

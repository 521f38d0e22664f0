package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/netpkt"
)

// TestAnonymizedCopies: through a real server with users, an operator's
// job makes pcap.anon and dns.anon.arrow from the captures; an analyst
// who may read only those reads them, finds none of the captures' client
// addresses in them, and is refused pcap.sz, and a job of hers on it.
func TestAnonymizedCopies(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if _, errOut, code := plumbExec(t, "anon-key", "share", "--dir", filepath.Join(data, "keys")); code != 0 {
		t.Fatalf("anon-key: %s", errOut)
	}
	users := filepath.Join(dir, "users.yaml")
	secret := addUsers(t, users, [][2]string{{"ops", "operators"}, {"agent", "capture"}, {"ana", "analysts"}})
	testenv.EditUsers(t, users, func(f *auth.File) {
		f.Rules = []auth.Rule{
			{Queues: "*", Groups: []string{"operators"}, Allow: []auth.Perm{auth.Admin}},
			{Queues: "pcap.sz", Groups: []string{"capture"}, Allow: []auth.Perm{auth.Write}},
			{Queues: "pcap.anon", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read}},
			{Queues: "dns.anon.arrow", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read}},
		}
	})
	addr := servePlumb(t, data, "--users", users)
	ctx := context.Background()
	as := func(user string) *client.Client {
		c, err := client.DialSecure(addr, client.Security{User: user, Secret: secret[user]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ops, agent, ana := as("ops"), as("agent"), as("ana")
	job := `job: share
queues: [pcap.sz]
stages:
  - name: anon
    inputs: [pcap.sz]
    program: builtin:anonymize?key=share&what=clients&rdata=true
    outputs: [pcap.anon]
    retention: 30d      # kept for the analysts, not only until the dns stage is done
  - name: dns
    inputs: [pcap.anon]
    program: builtin:dns
    outputs: [dns.anon.arrow]
`
	if res, err := ops.SubmitJob(ctx, "share.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("the operator's job: %+v %v", res, err)
	}
	raw, err := os.ReadFile("../../testdata/pcaps/dnscap__dns.pcap")
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	w, _ := codecs.Snappy.NewWriter(&z)
	w.Write(raw)
	w.Close()
	if _, err := agent.Put(ctx, client.BytesSource("20250505-151105-00000001.lax.pcap.sz", z.Bytes())); err != nil {
		t.Fatal(err)
	}
	// The clients of the capture: the ends not on port 53.
	clients := map[string]bool{}
	r, closer, _ := pcap.NewReader(bytes.NewReader(raw))
	for {
		frame, _, err := r.Next()
		if err != nil {
			break
		}
		var p netpkt.Packet
		if netpkt.Decode(r.LinkType, frame, &p) == nil && p.DstPort == 53 {
			clients[p.Src.String()] = true
		}
	}
	closer.Close()
	if len(clients) == 0 {
		t.Fatal("no DNS clients in the capture")
	}

	var anonBlock, recordsBlock string
	for deadline := time.Now().Add(60 * time.Second); anonBlock == "" || recordsBlock == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			faulty, _ := ops.Faulty(ctx, "")
			st, _ := ops.Stats(ctx)
			errA, _ := ops.Queues(ctx)
			t.Fatalf("no anonymized copies after 60 s: faulty %+v; stats %+v; queues: %+v", faulty, st, errA)
		}
		if bs, _ := ana.Blocks(ctx, "pcap.anon"); len(bs) == 1 {
			anonBlock = bs[0].Name
		}
		if bs, _ := ana.Blocks(ctx, "dns.anon.arrow"); len(bs) == 1 {
			recordsBlock = bs[0].Name
		}
	}
	s, err := ana.Get(ctx, anonBlock)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	for s.Next() {
		got.ReadFrom(s)
	}
	s.Close()
	ar, closer, err := pcap.NewReader(&got)
	if err != nil {
		t.Fatalf("the analyst's copy: %v", err)
	}
	n := 0
	for ; ; n++ {
		frame, _, err := ar.Next()
		if err != nil {
			break
		}
		var p netpkt.Packet
		netpkt.Decode(ar.LinkType, frame, &p)
		if clients[p.Src.String()] || clients[p.Dst.String()] {
			t.Fatalf("packet %d of pcap.anon holds a client's address: %s > %s", n+1, p.Src, p.Dst)
		}
	}
	closer.Close()
	if rd, _, _ := pcap.NewReader(bytes.NewReader(raw)); n == 0 || int64(n) != countPackets(rd) {
		t.Errorf("pcap.anon holds %d packets", n)
	}
	rows, err := ana.Records(ctx, client.RecordsTicket{Records: "dns.anon.arrow", Columns: []string{"src", "dst"}})
	if err != nil {
		t.Fatal(err)
	}
	nrows := 0
	for rows.Next() {
		rec := rows.RecordBatch()
		for c := 0; c < 2; c++ {
			for i := 0; i < int(rec.NumRows()); i++ {
				if v := rec.Column(c).ValueStr(i); clients[v] {
					t.Fatalf("dns.anon.arrow row %d holds a client's address %s", i, v)
				}
			}
		}
		nrows += int(rec.NumRows())
	}
	rows.Release()
	if nrows == 0 {
		t.Error("dns.anon.arrow holds no rows")
	}
	// The raw captures stay the agent's and the operator's.
	if s, err := ana.Get(ctx, "20250505-151105-00000001.lax.pcap.sz"); err == nil {
		for s.Next() {
		}
		err = s.Err()
		s.Close()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("the analyst reads pcap.sz: %v", err)
		}
	} else if status.Code(err) != codes.PermissionDenied {
		t.Errorf("the analyst reads pcap.sz: %v", err)
	}
	theirs := strings.ReplaceAll(strings.ReplaceAll(job, "job: share", "job: peek"), "[pcap.anon]", "[ana.copy]")
	if res, err := ana.SubmitJob(ctx, "peek.yaml", []byte(theirs)); err != nil || res.State != "rejected" || !strings.Contains(res.Reason, "pcap.sz") {
		t.Errorf("the analyst's job on pcap.sz: %+v %v", res, err)
	}
}

func countPackets(r *pcap.Reader) int64 {
	for {
		if _, _, err := r.Next(); err != nil {
			return r.Packets()
		}
	}
}

// TestAnonKeysHaveOwners: a user ran builtin:anonymize?key=teamA over a
// queue of their own and got output byte-identical to the admin's shared
// copy, an oracle for teamA's mapping; a wrong key name answered with the
// server's key directory. A job may now name a key only when its owner's
// group is granted it under anon_keys (or it is an admin), and a refusal
// names the key, never a server path.
func TestAnonKeysHaveOwners(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, k := range []string{"teama", "bob-key"} {
		if _, errOut, code := plumbExec(t, "anon-key", k, "--dir", filepath.Join(data, "keys")); code != 0 {
			t.Fatalf("anon-key: %s", errOut)
		}
	}
	users := filepath.Join(dir, "users.yaml")
	out, errOut, code := plumbExec(t, "user", "add", "bob", "--group", "teamb", "--users", users)
	if code != 0 {
		t.Fatalf("user add: %s", errOut)
	}
	testenv.EditUsers(t, users, func(f *auth.File) {
		f.Rules = []auth.Rule{{Queues: "bob.*", Groups: []string{"teamb"}, Allow: []auth.Perm{auth.Read, auth.Write}}}
		f.AnonKeys = []auth.KeyGrant{{Keys: "bob-*", Groups: []string{"teamb"}}}
	})
	addr := servePlumb(t, data, "--users", users)
	bob, err := client.DialSecure(addr, client.Security{User: "bob", Secret: strings.TrimSpace(out)})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	job := func(key string) (client.SubmitResult, error) {
		return bob.SubmitJob(context.Background(), key+".yaml", []byte("job: j-"+key+"\nqueues: [bob.pcap]\nstages:\n"+
			"  - {name: anon, inputs: [bob.pcap], program: \"builtin:anonymize?key="+key+"\", outputs: [bob.anon]}\n"))
	}
	res, err := job("teama")
	if err != nil || res.State != "rejected" || !strings.Contains(res.Reason, "may not use anonymization key teama") {
		t.Fatalf("bob's job with teamA's key: %+v %v", res, err)
	}
	res, err = job("bob-nosuch")
	if err != nil || res.State != "rejected" || !strings.Contains(res.Reason, "no such key") || strings.Contains(res.Reason, data) {
		t.Fatalf("bob's job with a key that does not exist: %+v %v", res, err)
	}
	if res, err := job("bob-key"); err != nil || res.State != "accepted" {
		t.Fatalf("bob's job with his own key: %+v %v", res, err)
	}
}

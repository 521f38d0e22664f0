package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/server"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
	"github.com/plumb-dev/plumb/worker"
)

// TestWorkersReadASiteInParts: on a server that runs no stage itself,
// two workers read one site's blocks apart from their neighbours (part
// leases) and finish each at its turn; captures of TCP messages split
// across blocks and IP fragments, cut every one to five packets and
// shipped shuffled, give the uncut capture's rows, and most runs were
// read in parts.
func TestWorkersReadASiteInParts(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{Data: t.TempDir(), Listen: "127.0.0.1:0", Logger: log, Registry: reg,
			Engine: engine.Config{RemoteOnly: true, Tick: 50 * time.Millisecond, GapWait: time.Hour}, Ready: func(a net.Addr) { ready <- a.String() }})
	}()
	defer func() { cancel(); <-done }()
	addr := <-ready
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	rng := rand.New(rand.NewPCG(41, 41))
	var want []string
	type put struct {
		seq  uint64
		data []byte
	}
	var puts []put
	seq := uint64(1)
	for _, name := range []string{"dnscap__dnsotcp-many1pkt.pcap", "dnscap__frags.pcap", "dnscap__dnso1tcp-midmiss.pcap", "dnscap__dnsotcp-manyopkts.pcap"} {
		f, err := os.Open("../testdata/pcaps/" + name)
		if err != nil {
			t.Fatal(err)
		}
		rd, closer, err := pcap.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		// The uncut rows, without the end-of-capture flush: what the last
		// block holds waits for the site's next block.
		x := dnsrec.NewExtractor(rd.LinkType, nil, func(r *dnsrec.Record) {
			want = append(want, fmt.Sprintf("%d %d %s", r.Time.UnixNano(), r.Msg.ID, r.Msg.QName))
		})
		var b bytes.Buffer
		var w *pcap.Writer
		n := 0
		flush := func() {
			if w != nil {
				w.Flush()
				puts = append(puts, put{seq, bytes.Clone(b.Bytes())})
				seq++
				b.Reset()
				w, n = nil, 0
			}
		}
		for {
			data, ci, err := rd.Next()
			if err != nil {
				break
			}
			if w == nil {
				w, _ = pcap.NewWriter(&b, rd.LinkType, 65535, true)
			}
			w.WritePacket(ci, data)
			x.Packet(ci.Timestamp, data)
			if n++; n >= 1+rng.IntN(5) {
				flush()
			}
		}
		flush()
		closer.Close()
		f.Close()
	}
	// One site: the captures one after another (packet time goes back
	// between them, which the stage takes as it comes).
	for _, i := range rng.Perm(len(puts)) {
		p := puts[i]
		n := block.Name{Time: time.Date(2025, 5, 5, 15, 0, 0, 0, time.UTC), Seq: p.seq, Instance: "lax", Queue: "pcap"}
		sum := sha256.Sum256(p.data)
		if _, err := c.Put(ctx, client.Source{Name: n.String(), Size: int64(len(p.data)), SHA256: hex.EncodeToString(sum[:]),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(p.data)), nil }}); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := c.SubmitJob(ctx, "dns.yaml", []byte("job: dns\nfrom: earliest\nstages:\n  - {name: d, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}\n")); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	wctx, stop := context.WithCancel(ctx)
	wdone := make(chan error, 2)
	for i := range 2 {
		go func() {
			wdone <- worker.New(worker.Config{Client: c, ID: fmt.Sprint("w", i), Host: "h", Slots: 1, Runner: &worker.Runner{Registry: reg},
				Scratch: t.TempDir(), Log: log}).Run(wctx)
		}()
	}
	defer func() { stop(); <-wdone; <-wdone }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		bs, _ := c.Blocks(ctx, "dns.arrow")
		if len(bs) == len(puts) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d blocks' records", len(bs), len(puts))
		}
		time.Sleep(50 * time.Millisecond)
	}
	rows, err := c.Records(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"time", "id", "qname"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		rec := rows.RecordBatch()
		for i := range int(rec.NumRows()) {
			got = append(got, fmt.Sprintf("%d %s %s", rec.Column(0).(*array.Timestamp).Value(i), rec.Column(1).ValueStr(i), rec.Column(2).ValueStr(i)))
		}
	}
	rows.Release()
	slices.Sort(got)
	slices.Sort(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%d blocks: %d rows, uncut %d\n got %q\nwant %q", len(puts), len(got), len(want), got[:min(4, len(got))], want[:min(4, len(want))])
	}
	st, err := c.Stats(ctx)
	if err != nil || len(st) != 1 {
		t.Fatalf("stats: %+v %v", st, err)
	}
	if st[0].Parted < st[0].Runs/2 {
		t.Errorf("%d of %d runs finished a first half a worker held; want most", st[0].Parted, st[0].Runs)
	}
	t.Logf("%d blocks on two workers: %d rows as uncut, %d of %d runs in parts", len(puts), len(got), st[0].Parted, st[0].Runs)
}

package engine_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/dns/dnspair"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
)

// eachBatch calls fn with each record batch of an Arrow IPC file, and
// col to find a column of it by name.
func eachBatch(t *testing.T, data []byte, fn func(rec arrow.RecordBatch, col func(string) arrow.Array)) {
	t.Helper()
	f, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 0; i < f.NumRecords(); i++ {
		rec, err := f.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		fn(rec, func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) })
	}
}

// captureFrames reads the frames of captures in testdata/pcaps, in order.
func captureFrames(t testing.TB, names ...string) (link layers.LinkType, cis []gopacket.CaptureInfo, frames [][]byte) {
	t.Helper()
	for _, name := range names {
		f, err := os.Open("../testdata/pcaps/" + name)
		if err != nil {
			t.Fatal(err)
		}
		rd, closer, err := pcap.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		link = rd.LinkType
		for {
			data, ci, err := rd.Next()
			if err != nil {
				break
			}
			cis, frames = append(cis, ci), append(frames, bytes.Clone(data))
		}
		closer.Close()
		f.Close()
	}
	return link, cis, frames
}

// dnsRows are a dns.arrow block's rows as "time id qname" lines.
func dnsRows(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	eachBatch(t, data, func(rec arrow.RecordBatch, col func(string) arrow.Array) {
		ts := col("time").(*array.Timestamp)
		ids := col("id").(*array.Uint16)
		names := col("qname").(*array.String)
		for j := 0; j < int(rec.NumRows()); j++ {
			out = append(out, fmt.Sprintf("%d %04x %s", ts.Value(j), ids.Value(j), names.Value(j)))
		}
	})
	return out
}

// TestDNSAcrossBlocks: builtin:dns runs a site's blocks in sequence,
// each going on from what the previous held, so a capture cut into
// blocks of a packet or two (splitting TCP messages and IP fragments at
// every boundary) and shipped in shuffled order gives the rows of the
// uncut capture, each once; a block that never comes is skipped after
// the gap wait, and the next goes on.
func TestDNSAcrossBlocks(t *testing.T) {
	link, cis, frames := captureFrames(t, "dnscap__dnsotcp-many1pkt.pcap", "dnscap__frags.pcap")
	// The uncut rows, without the end-of-capture flush: the last block's
	// held bytes wait for the site's next block, as they would live.
	var want []string
	x := dnsrec.NewExtractor(link, nil, func(r *dnsrec.Record) {
		want = append(want, fmt.Sprintf("%d %04x %s", r.Time.UnixNano(), r.Msg.ID, r.Msg.QName))
	})
	var blocks [][]byte
	rng := rand.New(rand.NewPCG(26, 26))
	for start := 0; start < len(frames); {
		n := 1 + rng.IntN(2)
		var b bytes.Buffer
		w, _ := pcap.NewWriter(&b, link, 65535, true)
		for i := start; i < min(start+n, len(frames)); i++ {
			w.WritePacket(cis[i], frames[i])
			x.Packet(cis[i].Timestamp, frames[i])
		}
		w.Flush()
		blocks = append(blocks, b.Bytes())
		start += n
	}
	r := newRig(t, engine.Config{Slots: 4, GapWait: 2 * time.Second})
	// They arrive in shuffled order (arrival order is not sequence order),
	// all before the job: a slow machine must not see gaps that are only
	// the test's own pace.
	for _, i := range rng.Perm(len(blocks)) {
		r.put("pcap", uint64(i+1), blocks[i])
	}
	r.mustAccept("job: dns\nfrom: earliest\nstages:\n  - {name: d, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}\n")
	r.wait("every block's records", func() bool { return r.count("dns.arrow") == int64(len(blocks)) })
	var got []string
	for seq := 1; seq <= len(blocks); seq++ {
		got = append(got, dnsRows(t, r.read("dns.arrow", uint64(seq)))...)
	}
	slices.Sort(got)
	slices.Sort(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%d blocks: %d rows, uncut %d\n got %q\nwant %q", len(blocks), len(got), len(want), got[:min(5, len(got))], want[:min(5, len(want))])
	}
	t.Logf("%d packets in %d blocks shipped shuffled: %d rows, as uncut", len(frames), len(blocks), len(got))

	// One site: its blocks were read in parallel, apart from their
	// neighbours, on every slot.
	if st := r.eng.Stats()[0]; st.Parted < st.Runs/2 {
		t.Errorf("%d of %d runs read their block apart from its neighbours; want most", st.Parted, st.Runs)
	} else {
		t.Logf("%d of %d runs read their block apart from its neighbours", st.Parted, st.Runs)
	}
	if c, _, _ := r.db.GetCarry(r.eng.Stats()[0].ID, "lax"); c.Gaps != 0 || c.Late != 0 {
		t.Errorf("carry with every block present: %d gaps, %d late", c.Gaps, c.Late)
	}
	// A block that never comes: after the gap wait the site goes on.
	next := uint64(len(blocks) + 2) // len+1 never arrives
	r.put("pcap", next, blocks[0])
	r.wait("the block after the gap", func() bool { return r.count("dns.arrow") == int64(len(blocks)+1) })
	c, ok, err := r.db.GetCarry(r.eng.Stats()[0].ID, "lax")
	if err != nil || !ok || c.Gaps != 1 || c.Next != next+1 {
		t.Errorf("carry after the gap: %+v %v %v", c, ok, err)
	}
}

// pairRows are a DNS transactions block's rows as "query response id"
// lines, with "-" for a missing side.
func pairRows(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	eachBatch(t, data, func(rec arrow.RecordBatch, col func(string) arrow.Array) {
		ts := col("time").(*array.Timestamp)
		rts := col("response_time").(*array.Timestamp)
		orphan := col("orphan_response").(*array.Boolean)
		ids := col("id").(*array.Uint16)
		for j := 0; j < int(rec.NumRows()); j++ {
			q, r := fmt.Sprint(ts.Value(j)), "-"
			if orphan.Value(j) {
				q = "-"
			}
			if rts.IsValid(j) {
				r = fmt.Sprint(rts.Value(j))
			}
			out = append(out, fmt.Sprintf("%s %s %04x", q, r, ids.Value(j)))
		}
	})
	return out
}

// pairRow is a transaction as pairRows reads it from the stage's rows.
func pairRow(tx *dnspair.Txn) string {
	q, r := "-", "-"
	if tx.Query != nil {
		q = fmt.Sprint(tx.Query.Time.UnixNano())
	}
	if tx.Response != nil {
		r = fmt.Sprint(tx.Response.Time.UnixNano())
	}
	return fmt.Sprintf("%s %s %04x", q, r, tx.Key.ID)
}

// TestDNSPairsAcrossBlocks: builtin:dnspairs pairs a query at the end of
// one block with its response at the start of the next: a capture cut
// between every query and its response, shipped shuffled, gives the
// transactions of the uncut capture, each once.
func TestDNSPairsAcrossBlocks(t *testing.T) {
	link, cis, frames := captureFrames(t, "dnscap__dns.pcap")
	// The uncut transactions, without the end-of-capture flush: queries
	// still waiting at the end wait for the site's next block.
	var want []string
	p := dnspair.New(func(tx *dnspair.Txn) { want = append(want, pairRow(tx)) })
	x := dnsrec.NewExtractor(link, nil, p.Add)
	// One packet per block: every query is in another block than its
	// response.
	var blocks [][]byte
	for i := range frames {
		var b bytes.Buffer
		w, _ := pcap.NewWriter(&b, link, 65535, true)
		w.WritePacket(cis[i], frames[i])
		w.Flush()
		x.Packet(cis[i].Timestamp, frames[i])
		blocks = append(blocks, b.Bytes())
	}
	st := p.Stats()
	if st.Answered < 10 {
		t.Fatalf("the capture has %d answered queries; the test needs some", st.Answered)
	}
	r := newRig(t, engine.Config{Slots: 4, GapWait: 2 * time.Second})
	rng := rand.New(rand.NewPCG(19, 19))
	for _, i := range rng.Perm(len(blocks)) {
		r.put("pcap", uint64(i+1), blocks[i])
	}
	r.mustAccept("job: pairs\nfrom: earliest\nstages:\n  - {name: p, inputs: [pcap], program: builtin:dnspairs, outputs: [dns.pairs], retention: forever}\n")
	r.wait("every block's transactions", func() bool { return r.count("dns.pairs") == int64(len(blocks)) })
	var got []string
	for seq := 1; seq <= len(blocks); seq++ {
		got = append(got, pairRows(t, r.read("dns.pairs", uint64(seq)))...)
	}
	slices.Sort(got)
	slices.Sort(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%d one-packet blocks: %d transactions, uncut %d\n got %q\nwant %q", len(blocks), len(got), len(want), got, want)
	}
	t.Logf("%d packets in as many blocks, shipped shuffled: %d transactions (%v), as uncut", len(frames), len(got), st)
}

// TestDNSCutAnywhereInParallel is issue 37's measure through the engine:
// every capture in testdata is a site of its own, cut into blocks of a
// size drawn between 1 and 100 packets and shipped in shuffled order.
// builtin:dns reads blocks apart from their neighbours on any free slot
// and joins their edges in sequence; every site's rows are the uncut
// capture's, and most runs were read in parallel with their neighbours.
func TestDNSCutAnywhereInParallel(t *testing.T) {
	for _, mode := range []string{"alone", "chained", "pairs"} {
		t.Run(mode, func(t *testing.T) { cutAnywhereInParallel(t, mode) })
	}
}

// cutAnywhereInParallel is TestDNSCutAnywhereInParallel, with builtin:dns
// alone ("alone"), chained after builtin:decode over snappy blocks
// ("chained"), or builtin:dnspairs ("pairs").
func cutAnywhereInParallel(t *testing.T, mode string) {
	chained := mode == "chained"
	paths, _ := filepath.Glob("../testdata/pcaps/*.pcap*")
	if len(paths) < 50 {
		t.Fatalf("%d captures", len(paths))
	}
	r := newRig(t, engine.Config{Slots: 4, GapWait: time.Hour})
	rng := rand.New(rand.NewPCG(37, 37))
	want := map[string][]string{}
	type put struct {
		site string
		seq  uint64
		data []byte
	}
	var puts []put
	for i, p := range paths {
		site := fmt.Sprintf("c%02d", i)
		link, cis, frames := captureFrames(t, filepath.Base(p))
		// The uncut rows, without the end-of-capture flush: what the last
		// block holds waits for the site's next block, as it would live.
		emit := func(r *dnsrec.Record) {
			want[site] = append(want[site], fmt.Sprintf("%d %04x %s", r.Time.UnixNano(), r.Msg.ID, r.Msg.QName))
		}
		if mode == "pairs" {
			emit = dnspair.New(func(tx *dnspair.Txn) { want[site] = append(want[site], pairRow(tx)) }).Add
		}
		x := dnsrec.NewExtractor(link, nil, emit)
		size := 1 + rng.IntN(1+rng.IntN(100)) // small sizes more often: more cuts
		for start, seq := 0, uint64(1); start < len(frames); start, seq = start+size, seq+1 {
			var b bytes.Buffer
			w, _ := pcap.NewWriter(&b, link, 65535, true)
			for i := start; i < min(start+size, len(frames)); i++ {
				w.WritePacket(cis[i], frames[i])
				x.Packet(cis[i].Timestamp, frames[i])
			}
			w.Flush()
			data := b.Bytes()
			if chained {
				data = snappy(t, data)
			}
			puts = append(puts, put{site, seq, data})
		}
	}
	queue, program, output := "pcap", "builtin:dns", "dns.arrow"
	switch mode {
	case "chained":
		queue, program = "pcap.sz", "[builtin:decode, builtin:dns]"
	case "pairs":
		program, output = "builtin:dnspairs", "dns.pairs"
	}
	for _, i := range rng.Perm(len(puts)) {
		p := puts[i]
		r.putName(block.Name{Time: time.Date(2025, 5, 5, 15, 0, 0, 0, time.UTC), Seq: p.seq, Instance: p.site, Queue: queue}, p.data)
	}
	r.mustAccept("job: dns\nfrom: earliest\nstages:\n  - {name: d, inputs: [" + queue + "], program: " + program + ", outputs: [" + output + "], retention: forever}\n")
	r.wait("every block's records", func() bool { return r.count(output) == int64(len(puts)) })
	got := map[string][]string{}
	for _, p := range puts {
		data := r.readName(t, block.Name{Time: time.Date(2025, 5, 5, 15, 0, 0, 0, time.UTC), Seq: p.seq, Instance: p.site, Queue: output}.String())
		if mode == "pairs" {
			got[p.site] = append(got[p.site], pairRows(t, data)...)
		} else {
			got[p.site] = append(got[p.site], dnsRows(t, data)...)
		}
	}
	for site, w := range want {
		g := got[site]
		slices.Sort(g)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Errorf("site %s: %d rows, uncut %d", site, len(g), len(w))
		}
	}
	st := r.eng.Stats()[0]
	t.Logf("%d captures in %d blocks shipped shuffled: every site's rows as uncut; %d of %d runs read apart from their site's sequence", len(paths), len(puts), st.Parted, st.Runs)
}

// TestCarryBoundsAgree: what a built-in may carry (its arguments are
// checked against stage.MaxCarry at submission) is what the metadata
// takes, so a job accepted never fails at its first commit.
func TestCarryBoundsAgree(t *testing.T) {
	if stage.MaxCarry != state.MaxCarry {
		t.Fatalf("stage.MaxCarry %d, state.MaxCarry %d", stage.MaxCarry, state.MaxCarry)
	}
}

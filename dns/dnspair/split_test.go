package dnspair

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// fullTxn is a transaction as the rows show it.
func fullTxn(tx *Txn) string {
	s := fmt.Sprintf("%v evicted=%v", tx.Key, tx.Evicted)
	if q := tx.Query; q != nil {
		s += fmt.Sprintf(" q=%s %d %q rtt=%v/%v", epoch(q.Time), q.Size, q.QName, q.TCPRTT, q.HasTCPRTT)
	}
	if r := tx.Response; r != nil {
		s += fmt.Sprintf(" r=%s %d %d %d", epoch(r.Time), r.Size, r.Msg.Rcode, len(r.Msg.Answer))
		for _, rr := range r.Msg.Answer {
			s += " " + rr.Name + "/" + rr.RData
		}
	}
	return s
}

// framesOf reads a capture's frames.
func framesOf(t *testing.T, in io.Reader) (layers.LinkType, []gopacket.CaptureInfo, [][]byte) {
	t.Helper()
	r, closer, err := pcap.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var cis []gopacket.CaptureInfo
	var frames [][]byte
	for {
		data, ci, err := r.Next()
		if err != nil {
			break
		}
		cis, frames = append(cis, ci), append(frames, slices.Clone(data))
	}
	return r.LinkType, cis, frames
}

// TestPairCutAnywhereInParallel is issue 37's rule for pairing: every
// block of a capture is read and paired on its own (here in shuffled
// order), and a join takes what they leave in sequence order. Cut into
// blocks of every size from 1 packet up, every capture in testdata gives
// exactly the transactions of the uncut capture, with windows that end
// inside the captures (1 s) and beyond them.
func TestPairCutAnywhereInParallel(t *testing.T) {
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	if len(captures) < 50 {
		t.Fatalf("%d captures", len(captures))
	}
	rng := rand.New(rand.NewPCG(37, 2))
	var inexact int64
	for _, c := range captures {
		f, err := os.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		link, cis, frames := framesOf(t, f)
		f.Close()
		inexact += cutAnywhere(t, rng, filepath.Base(c), link, cis, frames, []int{1, 2, 3, 5, 8, 13, 37, 100}, []time.Duration{time.Second, time.Hour})
	}
	// Generated sites: UDP and TCP, IPv4 and IPv6, 5,000 queries a
	// second; the attack mix adds floods never answered and TCP out of
	// order.
	attack := synth.Config{Seed: 38, Duration: 2 * time.Second, Rate: 5000, TCP: 0.3, IPv6: 0.4, EDNS: 0.7}
	synth.AttackMix(&attack)
	for name, cfg := range map[string]synth.Config{
		"normal": {Seed: 37, Duration: 2 * time.Second, Rate: 5000, TCP: 0.3, IPv6: 0.4, EDNS: 0.7},
		"attack": attack,
	} {
		var b bytes.Buffer
		w, _ := pcap.NewWriter(&b, layers.LinkTypeEthernet, 65535, false)
		if _, err := synth.Generate(t.Context(), w, cfg); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		link, cis, frames := framesOf(t, &b)
		inexact += cutAnywhere(t, rng, "generated "+name, link, cis, frames, []int{97, 1000, 10007}, []time.Duration{100 * time.Millisecond, 5 * time.Second})
	}
	t.Logf("decisions counted inexact: %d", inexact)
}

// cutAnywhere pairs one capture whole and cut every size packets, each
// block on its own in shuffled order and joined in sequence, and reports
// where the transactions differ; it returns the decisions the joins
// counted inexact.
func cutAnywhere(t *testing.T, rng *rand.Rand, name string, link layers.LinkType, cis []gopacket.CaptureInfo, frames [][]byte, sizes []int, windows []time.Duration) (inexact int64) {
	t.Helper()
	for _, window := range windows {
		var want []string
		p := New(func(tx *Txn) { want = append(want, fullTxn(tx)) })
		p.Window = window
		x := dnsrec.NewExtractor(link, nil, p.Add)
		for i := range frames {
			x.Packet(cis[i].Timestamp, frames[i])
		}
		x.Flush()
		p.Flush()
		slices.Sort(want)
		for _, size := range sizes {
			if size > len(frames) && size != 1 {
				continue
			}
			n := (len(frames) + size - 1) / size
			rows := make([][]string, n+1)
			dnsEdges := make([]*dnsrec.Edge, n)
			pairEdges := make([]*Edge, n)
			for _, b := range rng.Perm(n) {
				p := New(func(tx *Txn) { rows[b] = append(rows[b], fullTxn(tx)) })
				p.Window = window
				p.Split(16 << 20)
				var x *dnsrec.Extractor
				x = dnsrec.NewExtractor(link, nil, func(r *dnsrec.Record) { p.AddAt(r, int(x.Stats().Packets-1)) })
				x.SplitEdges(0)
				x.OnEdge(p.Taint)
				for i := b * size; i < min((b+1)*size, len(frames)); i++ {
					x.Packet(cis[i].Timestamp, frames[i])
				}
				dnsEdges[b], pairEdges[b] = x.Edge(), p.Edge()
			}
			var xs, ps []byte
			for b := range n {
				p := New(func(tx *Txn) { rows[b] = append(rows[b], fullTxn(tx)) })
				p.Window = window
				if err := p.LoadState(ps); err != nil {
					t.Fatal(err)
				}
				jn := p.Join(pairEdges[b])
				j := dnsrec.NewJoiner(nil, jn.Add)
				if err := j.LoadState(xs); err != nil {
					t.Fatal(err)
				}
				j.Before = jn.Before
				j.Join(dnsEdges[b])
				jn.End()
				inexact += jn.Inexact
				var err error
				if xs, err = j.SaveState(); err != nil {
					t.Fatal(err)
				}
				if ps, err = p.SaveState(); err != nil {
					t.Fatal(err)
				}
			}
			p := New(func(tx *Txn) { rows[n] = append(rows[n], fullTxn(tx)) })
			p.Window = window
			p.LoadState(ps)
			j := dnsrec.NewJoiner(nil, p.Add)
			j.LoadState(xs)
			j.Flush()
			p.Flush()
			got := slices.Concat(rows...)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				missing, extra := testenv.Lacking(want, got), testenv.Lacking(got, want)
				t.Errorf("%s (window %v) cut every %d packets: %d transactions, uncut %d\n missing %q\n extra %q", name, window,
					size, len(got), len(want), missing[:min(3, len(missing))], extra[:min(3, len(extra))])
				break
			}
		}
	}
	return inexact
}

// TestSplitIsBounded: what a block leaves to the join stays within its
// budget however many of its messages are between hosts its edge
// touches; past it the block decides alone, counts the decisions it
// made so, and every query still comes out once.
func TestSplitIsBounded(t *testing.T) {
	const budget = 64 << 10
	rows := map[string]int{}
	count := func(tx *Txn) { rows[describe(tx)]++ }
	p := New(count)
	p.Split(budget)
	p.Taint(0, client, server)
	const n = 10000
	for i := range n {
		p.AddAt(msg(time.Duration(i)*time.Microsecond, false, uint16(i), "a.example"), i+1)
	}
	e := p.Edge()
	if len(e.held)*(40+256) > budget || len(e.held) == 0 {
		t.Errorf("the block left %d messages to the join; its budget holds %d", len(e.held), budget/(40+256))
	}
	if e.Inexact != int64(n-len(e.held)) {
		t.Errorf("%d decisions counted inexact; %d of %d were made past the budget", e.Inexact, n-len(e.held), n)
	}
	j := New(count)
	jn := j.Join(e)
	jn.End()
	j.Flush()
	total, twice := 0, 0
	for _, k := range rows {
		if k != 1 {
			twice++
		}
		total += k
	}
	if twice > 0 {
		t.Errorf("%d queries came out more than once", twice)
	}
	if total != n {
		t.Errorf("%d queries came out of %d", total, n)
	}
}

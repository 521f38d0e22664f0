package dnspair

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/dns/dnsrec"
)

var (
	client = netip.MustParseAddr("192.0.2.1")
	server = netip.MustParseAddr("198.51.100.53")
	t0     = time.Date(2026, 5, 5, 15, 11, 5, 0, time.UTC)
)

// msg is a record of a message from the client (qr false) or the server.
func msg(at time.Duration, qr bool, id uint16, qname string) *dnsrec.Record {
	r := &dnsrec.Record{Time: t0.Add(at), Src: client, Dst: server, SrcPort: 40000, DstPort: 53, IPVersion: 4, Size: 40,
		Msg: dnsmsg.Message{ID: id, QR: qr, HasQuestion: qname != "", QName: qname, QType: 1, QClass: 1}}
	if qr {
		r.Src, r.Dst, r.SrcPort, r.DstPort = r.Dst, r.Src, r.DstPort, r.SrcPort
	}
	return r
}

// describe is a transaction as "query→response" offsets from t0, with
// "-" for a missing side and "!" for an eviction.
func describe(tx *Txn) string {
	q, r := "-", "-"
	if tx.Query != nil {
		q = tx.Query.Time.Sub(t0).String()
	}
	if tx.Response != nil {
		r = tx.Response.Time.Sub(t0).String()
	}
	if tx.Evicted {
		q = "!" + q
	}
	if tx.Retransmission {
		q = "↻" + q
	}
	return q + "→" + r
}

func TestPairing(t *testing.T) {
	for _, c := range []struct {
		name string
		recs []*dnsrec.Record
		max  int
		want []string
	}{
		{"answered", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(time.Millisecond, true, 1, "a.example")},
			0, []string{"0s→1ms"}},
		{"another id is an orphan", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(time.Millisecond, true, 2, "a.example")},
			0, []string{"-→1ms", "0s→-"}},
		{"another question is an orphan", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(time.Millisecond, true, 1, "b.example")},
			0, []string{"-→1ms", "0s→-"}},
		{"names compare without case (0x20)", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(time.Millisecond, true, 1, "A.Example")},
			0, []string{"0s→1ms"}},
		{"a response without a question pairs by id", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(time.Millisecond, true, 1, "")},
			0, []string{"0s→1ms"}},
		{"the first send takes the response; the resend is its own row", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(time.Second, false, 1, "a.example"),
			msg(time.Second+time.Millisecond, true, 1, "a.example")}, 0, []string{"↻1s→-", "0s→1.001s"}},
		{"a second response is an orphan, not the resend's", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(time.Second, false, 1, "a.example"),
			msg(time.Second+time.Millisecond, true, 1, "a.example"), msg(time.Second+2*time.Millisecond, true, 1, "a.example")}, 0,
			[]string{"↻1s→-", "0s→1.001s", "-→1.002s"}},
		{"sent again after 5s it is a new query, and the newer is answered", []*dnsrec.Record{msg(0, false, 1, "a.example"),
			msg(5*time.Second+time.Millisecond, false, 1, "a.example"), msg(5*time.Second+2*time.Millisecond, true, 1, "a.example")}, 0,
			[]string{"0s→-", "5.001s→5.002s"}},
		{"past the window a query is unanswered", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(6*time.Second, true, 1, "a.example")},
			0, []string{"0s→-", "-→6s"}},
		{"at the window's end it is still answered", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(5*time.Second, true, 1, "a.example")},
			0, []string{"0s→5s"}},
		{"full: the oldest is evicted", []*dnsrec.Record{msg(0, false, 1, "a.example"), msg(1, false, 2, "b.example"),
			msg(2, false, 3, "c.example"), msg(3, true, 1, "a.example"), msg(4, true, 3, "c.example")},
			2, []string{"!0s→-", "-→3ns", "2ns→4ns", "1ns→-"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			p := New(func(tx *Txn) { got = append(got, describe(tx)) })
			p.MaxPending = c.max
			for _, r := range c.recs {
				p.Add(r)
			}
			p.Flush()
			if !slices.Equal(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
			if p.Pending() != 0 {
				t.Errorf("%d still pending after Flush", p.Pending())
			}
		})
	}
}

// TestCutsDoNotChangeTransactions: on every capture in testdata, pairing
// blocks of 1, 2 and 7 packets, each going on from the previous one's
// state, gives exactly the transactions of the uncut capture.
func TestCutsDoNotChangeTransactions(t *testing.T) {
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	if len(captures) == 0 {
		t.Fatal("no captures in testdata/pcaps")
	}
	str := func(rows []txnRow) string {
		var s []string
		for _, r := range rows {
			s = append(s, fmt.Sprint(r))
		}
		slices.Sort(s)
		return strings.Join(s, "\n")
	}
	var n int
	for _, c := range captures {
		uncut, st := pairCapture(t, c, 0, DefaultWindow)
		for _, cut := range []int{1, 2, 7} {
			got, gst := pairCapture(t, c, cut, DefaultWindow)
			if str(got) != str(uncut) || gst != st {
				t.Errorf("%s cut every %d packets: %v, uncut %v", filepath.Base(c), cut, gst, st)
			}
		}
		n += len(uncut)
	}
	t.Logf("%d captures, %d transactions, the same however cut", len(captures), n)
}

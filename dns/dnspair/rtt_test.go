package dnspair

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/pcap"
)

// TestTxnTCPRTT: a transaction over TCP carries its query's tcp_rtt, the
// client's handshake round trip (which dnsrec's TestTCPRTTEqualsTshark
// holds to tshark's initial_rtt), in the transactions a Writer writes;
// a transaction whose query has none has a null.
func TestTxnTCPRTT(t *testing.T) {
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	type key struct {
		time int64
		port uint16
		id   uint16
	}
	var with, without int
	for _, capture := range captures {
		want := map[key]*dnsrec.Record{}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, "lax", 1)
		if err != nil {
			t.Fatal(err)
		}
		p := New(func(tx *Txn) {
			if err := w.Add(tx); err != nil {
				t.Fatal(err)
			}
		})
		f, err := os.Open(capture)
		if err != nil {
			t.Fatal(err)
		}
		r, closer, err := pcap.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		x := dnsrec.NewExtractor(r.LinkType, nil, func(rec *dnsrec.Record) {
			if !rec.Msg.QR {
				c := *rec
				want[key{rec.Time.UnixNano(), rec.SrcPort, rec.Msg.ID}] = &c
			}
			p.Add(rec)
		})
		for {
			data, ci, err := r.Next()
			if err != nil {
				break
			}
			x.Packet(ci.Timestamp, data)
		}
		x.Flush()
		p.Flush()
		closer.Close()
		f.Close()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		fr, err := ipc.NewFileReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < fr.NumRecords(); i++ {
			rec, err := fr.RecordBatch(i)
			if err != nil {
				t.Fatal(err)
			}
			col := func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) }
			times, ports, ids := col("time").(*array.Timestamp), col("client_port").(*array.Uint16), col("id").(*array.Uint16)
			rtts, orphans := col("tcp_rtt").(*array.Duration), col("orphan_response").(*array.Boolean)
			for j := 0; j < int(rec.NumRows()); j++ {
				if orphans.Value(j) {
					if rtts.IsValid(j) {
						t.Errorf("%s: an orphan response has tcp_rtt %v", filepath.Base(capture), rtts.Value(j))
					}
					continue
				}
				q := want[key{int64(times.Value(j)), ports.Value(j), ids.Value(j)}]
				switch {
				case q == nil:
					t.Fatalf("%s: no query at %d from port %d id %d", filepath.Base(capture), times.Value(j), ports.Value(j), ids.Value(j))
				case rtts.IsValid(j) != q.HasTCPRTT || q.HasTCPRTT && time.Duration(rtts.Value(j)) != q.TCPRTT:
					t.Errorf("%s: transaction of the query at %d id %d: tcp_rtt %v (valid %v); its query's %v (%v)", filepath.Base(capture),
						times.Value(j), ids.Value(j), time.Duration(rtts.Value(j)), rtts.IsValid(j), q.TCPRTT, q.HasTCPRTT)
				case q.HasTCPRTT:
					with++
				default:
					without++
				}
			}
		}
		fr.Close()
	}
	if with == 0 || without == 0 {
		t.Fatalf("%d transactions with a tcp_rtt, %d without; want both", with, without)
	}
	t.Logf("%d transactions carry their query's tcp_rtt; %d have none", with, without)
}

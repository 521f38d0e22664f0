package builtin

import (
	"bytes"
	"net/url"
	"testing"

	"github.com/plumb-dev/plumb/dns/dnspair"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/pcap"
)

// TestParquetOfSeveralBatches: a records or transactions block of more
// than one batch (a block read apart from its neighbours ends with the
// rows its edges complete, in a batch of their own) becomes Parquet with
// every row; such blocks were set aside as malformed ("index out of
// range" sorting them by time).
func TestParquetOfSeveralBatches(t *testing.T) {
	const name = "20250505-151105-00000007.lax.pcap"
	var rows []dnsrec.Record
	r, closer, err := pcap.NewReader(bytes.NewReader(dnsCapture(t, 1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	x := dnsrec.NewExtractor(r.LinkType, nil, func(rec *dnsrec.Record) { rows = append(rows, *rec) })
	for {
		data, ci, err := r.Next()
		if err != nil {
			break
		}
		x.Packet(ci.Timestamp, data)
	}
	var records, pairs bytes.Buffer
	rw, err := dnsrec.NewWriter(&records, "lax", 7)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := dnspair.NewWriter(&pairs, "lax", 7)
	if err != nil {
		t.Fatal(err)
	}
	p := dnspair.New(func(tx *dnspair.Txn) { pw.Add(tx) })
	for i := range rows {
		if i == len(rows)/2 {
			rw.Suspend()
			rw.Resume()
			pw.Suspend()
		}
		rw.Add(&rows[i])
		p.Add(&rows[i])
	}
	p.Flush()
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what  string
		arrow []byte
	}{{"records", records.Bytes()}, {"transactions", pairs.Bytes()}} {
		out := runAs(t, "parquet", url.Values{}, name, c.arrow)
		tbl, _ := readParquet(t, out)
		if want := arrowRows(t, c.arrow); tbl.NumRows() != want || want == 0 {
			t.Errorf("%s: %d rows in Parquet, %d in Arrow", c.what, tbl.NumRows(), want)
		}
		tbl.Release()
	}
}

package rssac

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/ipcguard"
	"github.com/plumb-dev/plumb/pcap"
)

// Window limits what a Day counts: messages in [From, To).
type Window struct{ From, To time.Time }

func (w Window) has(t time.Time) bool { return !t.Before(w.From) && t.Before(w.To) }

// UTCDay is the window of the UTC day holding t.
func UTCDay(t time.Time) Window {
	from := t.UTC().Truncate(24 * time.Hour)
	return Window{from, from.Add(24 * time.Hour)}
}

// arrowMagic starts an Arrow IPC file.
var arrowMagic = []byte("ARROW1")

// AddFile counts the messages of one input: an Arrow file of DNS records
// (a dns.arrow block) or a capture, told apart by their first bytes.
func (d *Day) AddFile(data []byte, w Window) error { return d.AddSampledFile(data, w, 1) }

// AddSampledFile is AddFile for a block of a capture sampled at one
// address pair in rate (block.Name.SampleRate): its messages are counted
// rate times. DNS records say their own rate (sample_rate), which wins.
func (d *Day) AddSampledFile(data []byte, w Window, rate uint32) error {
	if bytes.HasPrefix(data, arrowMagic) {
		return d.addArrow(data, w)
	}
	return d.addCapture(bytes.NewReader(data), w, int64(max(rate, 1)))
}

// maxArrowMemory bounds what one file's batches may decompress to while
// a day is counted: a block is anyone's upload.
const maxArrowMemory = 256 << 20

func (d *Day) addArrow(data []byte, w Window) error {
	f, err := ipcguard.OpenFile(data, maxArrowMemory)
	if err != nil {
		return fmt.Errorf("read DNS records: %w", err)
	}
	defer f.Close()
	for i := 0; i < f.NumRecords(); i++ {
		rec, err := f.RecordBatchAt(i) // ours to release
		if err != nil {
			return fmt.Errorf("read DNS records, batch %d: %w", i, err)
		}
		err = d.addBatch(rec, w)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

func column[T arrow.Array](rec arrow.RecordBatch, name string) (T, error) {
	var zero T
	idx := rec.Schema().FieldIndices(name)
	if len(idx) == 0 {
		return zero, fmt.Errorf("DNS records lack column %q; are these dns.arrow blocks?", name)
	}
	c, ok := rec.Column(idx[0]).(T)
	if !ok {
		return zero, fmt.Errorf("DNS records: column %q has type %s", name, rec.Column(idx[0]).DataType())
	}
	return c, nil
}

func (d *Day) addBatch(rec arrow.RecordBatch, w Window) error {
	ts, err1 := column[*array.Timestamp](rec, "time")
	src, err2 := column[*array.String](rec, "src")
	tr, err3 := column[arrow.Array](rec, "transport") // dictionary-encoded; once plain text
	ipv, err4 := column[*array.Uint8](rec, "ip_version")
	qr, err5 := column[*array.Boolean](rec, "qr")
	size, err6 := column[*array.Uint32](rec, "size")
	rcode, err7 := column[*array.Uint16](rec, "rcode")
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return err
	}
	rates, _ := column[*array.Uint32](rec, "sample_rate") // records before it had none: rate 1
	for i := 0; i < int(rec.NumRows()); i++ {
		t := time.Unix(0, int64(ts.Value(i))).UTC()
		if !w.has(t) || size.Value(i) < dnsmsg.HeaderLen {
			continue
		}
		a, _ := netip.ParseAddr(src.Value(i))
		var weight int64 = 1
		if rates != nil {
			weight = int64(rates.Value(i))
		}
		d.Add(Message{Time: t, Src: a, TCP: tr.ValueStr(i) == "tcp", IPv6: ipv.Value(i) == 6, Response: qr.Value(i),
			Size: int(size.Value(i)), Rcode: rcode.Value(i), Weight: weight})
	}
	return nil
}

func (d *Day) addCapture(r io.Reader, w Window, rate int64) error {
	pr, closer, err := pcap.NewReader(r)
	if err != nil {
		return err
	}
	defer closer.Close()
	x := dnsrec.NewExtractor(pr.LinkType, nil, func(rec *dnsrec.Record) {
		if w.has(rec.Time) && rec.Size >= dnsmsg.HeaderLen {
			d.Add(Message{Time: rec.Time, Src: rec.Src, TCP: rec.TCP, IPv6: rec.IPVersion == 6, Response: rec.Msg.QR,
				Size: rec.Size, Rcode: rec.Msg.Rcode, Weight: rate})
		}
	})
	for {
		data, ci, err := pr.Next()
		if err == io.EOF || errors.Is(err, pcap.ErrTruncated) {
			break
		}
		if err != nil {
			return err
		}
		x.Packet(ci.Timestamp, data)
	}
	x.Flush()
	return nil
}

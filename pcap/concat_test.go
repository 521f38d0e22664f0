package pcap

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/codecs"
)

// capture writes packets n..n+k-1 (their index in every byte) as a pcap.
func capture(t *testing.T, link layers.LinkType, nanos bool, first, k int) ([]byte, []pkt) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, link, 65535, nanos)
	if err != nil {
		t.Fatal(err)
	}
	var pkts []pkt
	for i := first; i < first+k; i++ {
		data := bytes.Repeat([]byte{byte(i)}, 60+i%40)
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1746457865, int64(i)*1000), CaptureLength: len(data), Length: len(data) + i%3}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, pkt{ci: ci, data: data})
	}
	w.Flush()
	return buf.Bytes(), pkts
}

// TestConcat: captures appended one after another read back as one
// capture with every packet in order, whatever their codec; a capture cut
// short keeps its whole packets; another link type is refused.
func TestConcat(t *testing.T) {
	a, pa := capture(t, layers.LinkTypeEthernet, false, 0, 50)
	b, pb := capture(t, layers.LinkTypeEthernet, false, 50, 30)
	var bsz bytes.Buffer
	zw, _ := codecs.Snappy.NewWriter(&bsz)
	zw.Write(b)
	zw.Close()
	c, pc := capture(t, layers.LinkTypeEthernet, false, 80, 10)
	c = c[:len(c)-5] // the last record cut short
	raw, err := os.ReadFile("../testdata/pcaps/tcpdump__LINKTYPE_IPV4.pcap")
	if err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	cc := NewConcat(&out)
	if cc.Flush() != nil || out.Len() != 0 || cc.Started() {
		t.Fatal("an empty Concat wrote something")
	}
	for i, in := range [][]byte{a, bsz.Bytes(), c} {
		if _, err := cc.Append(bytes.NewReader(in)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if _, err := cc.Append(bytes.NewReader(raw)); !errors.Is(err, ErrOtherLinkType) {
		t.Fatalf("appending a capture of another link type: %v", err)
	}
	cc.Flush()
	got, _, err := readAll(t, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]pkt{}, pa...), pb...), pc[:len(pc)-1]...)
	if len(got) != len(want) {
		t.Fatalf("%d packets, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i].data) || !got[i].ci.Timestamp.Equal(want[i].ci.Timestamp) || got[i].ci.Length != want[i].ci.Length {
			t.Fatalf("packet %d differs: %+v vs %+v", i, got[i].ci, want[i].ci)
		}
	}
}

package dnsrec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
)

// query is a DNS query for example.com, type A, with id.
func query(id uint16) []byte {
	m := binary.BigEndian.AppendUint16(nil, id)
	m = append(m, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0) // RD; one question
	m = append(m, 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1)
	return m
}

// v6Fragments is a UDP DNS query over IPv6 whose fragmentable part starts
// with a Destination Options header, cut into two fragments.
func v6Fragments(id uint16) [][]byte {
	src := []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}
	dst := []byte{0x20, 0x01, 0x0d, 0xb8, 15: 0x53}
	dns := query(id)
	udp := binary.BigEndian.AppendUint16(nil, 40000)
	udp = binary.BigEndian.AppendUint16(udp, 53)
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(dns)))
	udp = append(udp, 0, 0)
	part := append([]byte{17, 0, 1, 4, 0, 0, 0, 0}, udp...) // destination options: PadN
	part = append(part, dns...)
	var frames [][]byte
	for _, cut := range [][2]int{{0, 24}, {24, len(part)}} {
		data := part[cut[0]:cut[1]]
		frag := []byte{60, 0, 0, 0, 0, 0, 0xbe, 0xef}
		off := uint16(cut[0]/8) << 3
		if cut[1] < len(part) {
			off |= 1
		}
		binary.BigEndian.PutUint16(frag[2:], off)
		ip := []byte{0x60, 0, 0, 0, 0, 0, 44, 64}
		binary.BigEndian.PutUint16(ip[4:], uint16(8+len(data)))
		ip = append(append(append(ip, src...), dst...), frag...)
		eth := []byte{0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x86, 0xdd}
		frames = append(frames, append(append(eth, ip...), data...))
	}
	return frames
}

// TestIPv6OptionsAfterFragment: a Destination Options header after the
// Fragment header was ignored after reassembly, so the message was lost
// where tshark decodes it. Plumb now finds it, at the time of the frame
// that completed the datagram, as tshark does.
func TestIPv6OptionsAfterFragment(t *testing.T) {
	tshark := testenv.Tool(t, "tshark")
	var b bytes.Buffer
	w, _ := pcap.NewWriter(&b, layers.LinkTypeEthernet, 65535, true)
	at := time.Unix(1746457865, 123456789)
	for i, f := range v6Fragments(0xbeef) {
		w.WritePacket(gopacket.CaptureInfo{Timestamp: at.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(f), Length: len(f)}, f)
	}
	w.Flush()
	path := filepath.Join(t.TempDir(), "v6frag.pcap")
	os.WriteFile(path, b.Bytes(), 0o644)
	out, err := exec.Command(tshark, "-r", path, "-n", "-Y", "dns", "-T", "fields", "-e", "frame.time_epoch", "-e", "dns.id", "-e", "dns.qry.name").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	want := strings.TrimSpace(string(out))
	var got []string
	x := NewExtractor(layers.LinkTypeEthernet, nil, func(r *Record) {
		got = append(got, fmt.Sprintf("%d.%09d\t0x%04x\t%s", r.Time.Unix(), r.Time.Nanosecond(), r.Msg.ID, normName(r.Msg.QName)))
	})
	rd, closer, _ := pcap.NewReader(bytes.NewReader(b.Bytes()))
	defer closer.Close()
	for {
		data, ci, err := rd.Next()
		if err != nil {
			break
		}
		x.Packet(ci.Timestamp, data)
	}
	x.Flush()
	if strings.Join(got, "\n") != want || want == "" {
		t.Errorf("Plumb: %q\ntshark: %q", got, want)
	}
}

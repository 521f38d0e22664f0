package dnsrec

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
)

// encapsulate wraps every Ethernet frame of a capture in VXLAN or Geneve
// (outer Ethernet, IPv4, UDP to the tunnel's port) and writes the result
// as a capture in dir.
func encapsulate(t *testing.T, capture, tunnel, dir string) string {
	t.Helper()
	link, cis, frames := packetsOf(t, capture)
	if link != layers.LinkTypeEthernet {
		t.Fatalf("%s: link type %s; the test wraps Ethernet frames", capture, link)
	}
	out := filepath.Join(dir, tunnel+"-"+filepath.Base(capture))
	var b bytes.Buffer
	w, err := pcap.NewWriter(&b, layers.LinkTypeEthernet, 65535, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, frame := range frames {
		ci := cis[i]
		var hdr []byte
		port := layers.UDPPort(4789)
		switch tunnel {
		case "vxlan":
			hdr = []byte{0x08, 0, 0, 0, 0, 0x01, 0x23, 0} // I flag, VNI 0x123
		case "geneve":
			port = 6081
			// An 8-byte option (one 4-byte word of header + data) to step over.
			hdr = []byte{0x02, 0, 0x65, 0x58, 0, 0x04, 0x56, 0, 0x01, 0x02, 0x03, 0x01, 0xde, 0xad, 0xbe, 0xef}
		}
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, Id: uint16(i),
			SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
		udp := &layers.UDP{SrcPort: layers.UDPPort(40000 + i%1000), DstPort: port}
		udp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			eth, ip, udp, gopacket.Payload(append(hdr, frame...))); err != nil {
			t.Fatal(err)
		}
		ci.CaptureLength, ci.Length = len(buf.Bytes()), len(buf.Bytes())
		if err := w.WritePacket(ci, buf.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTunnels: DNS over UDP and over TCP carried in VXLAN and in Geneve
// gives the rows of the capture as sent, each marked with its tunnel,
// and tshark (which opens both tunnels on their ports) finds the same
// messages in the wrapped captures.
func TestTunnels(t *testing.T) {
	tshark := testenv.Tool(t, "tshark")
	dir := t.TempDir()
	for _, name := range []string{"dnscap__dns.pcap", "dnscap__dnso1tcp.pcap"} {
		plain := filepath.Join("../../testdata/pcaps", name)
		want, _, _ := extract(t, plain)
		for _, tunnel := range []string{"vxlan", "geneve"} {
			wrapped := encapsulate(t, plain, tunnel, dir)
			var got []row
			var tunnels []string
			st := eachRecord(t, wrapped, func(rec *Record) {
				tr := "udp"
				if rec.TCP {
					tr = "tcp"
				}
				got = append(got, row{tr, rec.Msg.ID, rec.Msg.QR, normName(rec.Msg.QName), rec.Msg.Rcode & 0xf, frameTime(rec)})
				tunnels = append(tunnels, rec.Tunnel)
			})
			if missing, extra := diff(got, want); len(missing)+len(extra) > 0 || len(got) == 0 {
				t.Errorf("%s in %s: %d rows, %d as sent; missing %v; extra %v", name, tunnel, len(got), len(want), head(missing), head(extra))
			}
			if slices.ContainsFunc(tunnels, func(s string) bool { return s != tunnel }) {
				t.Errorf("%s in %s: rows marked %v", name, tunnel, slices.Compact(tunnels))
			}
			if st.Tunneled == 0 {
				t.Errorf("%s in %s: stats count no tunneled packet: %+v", name, tunnel, st)
			}
			// tshark's view of the wrapped capture: the same messages.
			out, err := testenv.Command(t, time.Minute, tshark, "-n", "-r", wrapped, "-o", "tcp.desegment_tcp_streams:TRUE",
				"-Y", "dns", "-T", "fields", "-E", "separator=/t", "-E", "aggregator=,", "-e", "frame.time_epoch",
				"-e", "dns.id").Output()
			if err != nil {
				t.Fatalf("tshark -r %s: %v", wrapped, err)
			}
			var theirs, ours []string
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				ts, ids, _ := strings.Cut(line, "\t")
				for _, id := range strings.Split(ids, ",") {
					var v uint16
					fmt.Sscanf(id, "0x%x", &v)
					theirs = append(theirs, fmt.Sprintf("%s %04x", ts, v))
				}
			}
			for _, r := range got {
				ours = append(ours, fmt.Sprintf("%s %04x", r.time, r.id))
			}
			slices.Sort(theirs)
			slices.Sort(ours)
			if !slices.Equal(theirs, ours) {
				t.Errorf("%s in %s: Plumb %d messages, tshark %d; Plumb %v…, tshark %v…", name, tunnel, len(ours), len(theirs), head(ours), head(theirs))
			}
		}
	}
}

// TestClientOnTunnelPort: a DNS client whose source port happens to be
// a tunnel's (4789, 6081) still gets its responses as rows. The
// response's destination is that port, yet it comes from port 53: a
// tunnel is told by the port it is sent to, never by a DNS message's.
func TestClientOnTunnelPort(t *testing.T) {
	plain := "../../testdata/pcaps/dnscap__dns.pcap"
	want, _, _ := extract(t, plain)
	link, cis, frames := packetsOf(t, plain)
	var b bytes.Buffer
	w, err := pcap.NewWriter(&b, link, 65535, true)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for i, frame := range frames {
		pkt := gopacket.NewPacket(frame, link, gopacket.Default)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp != nil {
			port := layers.UDPPort([]int{4789, 6081}[i%2])
			switch {
			case udp.DstPort == 53:
				udp.SrcPort = port
			case udp.SrcPort == 53:
				udp.DstPort = port
			}
			if nl, ok := pkt.NetworkLayer().(gopacket.NetworkLayer); ok {
				udp.SetNetworkLayerForChecksum(nl)
			}
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializePacket(buf, gopacket.SerializeOptions{ComputeChecksums: true}, pkt); err != nil {
				t.Fatal(err)
			}
			frame = buf.Bytes()
			moved++
		}
		ci := cis[i]
		ci.CaptureLength, ci.Length = len(frame), len(frame)
		if err := w.WritePacket(ci, frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tunnel-ports.pcap")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, _, st := extract(t, path)
	if missing, extra := diff(got, want); len(missing)+len(extra) > 0 || moved == 0 {
		t.Errorf("clients on ports 4789 and 6081 (%d packets moved): %d rows, %d as captured; missing %v; extra %v (stats %+v)",
			moved, len(got), len(want), head(missing), head(extra), st)
	}
}

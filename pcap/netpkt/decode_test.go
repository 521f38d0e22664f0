package netpkt

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// frame serialises layers with gopacket, an independent encoder.
func frame(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

var (
	eth  = &layers.Ethernet{SrcMAC: make([]byte, 6), DstMAC: make([]byte, 6), EthernetType: layers.EthernetTypeIPv4}
	ip4  = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: []byte{192, 0, 2, 1}, DstIP: []byte{192, 0, 2, 53}}
	udp  = &layers.UDP{SrcPort: 40000, DstPort: 53}
	body = gopacket.Payload("hello dns")
)

func TestDecodeLinkTypes(t *testing.T) {
	udp.SetNetworkLayerForChecksum(ip4)
	plain := frame(t, eth, ip4, udp, body)
	vlan := frame(t, &layers.Ethernet{SrcMAC: eth.SrcMAC, DstMAC: eth.DstMAC, EthernetType: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 11, Type: layers.EthernetTypeIPv4}, ip4, udp, body)
	ipOnly := plain[14:]
	sll2 := append(make([]byte, 20), ipOnly...)
	binary.BigEndian.PutUint16(sll2, 0x0800)
	loop := append([]byte{2, 0, 0, 0}, ipOnly...)
	pktap := append(make([]byte, 8), plain...)
	binary.LittleEndian.PutUint32(pktap, 8)
	binary.LittleEndian.PutUint32(pktap[4:], uint32(layers.LinkTypeEthernet))
	padded := append(bytes.Clone(plain), 0, 0, 0, 0, 0, 0) // Ethernet trailer
	for _, c := range []struct {
		name string
		link layers.LinkType
		data []byte
	}{
		{"ethernet", layers.LinkTypeEthernet, plain},
		{"vlan", layers.LinkTypeEthernet, vlan},
		{"raw", layers.LinkTypeRaw, ipOnly},
		{"ipv4", layers.LinkTypeIPv4, ipOnly},
		{"sll2", layers.LinkTypeLinuxSLL2, sll2},
		{"null", layers.LinkTypeNull, loop},
		{"pktap", 258, pktap},
		{"padded", layers.LinkTypeEthernet, padded},
	} {
		var p Packet
		if err := Decode(c.link, c.data, &p); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if p.Src != netip.MustParseAddr("192.0.2.1") || p.DstPort != 53 || string(p.Payload) != "hello dns" || p.Proto != ProtoUDP {
			t.Errorf("%s: %+v", c.name, p)
		}
	}
	var p Packet
	if err := Decode(layers.LinkTypeEthernet, plain[:30], &p); err == nil {
		t.Error("cut frame decoded")
	}
	if err := Decode(layers.LinkType(147), plain, &p); err == nil {
		t.Error("unknown link type decoded")
	}
}

func TestDefragOrdersDuplicatesAndTimeouts(t *testing.T) {
	whole := bytes.Repeat([]byte("0123456789abcdef"), 10) // 160 bytes of UDP payload
	udpHdr := make([]byte, 8)
	binary.BigEndian.PutUint16(udpHdr, 5353)
	binary.BigEndian.PutUint16(udpHdr[2:], 53)
	binary.BigEndian.PutUint16(udpHdr[4:], uint16(8+len(whole)))
	dgram := append(udpHdr, whole...)
	piece := func(off, n int, more bool) Packet {
		return Packet{IPVersion: 4, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), Proto: ProtoUDP,
			Fragment: true, FragID: 7, FragOffset: off, MoreFrags: more, Payload: dgram[off : off+n]}
	}
	t0 := time.Unix(0, 0)
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 1, 2}, {2, 0, 0, 1}} {
		var d Defrag
		pieces := []Packet{piece(0, 64, true), piece(64, 64, true), piece(128, len(dgram)-128, false)}
		done := 0
		for _, i := range order {
			p := pieces[i]
			if d.Add(t0, &p) {
				done++
				if !bytes.Equal(p.Payload, whole) || p.DstPort != 53 {
					t.Errorf("order %v: payload %q", order, p.Payload)
				}
			}
		}
		if done != 1 || d.Pending() != 0 {
			t.Errorf("order %v: %d datagrams, %d pending", order, done, d.Pending())
		}
	}
	// A datagram whose last piece comes after the timeout is dropped.
	var d Defrag
	p1, p2, p3 := piece(0, 64, true), piece(64, 64, true), piece(128, len(dgram)-128, false)
	d.Add(t0, &p1)
	d.Add(t0, &p2)
	if d.Add(t0.Add(time.Minute), &p3) {
		t.Error("joined fragments a minute apart")
	}
	// Overlaps: the first arrival wins.
	var o Defrag
	a := piece(0, 128, true)
	evil := Packet(a)
	evil.FragOffset, evil.Payload = 64, bytes.Repeat([]byte("X"), 64)
	last := piece(128, len(dgram)-128, false)
	o.Add(t0, &a)
	o.Add(t0, &evil)
	if !o.Add(t0, &last) || !bytes.Equal(last.Payload, whole) {
		t.Errorf("overlap rewrote earlier bytes: %q", last.Payload)
	}
}

func FuzzDecode(f *testing.F) {
	udp.SetNetworkLayerForChecksum(ip4)
	f.Add(uint16(layers.LinkTypeEthernet), frame(f, eth, ip4, udp, body))
	f.Add(uint16(layers.LinkTypeRaw), frame(f, &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolUDP, HopLimit: 1,
		SrcIP: netip.MustParseAddr("2001:db8::1").AsSlice(), DstIP: netip.MustParseAddr("2001:db8::2").AsSlice()}, udp, body))
	f.Add(uint16(258), []byte{8, 0, 0, 0, 1, 0, 0, 0})
	vxlan := &layers.UDP{SrcPort: 40000, DstPort: PortVXLAN}
	vxlan.SetNetworkLayerForChecksum(ip4)
	f.Add(uint16(layers.LinkTypeEthernet), frame(f, eth, ip4, vxlan,
		gopacket.Payload(append([]byte{8, 0, 0, 0, 0, 0, 1, 0}, frame(f, eth, ip4, udp, body)...))))
	f.Fuzz(func(t *testing.T, link uint16, data []byte) {
		var p Packet
		if Decode(layers.LinkType(link), data, &p) != nil {
			return
		}
		// Whatever decodes points inside the frame, through tunnels too.
		for range 4 {
			if len(p.Payload) > len(data) {
				t.Fatalf("payload of %d bytes from a %d-byte frame", len(p.Payload), len(data))
			}
			if TunnelOf(&p) == "" || Decap(&p) != nil {
				break
			}
		}
		var d Defrag
		d.Partial = func(_ time.Time, p *Packet) {
			if len(p.Payload) > len(data) {
				t.Fatalf("partial payload of %d bytes from a %d-byte frame", len(p.Payload), len(data))
			}
		}
		if p.Fragment {
			d.Add(time.Unix(0, 0), &p)
			d.Flush()
		}
	})
}

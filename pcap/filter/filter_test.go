package filter

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
)

type frame struct {
	ci   gopacket.CaptureInfo
	data []byte
}

// expressions is the table both compilers are held to. Addresses are
// ones the captures and the generated packets hold.
var expressions = []string{
	"", "ip", "ip6", "arp", "rarp", "tcp", "udp", "sctp", "icmp", "icmp6",
	"port 53", "udp port 53", "tcp port 53", "src port 53", "dst port 53", "port 53 or 853",
	"not port 53", "portrange 1000-2000", "src portrange 1-1024", "dst portrange 30000-65535",
	"host 8.8.8.8", "src host 8.8.8.8", "dst 8.8.8.8", "host 192.168.1.1 or 10.0.0.1", "ip host 10.0.0.1", "arp host 10.0.0.1",
	"net 10.0.0.0/8", "net 192.168", "src net 192.168.0.0/16", "net 0.0.0.0/0", "dst net 8",
	"host 2001:db8::1", "net 2001:db8::/32", "src net 2001:db8:0:1::/64", "ip6 host 2001:db8::53",
	"ip6 and udp", "ip and not udp", "tcp or udp and port 53", "not (udp and port 53)", "!tcp && (port 53 || port 853)",
	"proto 17", "ip proto 6", "ip6 proto 17", "ip6 proto 58",
	"vlan", "vlan and udp", "vlan 100 and port 53", "udp or vlan and tcp",
	"src or dst host 8.8.8.8", "src and dst net 10.0.0.0/8", "tcp src port 53", "udp dst portrange 53-853",
	// Relations over packet bytes: DNS queries or responses only, SYNs,
	// fragments, sizes, and arithmetic as tcpdump users write it.
	"udp[10] & 0x80 = 0", "udp[10] & 0x80 != 0", "udp port 53 and udp[10] & 0x80 = 0", "tcp[13] & 2 != 0",
	"tcp[tcpflags] & tcp-syn != 0", "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn", "tcp[13] = 0x12",
	"ip[6:2] & 0x1fff != 0", "ip[6] & 0x20 != 0", "ip[0] & 0xf > 5", "ip[8] < 64", "ip[2:2] > 576",
	"len > 512", "len <= 100", "len >= 60 and len < 1500", "len - 14 > 100",
	"ip6[6] = 17", "ip6[4:2] > 100", "icmp[icmptype] = icmp-echo", "icmp[0] != 8", "icmp6[icmp6type] = icmp6-echo",
	"ether[0] & 1 != 0", "ether[12:2] = 0x86dd", "link[12:2] = 0x800",
	"udp[8:2] & 0x7800 = 0", "udp[0:2] = 53 or udp[2:2] = 53", "tcp[(tcp[12] >> 4) * 4 + 2:2] > 0",
	"ip[2:2] - ((ip[0] & 0xf) << 2) > 100", "udp[4:2] - 8 > 512", "udp[4:2] / 2 > 50", "udp[4:2] % 7 = 3",
	"ip[1] ^ 0xff != 0xff", "-ip[8] > 0", "(udp[10] & 0x78) >> 3 = 0", "not udp[10] & 0x80 = 0", "ip[0] & 0xf0 = 0x40 and ip[9] = 17",
	"udp[len - 100] > 0", "2 + 3 * 4 = ip[9] - 3",
}

// TestAgainstTcpdump: for every expression, the compiled program keeps
// exactly the frames tcpdump's (libpcap's) compiled filter keeps, over
// every capture in testdata (per link type) and over generated packets
// (fragments, VLAN tags, ARP, SCTP, IPv6 fragment headers, IP options).
//
// Frames cut short inside a header the filter reads are the one place
// the two may differ, and only one way: a load past a frame's end rejects
// it (as in the kernel), and libpcap's optimizer drops some loads whose
// result it can infer, so it may keep such a frame where this compiler
// rejects it. TestCutFramesNeverWider holds that: never kept more.
func TestAgainstTcpdump(t *testing.T) {
	tcpdump := testenv.Tool(t, "tcpdump")
	byLink := map[layers.LinkType][]frame{}
	files, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		r, closer, err := pcap.NewReader(bytes.NewReader(raw))
		if err != nil {
			continue
		}
		for {
			data, ci, err := r.Next()
			if err != nil {
				break
			}
			byLink[r.LinkType] = append(byLink[r.LinkType], frame{ci, bytes.Clone(data)})
		}
		closer.Close()
	}
	byLink[layers.LinkTypeEthernet] = append(byLink[layers.LinkTypeEthernet], generated(3000, false)...)
	links := make([]layers.LinkType, 0, len(byLink))
	for l := range byLink {
		links = append(links, l)
	}
	sort.Slice(links, func(i, j int) bool { return links[i] < links[j] })
	checked := 0
	for _, link := range links {
		frames := byLink[link]
		if _, err := Compile("port 53", link); err != nil {
			if !strings.Contains(err.Error(), "has no filter compiler here") {
				t.Errorf("link type %s: %v", link, err)
			}
			continue
		}
		in := filepath.Join(t.TempDir(), "in.pcap")
		writeFrames(t, in, link, frames)
		for _, expr := range expressions {
			want, ok := tcpdumpKeeps(t, tcpdump, in, expr)
			f, err := Compile(expr, link)
			if !ok {
				// libpcap refuses it for this link type (say, vlan on raw
				// IP, or an expression it proves keeps nothing): ours keeps
				// nothing, or refuses it too.
				if err == nil {
					for _, fr := range frames {
						if f.MatchLen(fr.data, fr.ci.Length) {
							t.Errorf("%s on %s: tcpdump refuses it, ours keeps frames", expr, link)
							break
						}
					}
				}
				continue
			}
			if err != nil {
				t.Errorf("%s on %s: tcpdump compiles it, ours: %v", expr, link, err)
				continue
			}
			var got []frame
			for _, fr := range frames {
				if f.MatchLen(fr.data, fr.ci.Length) {
					got = append(got, fr)
				}
			}
			if len(got) != len(want) {
				t.Errorf("%q on %s (%d frames): tcpdump keeps %d, ours %d", expr, link, len(frames), len(want), len(got))
				continue
			}
			for i := range got {
				if !bytes.Equal(got[i].data, want[i].data) || !got[i].ci.Timestamp.Equal(want[i].ci.Timestamp) {
					t.Errorf("%q on %s: kept frame %d differs", expr, link, i)
					break
				}
			}
			checked++
		}
	}
	t.Logf("%d expression × link type pairs agree with tcpdump", checked)
	if checked < 3*len(expressions) {
		t.Errorf("only %d pairs checked", checked)
	}
}

// tcpdumpKeeps runs tcpdump's filter over a capture; ok is false when
// tcpdump refuses the expression.
func tcpdumpKeeps(t *testing.T, tcpdump, in, expr string) ([]frame, bool) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.pcap")
	args := []string{"-n", "-r", in, "-w", out}
	if expr != "" {
		args = append(args, "--", expr) // "-ip[8] > 0" is no option
	}
	if msg, err := testenv.Command(t, time.Minute, tcpdump, args...).CombinedOutput(); err != nil {
		if strings.Contains(string(msg), "syntax error") {
			t.Fatalf("tcpdump finds %q malformed: %s", expr, msg)
		}
		return nil, false
	}
	raw, _ := os.ReadFile(out)
	r, closer, err := pcap.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var fs []frame
	for {
		data, ci, err := r.Next()
		if err != nil {
			return fs, true
		}
		fs = append(fs, frame{ci, bytes.Clone(data)})
	}
}

func writeFrames(t *testing.T, path string, link layers.LinkType, fs []frame) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := pcap.NewWriter(f, link, 262144, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range fs {
		if err := w.WritePacket(fr.ci, fr.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestCutFramesNeverWider: on frames cut short at any length, the
// compiled filter keeps no frame tcpdump's does not.
func TestCutFramesNeverWider(t *testing.T) {
	tcpdump := testenv.Tool(t, "tcpdump")
	frames := generated(3000, true)
	in := filepath.Join(t.TempDir(), "cut.pcap")
	writeFrames(t, in, layers.LinkTypeEthernet, frames)
	narrower := 0
	for _, expr := range expressions {
		want, ok := tcpdumpKeeps(t, tcpdump, in, expr)
		f, err := Compile(expr, layers.LinkTypeEthernet)
		if !ok || err != nil {
			continue
		}
		j := 0
		for _, fr := range frames {
			kept := j < len(want) && bytes.Equal(want[j].data, fr.data) && want[j].ci.Timestamp.Equal(fr.ci.Timestamp)
			if kept {
				j++
			}
			switch m := f.MatchLen(fr.data, fr.ci.Length); {
			case m && !kept:
				t.Fatalf("%q keeps a cut frame tcpdump does not: % x", expr, fr.data)
			case !m && kept:
				narrower++
			}
		}
	}
	t.Logf("%d cut frames kept by tcpdump's optimized filters and not by ours", narrower)
}

// generated makes Ethernet frames of many kinds from small pools of
// addresses and ports; with cut, every frame is cut short at a random
// length, as a small snap length would.
func generated(n int, cut bool) []frame {
	r := rand.New(rand.NewPCG(7, 7))
	v4 := []string{"8.8.8.8", "10.0.0.1", "10.1.2.3", "192.168.1.1", "192.168.200.9", "198.51.100.7", "8.1.1.1"}
	v6 := []string{"2001:db8::1", "2001:db8::53", "2001:db8:0:1::7", "2001:db9::1", "fe80::1"}
	ports := []uint16{53, 853, 80, 1000, 1500, 2000, 2001, 40000, 65535, 1, 1024}
	pick := func(s []string) net.IP { return net.ParseIP(s[r.IntN(len(s))]) }
	var out []frame
	t0 := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	for i := range n {
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
		var ls []gopacket.SerializableLayer
		ls = append(ls, eth)
		if r.IntN(6) == 0 {
			eth.EthernetType = layers.EthernetTypeDot1Q
			ls = append(ls, &layers.Dot1Q{VLANIdentifier: uint16([]int{100, 200}[r.IntN(2)])})
		}
		setType := func(et layers.EthernetType) {
			if d, ok := ls[len(ls)-1].(*layers.Dot1Q); ok {
				d.Type = et
			} else {
				eth.EthernetType = et
			}
		}
		payload := gopacket.Payload(bytes.Repeat([]byte{byte(i)}, r.IntN(40)))
		var transport []gopacket.SerializableLayer
		proto := []layers.IPProtocol{layers.IPProtocolUDP, layers.IPProtocolTCP, layers.IPProtocolSCTP, layers.IPProtocolICMPv4, 47}[r.IntN(5)]
		sp, dp := layers.UDPPort(ports[r.IntN(len(ports))]), layers.UDPPort(ports[r.IntN(len(ports))])
		switch kind := r.IntN(10); {
		case kind == 0: // ARP or RARP
			setType([]layers.EthernetType{layers.EthernetTypeARP, 0x8035}[r.IntN(2)])
			ls = append(ls, &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
				Operation: 1, SourceHwAddress: eth.SrcMAC, SourceProtAddress: pick(v4).To4(), DstHwAddress: eth.DstMAC, DstProtAddress: pick(v4).To4()})
		case kind < 6: // IPv4
			setType(layers.EthernetTypeIPv4)
			ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: pick(v4).To4(), DstIP: pick(v4).To4()}
			if r.IntN(5) == 0 {
				ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
			}
			switch r.IntN(6) {
			case 0:
				ip.Flags, ip.FragOffset = layers.IPv4MoreFragments, uint16(r.IntN(3))
			case 1:
				ip.Flags = layers.IPv4DontFragment
			}
			ls = append(ls, ip)
			transport = l4(proto, sp, dp, ip)
		default: // IPv6, sometimes with a fragment header
			setType(layers.EthernetTypeIPv6)
			if proto == layers.IPProtocolICMPv4 {
				proto = layers.IPProtocolICMPv6
			}
			ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: pick(v6), DstIP: pick(v6)}
			ls = append(ls, ip)
			if r.IntN(4) == 0 {
				ip.NextHeader = layers.IPProtocolIPv6Fragment
				ls = append(ls, &layers.IPv6Fragment{NextHeader: proto, FragmentOffset: uint16(r.IntN(2)), MoreFragments: true, Identification: 9})
			}
			transport = l4(proto, sp, dp, ip)
		}
		ls = append(ls, transport...)
		ls = append(ls, payload)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
			panic(fmt.Sprint(err))
		}
		data := buf.Bytes()
		length := len(data)
		if cut { // loads past the end reject, as in the kernel
			data = data[:r.IntN(len(data))]
		}
		out = append(out, frame{gopacket.CaptureInfo{Timestamp: t0.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(data), Length: length}, bytes.Clone(data)})
	}
	return out
}

func l4(proto layers.IPProtocol, sp, dp layers.UDPPort, ip gopacket.NetworkLayer) []gopacket.SerializableLayer {
	switch proto {
	case layers.IPProtocolUDP:
		u := &layers.UDP{SrcPort: sp, DstPort: dp}
		u.SetNetworkLayerForChecksum(ip)
		return []gopacket.SerializableLayer{u}
	case layers.IPProtocolTCP:
		tc := &layers.TCP{SrcPort: layers.TCPPort(sp), DstPort: layers.TCPPort(dp), Window: 1000, DataOffset: 5}
		tc.SetNetworkLayerForChecksum(ip)
		return []gopacket.SerializableLayer{tc}
	case layers.IPProtocolSCTP:
		return []gopacket.SerializableLayer{gopacket.Payload([]byte{byte(sp >> 8), byte(sp), byte(dp >> 8), byte(dp), 0, 0, 0, 1, 0, 0, 0, 0})}
	case layers.IPProtocolICMPv4:
		return []gopacket.SerializableLayer{&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0)}}
	case layers.IPProtocolICMPv6:
		return []gopacket.SerializableLayer{gopacket.Payload([]byte{128, 0, 0, 0})}
	}
	return nil
}

// TestRefusals: what is outside the subset is refused with a message
// naming it, never compiled to something wider.
func TestRefusals(t *testing.T) {
	for expr, want := range map[string]string{
		"ether host 02:00:00:00:00:01": `"ether"`,
		"tcp[13:3] & 2 != 0":           "1, 2 or 4 bytes",
		"ip[0] / 0 > 1":                "division by zero",
		"ip[0] << 32 > 1":              "more than 31 bits",
		"ip[0] & 1":                    "a comparison",
		"ip[0 = 1":                     "] is missing",
		"udp[10] & 0x80 ~ 0":           "where a comparison",
		"greater 100":                  `"greater"`,
		"host www.example.com":         "names are not resolved",
		"port domain":                  "service names are not looked up",
		"port 70000":                   "0 to 65535",
		"portrange 10":                 "LOW-HIGH",
		"net 10.0.0.1/8":               "host bits set",
		"udp port":                     "a value is missing",
		"(udp":                         "not closed",
		"udp and":                      "ends where a test should be",
		"udp )":                        `unexpected ")"`,
		"vlan 5000":                    "0 to 4095",
		"icmp port 53":                 "unexpected",
		"gateway 10.0.0.1":             `"gateway"`,
	} {
		_, err := Compile(expr, layers.LinkTypeEthernet)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", expr, err, want)
		}
	}
	if _, err := Compile("vlan", layers.LinkTypeRaw); err == nil || !strings.Contains(err.Error(), "raw IP") {
		t.Errorf("vlan on raw IP: %v", err)
	}
	if _, err := Compile("udp", 258); err == nil || !strings.Contains(err.Error(), "no filter compiler") {
		t.Errorf("PKTAP: %v", err)
	}
}

// FuzzCompile: any text either compiles to a program the kernel would
// take, or is refused; the compiler never panics.
func FuzzCompile(f *testing.F) {
	for _, e := range expressions {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		fl, err := Compile(expr, layers.LinkTypeEthernet)
		if err != nil {
			return
		}
		if n := len(fl.Program()); n == 0 || n > 4096 {
			t.Fatalf("%q compiled to %d instructions", expr, n)
		}
		fl.Match(make([]byte, 60))
	})
}

package dnsrec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
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
	out, err := testenv.Command(t, 5*time.Minute, tshark, "-r", path, "-n", "-Y", "dns", "-T", "fields", "-e", "frame.time_epoch", "-e", "dns.id", "-e", "dns.qry.name").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	want := strings.TrimSpace(string(out))
	var got []string
	extractAll(t, bytes.NewReader(b.Bytes()), func(r *Record) {
		got = append(got, fmt.Sprintf("%d.%09d\t0x%04x\t%s", r.Time.Unix(), r.Time.Nanosecond(), r.Msg.ID, normName(r.Msg.QName)))
	})
	if strings.Join(got, "\n") != want || want == "" {
		t.Errorf("Plumb: %q\ntshark: %q", got, want)
	}
}

// packetsOf reads a capture's frames.
func packetsOf(t *testing.T, path string) (layers.LinkType, []gopacket.CaptureInfo, [][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, closer, err := pcap.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var cis []gopacket.CaptureInfo
	var frames [][]byte
	for {
		data, ci, err := rd.Next()
		if err != nil {
			break
		}
		cis = append(cis, ci)
		frames = append(frames, bytes.Clone(data))
	}
	return rd.LinkType, cis, frames
}

// fullRow is a record as a line: everything a reader of the rows sees of
// it that extraction decides.
func fullRow(r *Record) string {
	errText := ""
	if r.Err != nil {
		errText = r.Err.Error()
	}
	rtt := "-"
	if r.HasTCPRTT {
		rtt = r.TCPRTT.String()
	}
	return fmt.Sprintf("%d.%09d %s:%d>%s:%d tcp=%t v%d size=%d rtt=%s %+v %s", r.Time.Unix(), r.Time.Nanosecond(),
		r.Src, r.SrcPort, r.Dst, r.DstPort, r.TCP, r.IPVersion, r.Size, rtt, r.Msg, errText)
}

// TestCutAnywhere is issue 26's block-boundary finding: a DNS message or
// a fragmented datagram that straddled a cut was lost, and a TCP
// retransmission in the next block was emitted twice. With the
// extraction state handed from block to block, every capture in testdata
// cut into blocks of every size from 1 packet up gives exactly the rows
// of the uncut capture, in the same order, with the same times.
func TestCutAnywhere(t *testing.T) {
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	if len(captures) < 50 {
		t.Fatalf("%d captures", len(captures))
	}
	for _, c := range captures {
		link, cis, frames := packetsOf(t, c)
		var want []string
		x := NewExtractor(link, nil, func(r *Record) { want = append(want, fullRow(r)) })
		for i := range frames {
			x.Packet(cis[i].Timestamp, frames[i])
		}
		x.Flush()
		for _, size := range []int{1, 2, 3, 5, 8, 13, 100} {
			if size > len(frames) && size != 1 {
				continue
			}
			var got []string
			emit := func(r *Record) { got = append(got, fullRow(r)) }
			var state []byte
			for start := 0; start < len(frames); start += size {
				x := NewExtractor(link, nil, emit)
				if err := x.LoadState(state); err != nil {
					t.Fatal(err)
				}
				for i := start; i < min(start+size, len(frames)); i++ {
					x.Packet(cis[i].Timestamp, frames[i])
				}
				var err error
				if state, err = x.SaveState(); err != nil {
					t.Fatal(err)
				}
			}
			last := NewExtractor(link, nil, emit)
			last.LoadState(state)
			last.Flush()
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s cut every %d packets: %d rows, uncut %d\n got %q\nwant %q", filepath.Base(c), size, len(got), len(want), head(got), head(want))
				break
			}
		}
	}
}

// TestLoadStateRefusesGarbage: carried state that is not what SaveState
// wrote (damaged, truncated, another version) is an error, not a panic
// or a silent start from nothing.
func TestLoadStateRefusesGarbage(t *testing.T) {
	x := NewExtractor(layers.LinkTypeEthernet, nil, func(*Record) {})
	for _, f := range v6Fragments(1)[:1] {
		x.Packet(time.Unix(1, 0), f)
	}
	good, err := x.SaveState()
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{"garbage": []byte("not a gob at all"), "truncated": good[:len(good)/2], "one byte": {0x7f}} {
		if err := NewExtractor(layers.LinkTypeEthernet, nil, func(*Record) {}).LoadState(bad); err == nil {
			t.Errorf("%s state loaded without an error", name)
		}
	}
	if err := NewExtractor(layers.LinkTypeEthernet, nil, func(*Record) {}).LoadState(good); err != nil {
		t.Errorf("good state: %v", err)
	}
}

// TestCutAnywhereInParallel is issue 37's rule: every block of a capture
// is read on its own (here in shuffled order), and a Joiner takes their
// edges in sequence order. Cut into blocks of every size from 1 packet
// up, every capture in testdata gives exactly the rows of the uncut
// capture, with the same times: only the block a row comes out in may
// differ.
func TestCutAnywhereInParallel(t *testing.T) {
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	if len(captures) < 50 {
		t.Fatalf("%d captures", len(captures))
	}
	rng := rand.New(rand.NewPCG(37, 1))
	for _, c := range captures {
		link, cis, frames := packetsOf(t, c)
		var want []string
		x := NewExtractor(link, nil, func(r *Record) { want = append(want, fullRow(r)) })
		for i := range frames {
			x.Packet(cis[i].Timestamp, frames[i])
		}
		x.Flush()
		slices.Sort(want)
		for _, size := range []int{1, 2, 3, 5, 8, 13, 37, 100} {
			if size > len(frames) && size != 1 {
				continue
			}
			n := (len(frames) + size - 1) / size
			rows := make([][]string, n+1)
			edges := make([][]byte, n)
			for _, b := range rng.Perm(n) {
				x := NewExtractor(link, nil, func(r *Record) { rows[b] = append(rows[b], fullRow(r)) })
				x.SplitEdges(0)
				for i := b * size; i < min((b+1)*size, len(frames)); i++ {
					x.Packet(cis[i].Timestamp, frames[i])
				}
				var err error
				if edges[b], err = x.Edge().MarshalBinary(); err != nil {
					t.Fatal(err)
				}
			}
			var state []byte
			for b := range n {
				j := NewJoiner(nil, func(r *Record) { rows[b] = append(rows[b], fullRow(r)) })
				if err := j.LoadState(state); err != nil {
					t.Fatal(err)
				}
				var e Edge
				if err := e.UnmarshalBinary(edges[b]); err != nil {
					t.Fatal(err)
				}
				j.Join(&e)
				var err error
				if state, err = j.SaveState(); err != nil {
					t.Fatal(err)
				}
			}
			last := NewJoiner(nil, func(r *Record) { rows[n] = append(rows[n], fullRow(r)) })
			last.LoadState(state)
			last.Flush()
			got := slices.Concat(rows...)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s cut every %d packets: %d rows, uncut %d\n got %q\nwant %q", filepath.Base(c), size, len(got), len(want), head(testenv.Lacking(got, want)), head(testenv.Lacking(want, got)))
				break
			}
		}
	}
}

// TestPartialIsMalformed: the first fragment of a datagram whose others
// never came is a partial row, and malformed, even when the bytes that
// came read as a whole message (the datagram had more after it).
func TestPartialIsMalformed(t *testing.T) {
	frames := v6Fragments(7)
	// The whole query and more: the second fragment claims the rest.
	first := frames[0]
	var recs []Record
	x := NewExtractor(layers.LinkTypeEthernet, nil, func(r *Record) { recs = append(recs, *r) })
	dns := query(7)
	udp := binary.BigEndian.AppendUint16(nil, 40000)
	udp = binary.BigEndian.AppendUint16(udp, 53)
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(dns)+64))
	udp = append(udp, 0, 0)
	part := append([]byte{17, 0, 1, 4, 0, 0, 0, 0}, udp...)
	part = append(part, dns...)
	part = append(part, make([]byte, (8-len(part)%8)%8)...) // a fragment's data is a multiple of 8 bytes
	frag := []byte{60, 0, 0, 1, 0, 0, 0xbe, 0xef}           // offset 0, more fragments
	ip := []byte{0x60, 0, 0, 0, 0, 0, 44, 64}
	binary.BigEndian.PutUint16(ip[4:], uint16(8+len(part)))
	ip = append(append(ip, first[14+8:14+40]...), frag...)
	x.Packet(time.Unix(1, 0), append(append(slices.Clone(first[:14]), ip...), part...))
	x.Flush()
	if len(recs) != 1 || !recs[0].Partial || recs[0].Err == nil || recs[0].Msg.QName != "example.com" {
		t.Fatalf("records %+v; want one partial, malformed row for example.com", recs)
	}
	t.Logf("%v", recs[0].Err)
}

// tcpFrame is an Ethernet frame of a TCP segment from 192.0.2.1:sport to
// 192.0.2.53:53.
func tcpFrame(t *testing.T, sport uint16, seq uint32, syn bool, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: []byte{2, 0, 0, 0, 0, 1}, DstMAC: []byte{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: []byte{192, 0, 2, 1}, DstIP: []byte{192, 0, 2, 53}}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 53, Seq: seq, SYN: syn, ACK: !syn, Window: 65535}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestBudgetCutsShowInRows: a TCP stream let go of for room (the
// budget) leaves a partial, malformed row of the message it was in the
// middle of, saying so, with what came of its header and question.
func TestBudgetCutsShowInRows(t *testing.T) {
	var recs []Record
	x := NewExtractor(layers.LinkTypeEthernet, nil, func(r *Record) { recs = append(recs, *r) })
	x.tcp.MaxBytes = 4 << 10
	q := query(7)
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(q)+100)) // it claims 100 bytes more than come
	msg = append(msg, q...)
	at := time.Unix(100, 0)
	x.Packet(at, tcpFrame(t, 40000, 1000, true, nil))
	x.Packet(at.Add(time.Millisecond), tcpFrame(t, 40000, 1001, false, msg))
	// Another connection needs the room: the first goes.
	x.Packet(at.Add(2*time.Millisecond), tcpFrame(t, 40001, 5000, true, nil))
	x.Packet(at.Add(3*time.Millisecond), tcpFrame(t, 40001, 5001, false, append([]byte{0x10, 0}, make([]byte, 4068)...)))
	if len(recs) != 1 {
		t.Fatalf("%d rows, want the one the budget cut: %+v", len(recs), recs)
	}
	r := recs[0]
	if !r.Partial || r.Err == nil || !strings.Contains(r.Err.Error(), "let go of for room") || r.Msg.QName != "example.com" ||
		r.SrcPort != 40000 || !r.TCP || !r.Time.Equal(at.Add(time.Millisecond)) {
		t.Fatalf("row %+v (error %v); want a partial, malformed row for example.com saying the stream was let go of for room", r, r.Err)
	}
	if st := x.Stats(); st.TCPLost != 1 || st.TCPEvicted != 1 {
		t.Errorf("stats: %d lost, %d evicted; want 1 and 1", st.TCPLost, st.TCPEvicted)
	}
	t.Log(r.Err)
}

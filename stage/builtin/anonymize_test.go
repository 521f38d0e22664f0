package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/dns/dnspair"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/internal/hostile"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/netpkt"
	"github.com/plumb-dev/plumb/stage"
)

// anonKeys writes a key named "k" and returns its directory.
func anonKeys(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "k"), []byte(strings.Repeat("5a", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runAnonymize(t *testing.T, keys, query string, in []byte) []byte {
	t.Helper()
	args, _ := url.ParseQuery(query)
	s, err := newAnonymize(args, keys)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := s.Run(context.Background(), stage.Input{}, bytes.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

type frame struct {
	ci   gopacket.CaptureInfo
	data []byte
}

func frames(t *testing.T, raw []byte) (layers.LinkType, []frame) {
	t.Helper()
	r, closer, err := pcap.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var out []frame
	for {
		data, ci, err := r.Next()
		if err != nil {
			break
		}
		out = append(out, frame{ci, bytes.Clone(data)})
	}
	return r.LinkType, out
}

// dnsRows are a capture's DNS messages as text, with the addresses apart.
func dnsRows(link layers.LinkType, fs []frame) (rows, addrs []string) {
	x := dnsrec.NewExtractor(link, nil, func(r *dnsrec.Record) {
		m := r.Msg
		m.ECS.Address, m.Options = "", nil // the client subnet is an address too
		rows = append(rows, fmt.Sprintf("%s %d>%d tcp=%v v%d size=%d %+v err=%v", r.Time.UTC().Format(time.RFC3339Nano),
			r.SrcPort, r.DstPort, r.TCP, r.IPVersion, r.Size, m, r.Err))
		addrs = append(addrs, r.Src.String()+">"+r.Dst.String())
	})
	for _, f := range fs {
		x.Packet(f.ci.Timestamp, f.data)
	}
	x.Flush()
	return rows, addrs
}

// TestAnonymizeCaptures: on every capture in testdata, the anonymized copy
// has the same packets at the same times with the same lengths; every
// address is rewritten; with rdata off, every UDP and TCP payload is
// byte-identical; the DNS messages read from it equal the original's
// but for their addresses; and tshark finds no bad checksum in it that
// the original did not have.
func TestAnonymizeCaptures(t *testing.T) {
	tshark := testenv.Tool(t, "tshark")
	keys := anonKeys(t)
	files, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	if len(files) < 50 {
		t.Fatalf("%d captures in testdata", len(files))
	}
	changed, rdataChanged := 0, 0
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		link, in := frames(t, raw)
		outRaw := runAnonymize(t, keys, "key=k&codec=none", raw)
		_, out := frames(t, outRaw)
		name := filepath.Base(f)
		if len(out) != len(in) {
			t.Fatalf("%s: %d packets in, %d out", name, len(in), len(out))
		}
		for i := range in {
			a, b := in[i], out[i]
			if !a.ci.Timestamp.Equal(b.ci.Timestamp) || a.ci.Length != b.ci.Length || len(a.data) != len(b.data) {
				t.Fatalf("%s: packet %d: time or length changed", name, i+1)
			}
			var pa, pb netpkt.Packet
			ea, eb := netpkt.Decode(link, a.data, &pa), netpkt.Decode(link, b.data, &pb)
			if (ea == nil) != (eb == nil) || pa.Proto != pb.Proto || pa.SrcPort != pb.SrcPort || pa.DstPort != pb.DstPort ||
				(pa.Proto == netpkt.ProtoUDP || pa.Proto == netpkt.ProtoTCP) && !pa.Fragment && !samePayload(pa, pb) {
				t.Fatalf("%s: packet %d: more than addresses and checksums changed", name, i+1)
			}
			if pa.IP != nil && (pa.Src == pb.Src && pa.Src.IsValid() || pa.Dst == pb.Dst && pa.Dst.IsValid()) && pa.Src != pa.Dst {
				t.Fatalf("%s: packet %d: %s>%s kept an address (%s>%s)", name, i+1, pa.Src, pa.Dst, pb.Src, pb.Dst)
			}
			if pa.IP != nil {
				changed++
			}
		}
		rowsIn, addrsIn := dnsRows(link, in)
		rowsOut, addrsOut := dnsRows(link, out)
		if !slices.Equal(rowsIn, rowsOut) {
			t.Fatalf("%s: the DNS messages differ beyond their addresses", name)
		}
		for i := range addrsIn {
			if addrsIn[i] == addrsOut[i] {
				t.Fatalf("%s: message %d kept its addresses %s", name, i+1, addrsIn[i])
			}
		}
		// With rdata=true the A and AAAA answers change too, and their
		// checksums with them.
		withRData := runAnonymize(t, keys, "key=k&codec=none&rdata=true", raw)
		if !bytes.Equal(withRData, outRaw) {
			rdataChanged++
		}
		if _, fs := frames(t, withRData); len(fs) != len(in) {
			t.Fatalf("%s: rdata=true: %d packets out of %d", name, len(fs), len(in))
		}
		bad := badChecksums(t, tshark, f)
		for what, b := range map[string][]byte{"copy": outRaw, "copy with rdata": withRData} {
			outFile := filepath.Join(t.TempDir(), name+".anon.pcap")
			os.WriteFile(outFile, b, 0o644)
			if got := badChecksums(t, tshark, outFile); !isSubset(got, bad) {
				t.Errorf("%s: tshark finds bad checksums in frames %v of the %s; the original has %v", name, got, what, bad)
			}
		}
	}
	t.Logf("%d captures, %d IP packets rewritten; rdata=true changed answers in %d captures", len(files), changed, rdataChanged)
	if rdataChanged < 10 {
		t.Errorf("rdata=true changed answers in only %d captures", rdataChanged)
	}
}

// samePayload: the payloads are byte-identical, but for the address of a
// client subnet option in DNS over UDP, which is rewritten (and only it).
func samePayload(a, b netpkt.Packet) bool {
	if bytes.Equal(a.Payload, b.Payload) {
		return true
	}
	pa, pb := a.Payload, b.Payload
	if a.Proto == netpkt.ProtoTCP && len(pa) > 2 && len(pb) > 2 {
		pa, pb = pa[2:], pb[2:] // one whole message after its length
	}
	ma, _ := dnsmsg.Parse(pa)
	mb, _ := dnsmsg.Parse(pb)
	if ma.ECS.Family == 0 || ma.ECS.Address == mb.ECS.Address {
		return false
	}
	ma.ECS.Address, ma.Options = "", nil
	mb.ECS.Address, mb.Options = "", nil
	return reflect.DeepEqual(ma, mb)
}

// badChecksums lists the frames in which tshark, checking every checksum,
// finds a bad one.
func badChecksums(t *testing.T, tshark, file string) []string {
	t.Helper()
	out, err := testenv.Command(t, 2*time.Minute, tshark, "-n", "-r", file,
		"-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
		"-Y", "ip.checksum.status == \"Bad\" || udp.checksum.status == \"Bad\" || tcp.checksum.status == \"Bad\" || icmp.checksum.status == \"Bad\" || icmpv6.checksum.status == \"Bad\"",
		"-T", "fields", "-e", "frame.number").Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("tshark -r %s: %v", file, err)
	}
	return strings.Fields(string(out))
}

func isSubset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// TestAnonymizeIsStable: the mapping depends on the key alone: a capture
// cut into blocks anonymizes to the same packets as whole, and the DNS
// records of the anonymized capture are the anonymized records of the
// capture (what=all and what=clients alike).
func TestAnonymizeIsStable(t *testing.T) {
	keys := anonKeys(t)
	for _, c := range []struct{ capture, query string }{
		{"dnscap__dns6.pcap", "key=k&codec=none"},
		{"dnscap__dns6.pcap", "key=k&codec=none&what=clients"},
		{"dnscap__dns6.pcap", "method=truncate&v4=16&v6=32&codec=none"},
		// The client subnet option: rewritten in packets and in records
		// alike (option bytes and ecs_address). Not in a datagram whose
		// option is in a later IP fragment: packets cannot be, records are.
		{"tcpdump__edns-opts.pcap", "key=k&codec=none"},
		{"tcpdump__edns-opts.pcap", "key=k&codec=none&what=clients"},
	} {
		q := c.query
		raw, err := os.ReadFile("../../testdata/pcaps/" + c.capture)
		if err != nil {
			t.Fatal(err)
		}
		link, in := frames(t, raw)
		whole := runAnonymize(t, keys, q, raw)
		_, want := frames(t, whole)
		half := len(in) / 2
		var got []frame
		for _, part := range [][]frame{in[:half], in[half:]} {
			_, fs := frames(t, runAnonymize(t, keys, q, capture(t, link, part)))
			got = append(got, fs...)
		}
		for i := range want {
			if !bytes.Equal(want[i].data, got[i].data) {
				t.Fatalf("%s: packet %d differs when the capture is cut in two", q, i+1)
			}
		}
		// records(anonymize(capture)) == anonymize(records(capture))
		recs := func(fs []frame) []byte {
			var buf bytes.Buffer
			w, err := dnsrec.NewWriter(&buf, "lax", 1)
			if err != nil {
				t.Fatal(err)
			}
			x := dnsrec.NewExtractor(link, nil, func(r *dnsrec.Record) { w.Add(r) })
			for _, f := range fs {
				x.Packet(f.ci.Timestamp, f.data)
			}
			x.Flush()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
		a := rowsOf(t, recs(want))
		b := rowsOf(t, runAnonymize(t, keys, q, recs(in)))
		if len(a) == 0 || len(a) != len(b) {
			t.Fatalf("%s on %s: %d records of the anonymized capture, %d anonymized records", q, c.capture, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s on %s: row %d of the anonymized capture's records differs from the anonymized row:\n%s\n%s", q, c.capture, i, a[i], b[i])
			}
		}
	}
}

// TestAnonymizeRecordsRData: with rdata=true the A and AAAA answers of
// DNS records are rewritten, over TCP too and in fragmented datagrams,
// where packets cannot be (a message may span segments or fragments):
// no address of an answer survives.
func TestAnonymizeRecordsRData(t *testing.T) {
	keys := anonKeys(t)
	for _, capture := range []string{"dnscap__dns.pcap", "zeek__dns-edns-ecs.pcap", "dnscap__dnso1tcp.pcap"} {
		raw, _ := os.ReadFile("../../testdata/pcaps/" + capture)
		link, in := frames(t, raw)
		var buf bytes.Buffer
		w, _ := dnsrec.NewWriter(&buf, "lax", 1)
		var answers []string
		x := dnsrec.NewExtractor(link, nil, func(r *dnsrec.Record) {
			w.Add(r)
			for _, rr := range append(append(append([]dnsmsg.RR(nil), r.Msg.Answer...), r.Msg.Authority...), r.Msg.Additional...) {
				if rr.Type == dnsmsg.TypeA || rr.Type == dnsmsg.TypeAAAA {
					answers = append(answers, rr.RData)
				}
			}
		})
		for _, f := range in {
			x.Packet(f.ci.Timestamp, f.data)
		}
		x.Flush()
		w.Close()
		if len(answers) == 0 {
			t.Fatalf("%s: no A or AAAA answers", capture)
		}
		anonRows := strings.Join(rowsOf(t, runAnonymize(t, keys, "key=k&rdata=true", buf.Bytes())), "\n")
		plainRows := strings.Join(rowsOf(t, runAnonymize(t, keys, "key=k", buf.Bytes())), "\n")
		for _, a := range answers {
			if strings.Contains(anonRows, `"rdata":"`+a+`"`) {
				t.Fatalf("%s: answer %s survived rdata=true", capture, a)
			}
			if !strings.Contains(plainRows, `"rdata":"`+a+`"`) {
				t.Fatalf("%s: answer %s changed without rdata=true", capture, a)
			}
		}
	}
}

// capture writes frames as a pcap.
func capture(t *testing.T, link layers.LinkType, fs []frame) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf, link, 65535, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		w.WritePacket(f.ci, f.data)
	}
	w.Flush()
	return buf.Bytes()
}

// rowsOf reads an Arrow records file as text rows.
func rowsOf(t *testing.T, data []byte) []string {
	t.Helper()
	f, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []string
	for i := 0; i < f.NumRecords(); i++ {
		rec, err := f.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		for r := 0; r < int(rec.NumRows()); r++ {
			var row []string
			for c := 0; c < int(rec.NumCols()); c++ {
				row = append(row, rec.ColumnName(c)+"="+rec.Column(c).ValueStr(r))
			}
			rows = append(rows, strings.Join(row, " "))
		}
		rec.Release()
	}
	return rows
}

// TestAnonymizeKeys: a job names a key in the keys directory; it cannot
// point at any other file, and a bad key is refused without its bytes
// being shown.
func TestAnonymizeKeys(t *testing.T) {
	keys := anonKeys(t)
	os.WriteFile(filepath.Join(keys, "short"), []byte("secret-bytes-here"), 0o600)
	for q, want := range map[string]string{
		"":                      "key=NAME is required",
		"key=../../etc/passwd":  "plain file name",
		"key=.hidden":           "plain file name",
		"key=nope":              "no such key on the server",
		"key=short":             "not 32 bytes or 64 hex digits",
		"key=k&method=rot13":    "want cryptopan or truncate",
		"method=truncate&v4=40": "v4=0..32",
		"method=truncate&key=k": "takes no key",
		"key=k&what=servers":    "want all or clients",
		"key=k&colour=blue":     "colour",
	} {
		args, _ := url.ParseQuery(q)
		_, err := newAnonymize(args, keys)
		// Never the key's bytes, nor the server's key directory: errors
		// reach whoever submitted the job.
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret-bytes") || strings.Contains(err.Error(), keys) {
			t.Errorf("%q: %v, want %q", q, err, want)
		}
	}
	if _, err := newAnonymize(url.Values{"key": {"k"}}, ""); err == nil || !strings.Contains(err.Error(), "--anon-keys") {
		t.Errorf("no keys directory: %v", err)
	}
}

// TestAnonymizeICMPErrors: the header an ICMP error quotes is the packet
// it is about, so its addresses map as that packet's did, and every
// checksum (outer IP, quoted IP, ICMP) still verifies.
func TestAnonymizeICMPErrors(t *testing.T) {
	keys := anonKeys(t)
	client, server := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("192.0.2.53")
	// The client's query, and the port-unreachable the server sent back.
	quotedIP := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: client.AsSlice(), DstIP: server.AsSlice()}
	quotedUDP := &layers.UDP{SrcPort: 40000, DstPort: 53}
	quotedUDP.SetNetworkLayerForChecksum(quotedIP)
	q := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(q, opts, quotedIP, quotedUDP, gopacket.Payload([]byte("query bytes"))); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, opts,
		&layers.Ethernet{SrcMAC: make([]byte, 6), DstMAC: make([]byte, 6), EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: server.AsSlice(), DstIP: client.AsSlice()},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)},
		gopacket.Payload(q.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(buf.Bytes()), Length: len(buf.Bytes())}
	raw := capture(t, layers.LinkTypeEthernet, []frame{{ci, buf.Bytes()}})
	for _, what := range []string{"all", "clients"} {
		_, out := frames(t, runAnonymize(t, keys, "codec=none&key=k&what="+what, raw))
		pkt := gopacket.NewPacket(out[0].data, layers.LayerTypeEthernet, gopacket.Default)
		ip := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		icmp := pkt.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		inner := gopacket.NewPacket(icmp.Payload, layers.LayerTypeIPv4, gopacket.Default).Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ip.DstIP.Equal(inner.SrcIP) || !ip.SrcIP.Equal(inner.DstIP) || ip.DstIP.Equal(client.AsSlice()) {
			t.Errorf("what=%s: outer %s>%s, quoted %s>%s", what, ip.SrcIP, ip.DstIP, inner.SrcIP, inner.DstIP)
		}
		// An ICMP packet has no ports to tell the server by: with
		// what=clients too, both ends are rewritten.
		if ip.SrcIP.Equal(server.AsSlice()) {
			t.Errorf("what=%s: the server's address was kept", what)
		}
		for _, c := range []struct {
			name string
			b    []byte
		}{{"outer IP header", out[0].data[14:34]}, {"quoted IP header", icmp.Payload[:20]}, {"ICMP message", out[0].data[34:]}} {
			if s := onesSum(c.b); s != 0xffff {
				t.Errorf("what=%s: the %s does not sum to 0xffff (%#04x)", what, c.name, s)
			}
		}
	}
}

// onesSum is the folded one's-complement sum of b: 0xffff over a header
// or message whose checksum is right.
func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// TestAnonymizeHostileBlocks: the anonymize stage reads blocks anyone may
// upload. A pcap claiming a 2 GiB record, a pcapng one likewise, an xz
// block claiming a 4 GiB dictionary and an Arrow file whose buffer claims
// 1 GiB are each set aside as malformed, naming the limit, with the heap
// staying small; a zstd bomb of zeros is not a capture.
func TestAnonymizeHostileBlocks(t *testing.T) {
	keys := anonKeys(t)
	args, _ := url.ParseQuery("key=k")
	s, err := newAnonymize(args, keys)
	if err != nil {
		t.Fatal(err)
	}
	xzBomb, err := hostile.XZBigDict([]byte(strings.Repeat("dns ", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	arrowBomb, err := hostile.ArrowZstdBomb(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		in   []byte
		says string
	}{
		"pcap with a 2 GiB record":   {hostile.BigRecordPcap(2<<30 - 1), "262144"},
		"pcapng with a 2 GiB record": {hostile.BigRecordPcapNG(2<<30 - 4), "262144"},
		"xz with a 4 GiB dictionary": {xzBomb, "MiB LZMA2 dictionary"},
		"Arrow claiming 1 GiB":       {arrowBomb, "256 MiB"},
		"1 GiB of zstd-packed zeros": {hostile.ZstdBomb(1 << 30), "not a pcap or pcapng capture"},
	} {
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := s.Run(context.Background(), stage.Input{}, bytes.NewReader(c.in), io.Discard)
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if !errors.Is(err, stage.ErrMalformed) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want malformed naming %q", name, err, c.says)
		}
		if grew := int64(after.HeapSys) - int64(before.HeapSys); grew > 512<<20 {
			t.Errorf("%s: the heap grew by %d MiB", name, grew>>20)
		}
	}
}

// TestAnonymizeTransactions: transactions (builtin:dnspairs) name their
// ends client and server, which the stage used to pass through as they
// were: a shared file of transactions held every client's address.
func TestAnonymizeTransactions(t *testing.T) {
	keys := anonKeys(t)
	raw, _ := os.ReadFile("../../testdata/pcaps/dnscap__dns.pcap")
	link, in := frames(t, raw)
	var buf bytes.Buffer
	w, err := dnspair.NewWriter(&buf, "lax", 1)
	if err != nil {
		t.Fatal(err)
	}
	clients, servers := map[string]bool{}, map[string]bool{}
	p := dnspair.New(func(tx *dnspair.Txn) {
		w.Add(tx)
		clients[tx.Key.Client.String()], servers[tx.Key.Server.String()] = true, true
	})
	x := dnsrec.NewExtractor(link, nil, func(r *dnsrec.Record) { p.Add(r) })
	for _, f := range in {
		x.Packet(f.ci.Timestamp, f.data)
	}
	x.Flush()
	p.Flush()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if len(clients) == 0 || len(servers) == 0 {
		t.Fatal("no transactions")
	}
	for _, tc := range []struct {
		args       string
		keepServer bool
	}{{"key=k", false}, {"key=k&what=clients", true}} {
		rows := strings.Join(rowsOf(t, runAnonymize(t, keys, tc.args, buf.Bytes())), "\n")
		for c := range clients {
			if strings.Contains(rows, "client="+c+" ") {
				t.Errorf("%s: client %s survived", tc.args, c)
			}
		}
		for s := range servers {
			if kept := strings.Contains(rows, "server="+s+" "); kept != tc.keepServer {
				t.Errorf("%s: server %s kept = %v, want %v", tc.args, s, kept, tc.keepServer)
			}
		}
	}
}

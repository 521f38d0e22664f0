package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/netpkt"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/synth"
)

func dnsCapture(t *testing.T, size int64) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := pcap.NewWriter(&b, layers.LinkTypeEthernet, 65535, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := synth.Generate(context.Background(), w, synth.Config{Seed: 5, MaxBytes: size}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func registry() *stage.Registry {
	reg := stage.NewRegistry()
	Register(reg, FindXZ())
	return reg
}

func run(t *testing.T, b stage.Builtin, in []byte) ([]byte, error) {
	var out bytes.Buffer
	err := b.Run(context.Background(), stage.Input{}, bytes.NewReader(in), &out)
	return out.Bytes(), err
}

// TestArchiveMatchesXZ6: the archive stage compresses DNS captures to
// within 5% of `xz -6`, says which encoder it drives, and decodes back.
func TestArchiveMatchesXZ6(t *testing.T) {
	xzPath := testenv.Tool(t, "xz")
	raw := dnsCapture(t, 8<<20)
	sz, err := run(t, &Transcode{To: codecs.Snappy, Raw: true}, raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := registry().New("transcode", url.Values{"to": {"xz"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := b.(stage.Describer).Describe(); !strings.Contains(d, "XZ Utils") {
		t.Errorf("describe = %q; want the system xz named", d)
	}
	got, err := run(t, b, sz)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(xzPath, "-6", "-c")
	cmd.Stdin = bytes.NewReader(raw)
	ref, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(len(got)) / float64(len(ref))
	t.Logf("xz -6: %.1f%% of %d bytes; archive stage: %.1f%% (%.3f of xz -6)", 100*float64(len(ref))/float64(len(raw)), len(raw),
		100*float64(len(got))/float64(len(raw)), ratio)
	if ratio > 1.05 {
		t.Errorf("archive is %.3f of xz -6's size; want within 5%%", ratio)
	}
	back, err := run(t, &Transcode{To: codecs.None}, got)
	if err != nil || !bytes.Equal(back, raw) {
		t.Fatalf("archive does not decode to the capture: %d bytes, %v", len(back), err)
	}
	// Without the system xz the Go encoder is used and says so.
	goXZ := &Transcode{To: codecs.XZ, XZ: XZ{}}
	if !strings.Contains(goXZ.Describe(), "ulikunitz") {
		t.Errorf("Go encoder describes itself as %q", goXZ.Describe())
	}
	gz, err := run(t, goXZ, sz)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Go xz encoder: %.1f%% (%.3f of xz -6)", 100*float64(len(gz))/float64(len(raw)), float64(len(gz))/float64(len(ref)))
}

func TestBuiltinsSetCorruptBlocksAside(t *testing.T) {
	raw := dnsCapture(t, 256<<10)
	sz, _ := run(t, &Transcode{To: codecs.Snappy, Raw: true}, raw)
	bad := bytes.Clone(sz)
	bad[len(bad)/2] ^= 0xff
	for _, name := range []string{"decode", "transcode", "pcapinfo"} {
		b, err := registry().New(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run(t, b, bad); !errors.Is(err, stage.ErrMalformed) {
			t.Errorf("%s over a corrupt block: %v; want ErrMalformed", name, err)
		}
		if _, err := run(t, b, sz); err != nil {
			t.Errorf("%s over a good block: %v", name, err)
		}
	}
	info, _ := run(t, PcapInfo{}, sz)
	if !strings.Contains(string(info), "link_type: Ethernet") || !strings.Contains(string(info), "truncated: false") {
		t.Errorf("pcapinfo = %s", info)
	}
}

func TestBuiltinArgumentsAreStrict(t *testing.T) {
	reg := registry()
	for _, c := range []struct {
		name string
		args url.Values
		want string
	}{
		{"encode", url.Values{"codec": {"lz4"}}, "unsupported codec"},
		{"transcode", url.Values{"too": {"xz"}}, `unknown argument "too" (known: to)`},
		{"cpuwork", url.Values{"rounds": {"0"}}, "want a whole number from 1 to 1000"},
		{"decode", url.Values{"x": {"1"}}, `unknown argument "x"`},
		{"nosuch", nil, `built-in "nosuch" is not known (known: cpuwork, decode, dns, dnsmetrics, dnspairs, dnstop, encode, flowhash, newdomains, parquet, pcapinfo, rssac, transcode)`},
		{"dnstop", url.Values{"top": {"5"}}, `unknown argument "top" (known: n, counters, dimensions, window)`},
		{"dns", url.Values{"ports": {"53,x"}}, "want port numbers"},
		{"dnspairs", url.Values{"window": {"0s"}}, "want a duration between 1ns and 1h"},
		{"dnspairs", url.Values{"max_pending": {"99999999"}}, "want a count between 1 and 4194304"},
		{"dnspairs", url.Values{"ports": {"x"}}, "want port numbers"},
		{"dns", url.Values{"sections": {"answers,glue"}}, "want all, question, or answer, authority and additional"},
		{"dnspairs", url.Values{"budget": {"1KiB"}}, "want a size between 64KiB and 1GiB"},
		{"dns", url.Values{"zstd": {"best"}}, "want fast, balanced or small"},
		{"dnspairs", url.Values{"zstd": {"7"}}, "want fast, balanced or small"},
	} {
		if _, err := reg.New(c.name, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v; want %q", c.name, c.args, err, c.want)
		}
	}
	// cpuwork copies its block through, whatever the rounds.
	w, _ := reg.New("cpuwork", url.Values{"rounds": {"3"}, "heavy": {"6"}})
	in := append([]byte("H"), bytes.Repeat([]byte("x"), 3<<20)...)
	if out, err := run(t, w, in); err != nil || !bytes.Equal(out, in) {
		t.Errorf("cpuwork changed its block: %d bytes, %v", len(out), err)
	}
}

// TestDNSZstd: ?zstd=small writes the same records and transactions
// as the default, in fewer bytes.
func TestDNSZstd(t *testing.T) {
	capture := dnsCapture(t, 4<<20)
	const name = "20250505-151105-00000007.lax.pcap"
	for _, program := range []string{"dns", "dnspairs"} {
		def := runAs(t, program, nil, name, capture)
		small := runAs(t, program, url.Values{"zstd": {"small"}}, name, capture)
		if len(small) >= len(def) {
			t.Errorf("builtin:%s?zstd=small wrote %d bytes, the default %d: want fewer", program, len(small), len(def))
		}
		a, b := table(t, def), table(t, small)
		if a.NumRows() == 0 || !array.TableEqual(a, b) {
			t.Errorf("builtin:%s: %d rows at zstd=small differ from the default's %d", program, b.NumRows(), a.NumRows())
		}
		a.Release()
		b.Release()
	}
}

// TestDNSWritesArrow runs builtin:dns over a snappy-compressed real
// capture and reads the Arrow file back as a consumer would.
func TestDNSWritesArrow(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/pcaps/dnscap__dns.pcap")
	if err != nil {
		t.Fatal(err)
	}
	sz, _ := run(t, &Transcode{To: codecs.Snappy, Raw: true}, raw)
	b, err := registry().New("dns", nil)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := block.Parse("20161020-151621-00000042.lax.pcap.sz")
	var out bytes.Buffer
	if err := b.Run(context.Background(), stage.Input{Block: n}, bytes.NewReader(sz), &out); err != nil {
		t.Fatal(err)
	}
	f, err := ipc.NewFileReader(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !f.Schema().Equal(dnsrec.Schema) {
		t.Errorf("schema = %s", f.Schema())
	}
	rec, err := f.Record(0)
	if err != nil {
		t.Fatal(err)
	}
	col := func(name string) arrow.Array { return rec.Column(f.Schema().FieldIndices(name)[0]) }
	if rec.NumRows() != 82 {
		t.Fatalf("%d rows, want the 82 messages tshark finds", rec.NumRows())
	}
	if got := col("instance").ValueStr(0); got != "lax" {
		t.Errorf("instance = %q", got)
	}
	if got := col("seq").(*array.Uint64).Value(0); got != 42 {
		t.Errorf("seq = %d", got)
	}
	if got := col("qname").(*array.String).Value(0); got != "google.com" {
		t.Errorf("first qname = %q", got)
	}
	if got := col("src").(*array.String).Value(0); got != "172.17.0.10" {
		t.Errorf("first src = %q", got)
	}
	for _, name := range []string{"instance", "transport"} {
		if _, ok := col(name).(*array.Dictionary); !ok {
			t.Errorf("%s is %s, want dictionary-encoded", name, col(name).DataType())
		}
	}
	if got := col("transport").ValueStr(1); got != "udp" {
		t.Errorf("transport = %q", got)
	}
	// Garbage is set aside, not crashed on; an empty capture gives an
	// empty table.
	if err := b.Run(context.Background(), stage.Input{}, strings.NewReader("not a capture at all"), io.Discard); !errors.Is(err, stage.ErrMalformed) {
		t.Errorf("garbage: %v", err)
	}
	out.Reset()
	if err := b.Run(context.Background(), stage.Input{}, bytes.NewReader(raw[:24]), &out); err != nil {
		t.Fatalf("header-only capture: %v", err)
	}
	if f, err := ipc.NewFileReader(bytes.NewReader(out.Bytes())); err != nil || f.NumRecords() != 0 {
		t.Errorf("header-only capture: %v", err)
	}
}

// TestFlowHashKeepsFlowsTogether splits real captures four ways: every
// packet lands in exactly one output, both directions of a connection and
// every fragment of a datagram in the same one.
func TestFlowHashKeepsFlowsTogether(t *testing.T) {
	b, err := registry().New("flowhash", url.Values{"n": {"4"}})
	if err != nil {
		t.Fatal(err)
	}
	sp := b.(stage.Splitter)
	queues := []string{"pcap.h0", "pcap.h1", "pcap.h2", "pcap.h3"}
	if err := sp.CheckOutputs(queues); err != nil {
		t.Fatal(err)
	}
	if err := sp.CheckOutputs([]string{"pcap.h0", "pcap.h1", "pcap.h7", "x"}); err == nil {
		t.Error("outputs that do not fit were accepted")
	}
	for _, name := range []string{"dnscap__dnso1tcp.pcap", "dnscap__frags.pcap", "zeek__dns-edns-ecs.pcap"} {
		raw, err := os.ReadFile("../../testdata/pcaps/" + name)
		if err != nil {
			t.Fatal(err)
		}
		bufs := make([]bytes.Buffer, 4)
		outs := map[string]io.Writer{}
		for i, q := range queues {
			outs[q] = &bufs[i]
		}
		if err := sp.Split(context.Background(), stage.Input{}, bytes.NewReader(raw), outs); err != nil {
			t.Fatal(err)
		}
		total := 0
		flows := map[string]int{} // flow (either direction) → output
		for i := range bufs {
			r, closer, err := pcap.NewReader(bytes.NewReader(bufs[i].Bytes()))
			if err != nil {
				t.Fatalf("%s output %d is not a capture: %v", name, i, err)
			}
			for {
				data, _, err := r.Next()
				if err != nil {
					break
				}
				total++
				var p netpkt.Packet
				if netpkt.Decode(r.LinkType, data, &p) != nil {
					continue
				}
				// A flow is the 5-tuple either way round; a fragment's flow
				// is its datagram.
				a, b := fmt.Sprint(p.Src, ":", p.SrcPort), fmt.Sprint(p.Dst, ":", p.DstPort)
				if a > b {
					a, b = b, a
				}
				key := fmt.Sprint(a, " ", b, " ", p.Proto)
				if p.Fragment {
					key = fmt.Sprint("datagram ", p.Src, " ", p.Dst, " ", p.FragID)
				}
				if o, ok := flows[key]; ok && o != i {
					t.Errorf("%s: %s in outputs %d and %d", name, key, o, i)
				}
				flows[key] = i
			}
			closer.Close()
		}
		r, closer, _ := pcap.NewReader(bytes.NewReader(raw))
		want := 0
		for {
			if _, _, err := r.Next(); err != nil {
				break
			}
			want++
		}
		closer.Close()
		if total != want {
			t.Errorf("%s: %d packets out, %d in", name, total, want)
		}
	}
}

// TestDecodeChecksTheQueuesCodec is issue 62's random block: bytes put
// as a .pcap.sz block passed builtin:decode as uncompressed, were
// archived, and failed every stage after. A block whose queue names a
// codec must now be in it or be an uncompressed capture, or it is set
// aside as malformed, naming the block and the bytes it starts with; a
// queue that names none still passes anything through.
func TestDecodeChecksTheQueuesCodec(t *testing.T) {
	b, err := registry().New("decode", nil)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(name string, data []byte) ([]byte, error) {
		n, err := block.Parse(name)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err = stage.Run(context.Background(), b, stage.Input{Block: n}, bytes.NewReader(data), &out)
		return out.Bytes(), err
	}
	random := []byte("\x17\x9a random bytes, no codec at all \x00\x01")
	_, err = decode("20250505-151105-00000001.lax.pcap.sz", random)
	if !errors.Is(err, stage.ErrMalformed) || !strings.Contains(err.Error(), "20250505-151105-00000001.lax.pcap.sz") || !strings.Contains(err.Error(), "snappy") {
		t.Errorf("random bytes as a .sz block: %v; want malformed, naming the block and snappy", err)
	}
	raw, _ := os.ReadFile("../../testdata/pcaps/dnscap__dns.pcap")
	sz, _ := run(t, &Transcode{To: codecs.Snappy, Raw: true}, raw)
	if got, err := decode("20250505-151105-00000002.lax.pcap.sz", sz); err != nil || !bytes.Equal(got, raw) {
		t.Errorf("a snappy block: %d bytes, %v; want the capture", len(got), err)
	}
	if got, err := decode("20250505-151105-00000003.lax.raw", random); err != nil || !bytes.Equal(got, random) {
		t.Errorf("a queue naming no codec: %v; want its bytes passed through", err)
	}
	if got, err := decode("20250505-151105-00000004.lax.pcap.sz", raw); err != nil || !bytes.Equal(got, raw) {
		t.Errorf("an uncompressed capture in a .sz queue: %v; want it passed through", err)
	}
}

package codecs

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/internal/hostile"
	"github.com/plumb-dev/plumb/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite golden files")

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// realData is every capture in testdata concatenated: real DNS traffic,
// several hundred KiB, so streams span many 64 KiB snappy chunks.
func realData(t testing.TB) []byte {
	t.Helper()
	files, err := filepath.Glob("../testdata/pcaps/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in testdata/pcaps: %v", err)
	}
	var all []byte
	for _, f := range files {
		all = append(all, readFile(t, f)...)
	}
	return all
}

func compress(t testing.TB, c Codec, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := c.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// Write in odd-sized pieces so chunk boundaries do not line up with writes.
	for p := data; len(p) > 0; {
		n := min(len(p), 7777)
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decompress(c Codec, data []byte) ([]byte, error) {
	r, err := c.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// TestConformance runs every codec over real captures: round trip, empty
// input, and a writer/reader used many times in a row.
func TestConformance(t *testing.T) {
	data := realData(t)
	for _, c := range All() {
		t.Run(string(c), func(t *testing.T) {
			for _, in := range [][]byte{data, {}, []byte("x")} {
				z := compress(t, c, in)
				if c != None && len(z) == 0 {
					t.Fatalf("%s: empty input gave a 0-byte stream; want the format's header", c)
				}
				out, err := decompress(c, z)
				if err != nil {
					t.Fatalf("%s: decompress %d bytes: %v", c, len(in), err)
				}
				if !bytes.Equal(out, in) {
					t.Fatalf("%s: round trip of %d bytes gave %d different bytes", c, len(in), len(out))
				}
			}
			if c != None && len(compress(t, c, data)) >= len(data) {
				t.Errorf("%s does not compress DNS captures", c)
			}
		})
	}
}

func TestParseAndExt(t *testing.T) {
	for in, want := range map[string]Codec{"sz": Snappy, ".sz": Snappy, "snappy": Snappy, "xz": XZ, "gz": Gzip, "GZIP": Gzip, "zst": Zstd, "zstd": Zstd, "": None, "raw": None} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Parse("lzma"); err == nil || !strings.Contains(err.Error(), "unsupported codec") || !strings.Contains(err.Error(), "zstd") {
		t.Errorf("Parse(lzma) = %v; want an error listing the known codecs", err)
	}
	for name, want := range map[string]Codec{
		"20250505-151105-01789592.lax.pcap.sz": Snappy, "a.pcap.xz": XZ, "a.gz": Gzip, "a.zst": Zstd, "a.pcap": None, "noext": None,
	} {
		if got := FromExt(name); got != want {
			t.Errorf("FromExt(%q) = %q, want %q", name, got, want)
		}
		if want != None && !strings.HasSuffix(name, want.Ext()) {
			t.Errorf("%q.Ext() = %q", want, want.Ext())
		}
	}
}

// TestCorruptNamesOffset flips a byte in the middle of each stream and
// checks that the error says where.
func TestCorruptNamesOffset(t *testing.T) {
	data := realData(t)
	for _, c := range All()[1:] {
		z := compress(t, c, data)
		bad := bytes.Clone(z)
		pos := len(bad) / 2
		for i := pos; i < pos+16; i++ {
			bad[i] ^= 0x5a
		}
		_, err := decompress(c, bad)
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Errorf("%s: corrupt stream gave %v, want *CorruptError", c, err)
			continue
		}
		if ce.Offset <= 0 || ce.Offset > int64(len(bad)) || !strings.Contains(err.Error(), "offset") {
			t.Errorf("%s: error %q has offset %d outside the stream of %d bytes", c, err, ce.Offset, len(bad))
		}
		// A truncated stream is also an error, never a silent short read.
		if _, err := decompress(c, z[:len(z)*2/3]); err == nil {
			t.Errorf("%s: truncated stream decoded without error", c)
		}
	}
}

func TestSnappyGolden(t *testing.T) {
	in := readFile(t, "../testdata/pcaps/dnscap__dns.pcap")
	golden := "../testdata/codecs/dnscap__dns.pcap.sz"
	got := compress(t, Snappy, in)
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want := readFile(t, golden); !bytes.Equal(got, want) {
		t.Errorf("snappy stream of %d bytes differs from golden %s (%d bytes); run with -update only if the format change is intended", len(got), golden, len(want))
	}
	if want := readFile(t, "../testdata/codecs/empty.sz"); !bytes.Equal(compress(t, Snappy, nil), want) {
		t.Errorf("empty snappy stream = %q, want %q", compress(t, Snappy, nil), want)
	}
	// A stream written by the C++ libsnappy (python-snappy) decodes to the same capture.
	out, err := decompress(Snappy, readFile(t, "../testdata/codecs/dnscap__dns.pcap.libsnappy.sz"))
	if err != nil || !bytes.Equal(out, in) {
		t.Errorf("libsnappy stream: %v (%d bytes, want %d)", err, len(out), len(in))
	}
}

// TestXZInterop checks our xz against xz-utils both ways.
func TestXZInterop(t *testing.T) {
	xzBin := testenv.Tool(t, "xz")
	data := realData(t)
	dir := t.TempDir()
	ours := filepath.Join(dir, "ours.xz")
	if err := os.WriteFile(ours, compress(t, XZ, data), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(xzBin, "-t", ours).CombinedOutput(); err != nil {
		t.Fatalf("xz -t rejects our stream: %v\n%s", err, out)
	}
	cmd := exec.Command(xzBin, "-6", "-c")
	cmd.Stdin = bytes.NewReader(data)
	theirs, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	out, err := decompress(XZ, theirs)
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("reading xz -6 output: %v (%d bytes, want %d)", err, len(out), len(data))
	}
}

func FuzzReaders(f *testing.F) {
	small := []byte("20250505-151105-01789592.lax.pcap.sz some dns bytes")
	for _, c := range All()[1:] {
		var buf bytes.Buffer
		w, _ := c.NewWriter(&buf)
		w.Write(small)
		w.Close()
		f.Add(byte(0), buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		c := All()[1+int(which)%4]
		r, err := c.NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		defer r.Close()
		// Bound the output: a small input must not decode to gigabytes.
		_, _ = io.Copy(io.Discard, io.LimitReader(r, 64<<20))
	})
}

// TestStreamIgnoresWriteSizes: the compressed stream depends on the bytes
// alone, not on how they were split into writes — a block cut again from
// the same capture must be byte-identical to be answered "duplicate".
func TestStreamIgnoresWriteSizes(t *testing.T) {
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * i >> 7) // compressible, not trivially
	}
	for _, c := range All() {
		if c == XZ {
			continue // slow; a single-threaded stream like gzip's
		}
		t.Run(string(c), func(t *testing.T) {
			var want []byte
			for _, sizes := range [][]int{{len(data)}, {7777}, {1 << 20, 3}, {65528, 1}, {200000, 65528, 131056}} {
				var buf bytes.Buffer
				w, _ := c.NewWriter(&buf)
				for p, i := data, 0; len(p) > 0; i++ {
					n := min(len(p), sizes[i%len(sizes)])
					if _, err := w.Write(p[:n]); err != nil {
						t.Fatal(err)
					}
					p = p[n:]
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if want == nil {
					want = buf.Bytes()
				} else if !bytes.Equal(buf.Bytes(), want) {
					t.Fatalf("writes of %v give a different stream (%d bytes, want %d)", sizes, buf.Len(), len(want))
				}
			}
		})
	}
}

// TestXZDictionaryLimit: a 4 GiB dictionary in an xz block header (issue
// 18: 458 KB took 3.38 GB) is refused before the decoder allocates it,
// while what the xz tool writes, in every layout, still reads.
func TestXZDictionaryLimit(t *testing.T) {
	data := realData(t)
	bomb, err := hostile.XZBigDict(data)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = decompress(XZ, bomb)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "4095 MiB LZMA2 dictionary") {
		t.Errorf("4 GiB dictionary: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("refusing it allocated %d MiB", grew>>20)
	}
	xzTool := testenv.Tool(t, "xz")
	for _, args := range [][]string{
		{"-6"}, {"-9e"}, {"-0"}, {"--check=none"}, {"--check=crc32"}, {"--check=sha256"},
		{"-T2", "--block-size=65536"}, {"--lzma2=dict=96MiB"},
	} {
		cmd := exec.Command(xzTool, append(args, "-c")...)
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("xz %v: %v", args, err)
		}
		if len(args) == 1 && args[0] == "-0" {
			out = append(out, out...) // two streams, as `cat a.xz b.xz`
			out = append(out, 0, 0, 0, 0)
		}
		got, err := decompress(XZ, out)
		want := data
		if len(args) == 1 && args[0] == "-0" {
			want = append(append([]byte(nil), data...), data...)
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("xz %v: %d bytes, %v", args, len(got), err)
		}
	}
	cmd := exec.Command(xzTool, "--lzma2=dict=192MiB", "-c")
	cmd.Stdin = bytes.NewReader(data[:1000])
	out, _ := cmd.Output()
	if _, err := decompress(XZ, out); !errors.Is(err, ErrLimit) {
		t.Errorf("a 192 MiB dictionary: %v", err)
	}
}

// TestZstdWindowLimit: a stream asking for a window over 128 MiB is
// refused as over a limit, not read.
func TestZstdWindowLimit(t *testing.T) {
	zstdTool := testenv.Tool(t, "zstd")
	data := realData(t)
	for _, c := range []struct {
		args []string
		ok   bool
	}{{[]string{"-19"}, true}, {[]string{"--long=27"}, true}, {[]string{"--long=30"}, false}} {
		cmd := exec.Command(zstdTool, append(c.args, "-c")...)
		cmd.Stdin = bytes.NewReader(bytes.Repeat(data, 4))
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		_, err = decompress(Zstd, out)
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrLimit) {
			t.Errorf("zstd %v: %v", c.args, err)
		}
	}
}

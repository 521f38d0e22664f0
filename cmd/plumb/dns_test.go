package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/dns/dnstap"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
)

// TestDNSCommandOutputs: plumb dns reads a capture from stdin as from a
// file, and writes the same rows as Arrow, Parquet (by the name) and
// JSON lines (to stdout with -o -); --ports chooses where DNS is read,
// --filter the frames.
func TestDNSCommandOutputs(t *testing.T) {
	capture := "../../testdata/pcaps/dnscap__dns.pcap"
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.arrow")
	if out, errOut, code := plumbExec(t, "dns", "-o", ref, capture); code != 0 {
		t.Fatalf("plumb dns: %s %s", out, errOut)
	}
	want := arrowTimes(t, ref)
	if len(want) == 0 {
		t.Fatal("no rows in the reference")
	}

	raw, err := os.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		cmd := testenv.Command(t, time.Minute, os.Args[0], append([]string{"dns"}, args...)...)
		cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
		cmd.Stdin = bytes.NewReader(raw)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("plumb dns %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	// Arrow from stdin.
	fromStdin := filepath.Join(dir, "stdin.arrow")
	run("-o", fromStdin, "-")
	if got := arrowTimes(t, fromStdin); !slices.Equal(got, want) {
		t.Errorf("from stdin: %d rows; from the file %d", len(got), len(want))
	}

	// JSON lines on stdout: a row per line, the same times.
	var times []string
	sc := bufio.NewScanner(bytes.NewReader(run("-o", "-", "-")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("a line of -o - is not JSON: %v: %s", err, sc.Text())
		}
		if _, ok := row["qname"]; !ok {
			t.Fatalf("a JSON row without qname: %s", sc.Text())
		}
		times = append(times, row["time"].(string))
	}
	if len(times) != len(want) {
		t.Errorf("JSON lines: %d rows; Arrow %d", len(times), len(want))
	}

	// Parquet, by the file's name.
	pq := filepath.Join(dir, "out.parquet")
	run("-o", pq, capture)
	f, err := file.OpenParquetFile(pq, false)
	if err != nil {
		t.Fatalf("the .parquet output does not open as Parquet: %v", err)
	}
	defer f.Close()
	fr, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	table, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer table.Release()
	if table.NumRows() != int64(len(want)) {
		t.Errorf("Parquet: %d rows; Arrow %d", table.NumRows(), len(want))
	}

	// DNS read on another port finds none here; a bad port or format is
	// a usage mistake.
	if out := run("--ports", "5353", "-o", "-", capture); len(out) != 0 {
		t.Errorf("--ports 5353 found rows in a capture of port 53: %.200s", out)
	}
	// A capture filter picks the frames read.
	if out := run("--filter", "host 192.0.2.99", "-o", "-", capture); len(out) != 0 {
		t.Errorf("--filter of a host not in the capture found rows: %.200s", out)
	}
	if n := bytes.Count(run("--filter", "udp port 53", "-o", "-", capture), []byte("\n")); n != len(want) {
		t.Errorf("--filter 'udp port 53': %d rows; the capture, all UDP, has %d", n, len(want))
	}
	// --zstd small writes the same rows in fewer bytes.
	small := filepath.Join(dir, "small.arrow")
	run("--zstd", "small", "-o", small, capture)
	if got := arrowTimes(t, small); !slices.Equal(got, want) {
		t.Errorf("--zstd small: %d rows; the default level %d", len(got), len(want))
	}
	if b, d := sizeOf(t, small), sizeOf(t, ref); b >= d {
		t.Errorf("--zstd small wrote %d bytes, the default %d: want fewer", b, d)
	}
	for _, bad := range [][]string{{"--ports", "x", capture}, {"--format", "xml", "-o", "y", capture}, {"--zstd", "max", "-o", "y", capture}} {
		cmd := exec.Command(os.Args[0], append([]string{"dns"}, bad...)...)
		cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
		if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("plumb dns %v: %v; want exit 2", bad, err)
		}
	}
}

// sizeOf is a file's size.
func sizeOf(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestDNSCommandIsTheBuiltin: plumb dns and plumb dns --pairs write, on
// every capture in testdata, the very bytes builtin:dns and
// builtin:dnspairs write for the same capture as one block of a
// pipeline, and fail where they fail: the command runs the built-in,
// not a second extraction loop that could drift from it.
func TestDNSCommandIsTheBuiltin(t *testing.T) {
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	if len(captures) < 50 {
		t.Fatalf("%d captures in testdata", len(captures))
	}
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	dir := t.TempDir()
	for _, capture := range captures {
		for _, mode := range []string{"dns", "dnspairs"} {
			b, err := reg.New(mode, nil)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(capture)
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			in := stage.Input{Block: block.Name{Instance: "lax", Seq: 7}}
			berr := stage.Run(context.Background(), b, in, dnstap.OpenCapture(f), &want)
			f.Close()
			out := filepath.Join(dir, mode+".arrow")
			args := []string{"dns", "--instance", "lax", "--seq", "7", "-o", out, capture}
			if mode == "dnspairs" {
				args = slices.Insert(args, 1, "--pairs")
			}
			_, errOut, code := plumbExec(t, args...)
			if berr != nil {
				if code == 0 {
					t.Errorf("%s: builtin:%s fails (%v), plumb %v does not", filepath.Base(capture), mode, berr, args)
				}
				continue
			}
			if code != 0 {
				t.Errorf("%s: plumb %v: exit %d: %s", filepath.Base(capture), args, code, errOut)
				continue
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Errorf("%s: plumb %v wrote %d bytes, builtin:%s %d: not the same records", filepath.Base(capture), args[:len(args)-1], len(got), mode, want.Len())
			}
		}
	}
}

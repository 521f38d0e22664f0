package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// cutFile cuts one capture file with cfg and returns each block's name and
// (uncompressed) bytes.
func cutFile(t testing.TB, path string, cfg CutConfig) []string {
	t.Helper()
	s, _, err := OpenSpool(t.TempDir(), cfg.Queue, cfg.Instance)
	if err != nil {
		t.Fatal(err)
	}
	s.noSync = true
	s.SetLastSeq(0, false)
	src, err := FileSource(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Cut(context.Background(), cfg, s, List(src), quiet, &Counters{}); err != nil {
		t.Fatal(err)
	}
	ready, _ := s.Ready()
	var blocks []string
	for _, r := range ready {
		raw, err := os.ReadFile(r.Path)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, r.Name.String()+"\n"+string(raw))
	}
	return blocks
}

// TestRunsCutLikePackets: copying runs of records whole cuts exactly the
// blocks that writing packet by packet does — same names, same bytes —
// for the real captures and a generated one, by size and by interval.
func TestRunsCutLikePackets(t *testing.T) {
	dir := t.TempDir()
	gen := filepath.Join(dir, "synth.pcap")
	f, _ := os.Create(gen)
	w, _ := pcap.NewWriter(f, 1, 65535, false)
	if _, err := synth.Generate(context.Background(), w, synth.Config{Seed: 3, MaxBytes: 4 << 20, TCP: 0.2, IPv6: 0.3, EDNS: 0.7}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	f.Close()
	files, _ := filepath.Glob("../testdata/pcaps/*.pcap*")
	files = append(files, gen)
	for _, path := range files {
		for _, cfg := range []CutConfig{
			{MaxBytes: 3000},
			{MaxBytes: 1 << 20, Interval: time.Second},
			{MaxBytes: 256 << 20},
		} {
			cfg.Queue, cfg.Instance, cfg.Codec = "pcap", "eq", codecs.None
			name := fmt.Sprintf("%s/%d/%v", filepath.Base(path), cfg.MaxBytes, cfg.Interval)
			t.Run(name, func(t *testing.T) {
				runs := cutFile(t, path, cfg)
				cfg.perPacket = true
				packets := cutFile(t, path, cfg)
				if len(runs) != len(packets) {
					t.Fatalf("%d blocks with runs, %d packet by packet", len(runs), len(packets))
				}
				for i := range runs {
					if runs[i] != packets[i] {
						t.Fatalf("block %d differs: %.60q (runs) vs %.60q", i, runs[i], packets[i])
					}
				}
			})
		}
	}
}

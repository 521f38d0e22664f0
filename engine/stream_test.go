package engine_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/pcap"
)

// counterMain is a stream program: it counts packets and checkpoints the
// count every two blocks. Run as the test binary with PLUMB_TEST_COUNTER=1.
func counterMain() {
	var st struct{ Packets, Blocks int }
	if s := os.Getenv("PLUMB_STATE"); s != "" {
		json.Unmarshal([]byte(s), &st)
	}
	base := st
	lines := make(chan [2]int, 1024) // seq, packets
	go func() {
		sc := bufio.NewScanner(os.NewFile(3, "blocks"))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			seq, _ := strconv.Atoi(f[1])
			n, _ := strconv.Atoi(f[2])
			lines <- [2]int{seq, n}
		}
		close(lines)
	}()
	ck := os.NewFile(4, "checkpoints")
	var read atomic.Int64 // packets read since start
	go func() {
		r, _, err := pcap.NewReader(os.Stdin)
		if err != nil {
			return
		}
		for {
			if _, _, err := r.Next(); err != nil {
				return
			}
			read.Add(1)
		}
	}()
	boundary, blocks := 0, 0 // through the last finished block
	for l := range lines {
		boundary += l[1]
		for read.Load() < int64(boundary) {
			time.Sleep(time.Millisecond)
		}
		blocks++
		if (base.Blocks+blocks)%2 == 0 {
			b, _ := json.Marshal(struct{ Packets, Blocks int }{base.Packets + boundary, base.Blocks + blocks})
			fmt.Fprintf(ck, "checkpoint %d %s\n", l[0], b)
		}
	}
}

// TestStreamStageSurvivesKills: a counting stream program is SIGKILLed at
// random moments; restarted from its checkpoints, its final count equals
// the packets of the input exactly.
func TestStreamStageSurvivesKills(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2, Backoff: 20 * time.Millisecond})
	var total int
	day := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= 40; seq++ {
		tm := day.Add(time.Duration(seq) * time.Minute)
		data := capture(t, seq, tm)
		rd, closer, _ := pcap.NewReader(strings.NewReader(string(data)))
		for {
			if _, _, err := rd.Next(); err != nil {
				break
			}
			total++
		}
		closer.Close()
		r.putAt("pcap", "lax", seq, tm, data)
	}
	prog := filepath.Join(t.TempDir(), "counter.sh")
	os.WriteFile(prog, []byte(fmt.Sprintf("#!/bin/sh\nPLUMB_TEST_COUNTER=1 exec %q\n", os.Args[0])), 0o755)
	r.mustAccept(fmt.Sprintf(`
job: ids
from: earliest
stages:
  - {name: count, abstraction: stream, inputs: [pcap], program: [%s]}
`, prog))
	// Kill the program a few times while it works.
	rng := rand.New(rand.NewPCG(3, 3))
	for range 4 {
		time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
		killCounters(t)
	}
	stage := r.eng.Stats()[0].ID
	r.wait("the count of every packet", func() bool {
		cur, err := r.db.GetCursor("pcap", "lax", stage)
		if err != nil || cur.Checkpoint == nil {
			return false
		}
		var st struct{ Packets, Blocks int }
		json.Unmarshal([]byte(cur.Checkpoint.State["state"]), &st)
		return st.Blocks == 40 && st.Packets == total
	})
}

// killCounters SIGKILLs every running counter program.
func killCounters(t *testing.T) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), "PLUMB_TEST_COUNTER=1") {
			continue
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

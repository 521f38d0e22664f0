package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/pcap"
)

// TestStreamStageSurvivesKills: a counting stream program is SIGKILLed at
// random moments; restarted from its checkpoints, its final count equals
// the packets of the input exactly.
func TestStreamStageSurvivesKills(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2, Backoff: 20 * time.Millisecond})
	total := r.putCaptures(40, 0)
	prog := counterProgram(t)
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
	// Its latency is to each block being fed to the program (blocks fed
	// again after a kill count again); its cursor is no stream row.
	rows, err := r.eng.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		switch {
		case row.Kind == "stream":
			t.Errorf("the stage's own cursor is listed as a stream consumer: %+v", row)
		case row.Kind == "stage" && row.ArrivalTo.Samples < 40:
			t.Errorf("stream stage %s has %d latency samples for 40 blocks", row.Stage, row.ArrivalTo.Samples)
		}
	}
}

// killCounters SIGKILLs every running counter program.
func killCounters(t *testing.T) {
	for _, pid := range counters() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// counters lists the running counter programs.
func counters() []int {
	var pids []int
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
		pids = append(pids, pid)
	}
	return pids
}

// TestParallelStreamsByFlow is the recipe for parallel stateful
// consumers: builtin:flowhash splits each block four ways by flow, and
// four stream stages each follow one part. Together they count every
// packet once, and their checkpoints release the hash blocks.
func TestParallelStreamsByFlow(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 4})
	total := r.putCaptures(6, 100)
	prog := counterProgram(t)
	job := "job: split\nfrom: earliest\nstages:\n" +
		"  - {name: hash, inputs: [pcap], program: \"builtin:flowhash?n=4\", outputs: [pcap.h0, pcap.h1, pcap.h2, pcap.h3]}\n"
	for i := range 4 {
		job += fmt.Sprintf("  - {name: ids%d, abstraction: stream, inputs: [pcap.h%d], program: [%s]}\n", i, i, prog)
	}
	r.mustAccept(job)
	r.wait("four counts summing to every packet", func() bool {
		sum := 0
		for _, st := range r.eng.Stats() {
			if len(st.Inputs) != 1 || !strings.HasPrefix(st.Inputs[0], "pcap.h") {
				continue
			}
			cur, err := r.db.GetCursor(st.Inputs[0], "lax", st.ID)
			if err != nil || cur.Checkpoint == nil {
				return false
			}
			var s struct{ Packets, Blocks int }
			json.Unmarshal([]byte(cur.Checkpoint.State["state"]), &s)
			if s.Blocks != 6 {
				return false
			}
			sum += s.Packets
		}
		return sum == total
	})
	// The hash queues keep blocks until consumed: checkpointed past, the
	// stream stages let them go.
	r.wait("the consumed hash blocks to go", func() bool {
		return r.count("pcap.h0")+r.count("pcap.h1")+r.count("pcap.h2")+r.count("pcap.h3") == 0
	})
}

// putCaptures stores n generated captures of site lax in queue pcap, a
// minute apart on 2025-05-05 (seeded from seed), and says how many
// packets they hold.
func (r *rig) putCaptures(n int, seed uint64) int {
	r.t.Helper()
	day := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	total := 0
	for seq := uint64(1); seq <= uint64(n); seq++ {
		tm := day.Add(time.Duration(seq) * time.Minute)
		data := capture(r.t, seq+seed, tm)
		rd, closer, err := pcap.NewReader(bytes.NewReader(data))
		if err != nil {
			r.t.Fatal(err)
		}
		for {
			if _, _, err := rd.Next(); err != nil {
				break
			}
			total++
		}
		closer.Close()
		r.putAt("pcap", "lax", seq, tm, data)
	}
	return total
}

// counterProgram is a program running the test binary as the counting
// stream program (testprog.CounterMain).
func counterProgram(t *testing.T) string {
	t.Helper()
	prog := filepath.Join(t.TempDir(), "counter.sh")
	if err := os.WriteFile(prog, []byte(fmt.Sprintf("#!/bin/sh\nPLUMB_TEST_COUNTER=1 exec %q\n", os.Args[0])), 0o755); err != nil {
		t.Fatal(err)
	}
	return prog
}

package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/fsck"
)

// newDomainsOf runs builtin:dns and then builtin:newdomains over a
// site's three blocks with k injecting a failure into block 2's runs,
// and returns the new domains each block reported, in order.
func newDomainsOf(t *testing.T, blocks [][]byte, k *knob) (*rig, []string) {
	r := newRigWith(t, engine.Config{Slots: 3, Inject: k.inject, GapWait: time.Hour}, nil)
	r.mustAccept("job: nd\nfrom: earliest\nqueues: [pcap]\nstages:\n  - {name: d, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}\n" +
		"  - {name: n, inputs: [dns.arrow], program: \"builtin:newdomains?names=qname\", outputs: [nod.arrow], retention: forever}\n")
	done := func(seq int) bool {
		_, err := r.db.Lookup(block.ID{Queue: "nod.arrow", Instance: "lax", Seq: uint64(seq)})
		return err == nil
	}
	for seq := 1; seq <= 3; seq++ {
		r.put("pcap", uint64(seq), blocks[seq-1])
		r.wait(fmt.Sprintf("block %d", seq), func() bool { return done(seq) })
	}
	var got []string
	for seq := 1; seq <= 3; seq++ {
		eachBatch(t, r.read("nod.arrow", uint64(seq)), func(_ arrow.RecordBatch, col func(string) arrow.Array) {
			dom := col("domain").(*array.String)
			for i := range dom.Len() {
				got = append(got, fmt.Sprintf("%d %s", seq, dom.Value(i)))
			}
		})
	}
	return r, got
}

// TestNewDomainsFailureAtEachStep: a failure injected at each step of
// builtin:newdomains' run of the middle block is one attempt: the engine goes on, the block is made again
// from the memory its predecessor committed, and every block reports the
// same new domains as a run that never failed, each once; no scratch or
// orphan blob is left behind.
func TestNewDomainsFailureAtEachStep(t *testing.T) {
	blocks, _ := siteBlocks(t, 3)
	_, want := newDomainsOf(t, blocks, &knob{step: engine.StepCommit, seq: 99})
	if len(want) < 2 {
		t.Fatalf("only %d new domains in the blocks", len(want))
	}
	for _, step := range []engine.Step{engine.StepScratch, engine.StepOpen, engine.StepStart, engine.StepStore, engine.StepEdgeStore, engine.StepCommit} {
		t.Run(string(step), func(t *testing.T) {
			k := &knob{step: step, seq: 2, queue: "dns.arrow"}
			r, got := newDomainsOf(t, blocks, k)
			k.mu.Lock()
			hit := k.hit
			k.mu.Unlock()
			if !hit {
				t.Fatalf("the run of block 2 never reached step %s", step)
			}
			if !slices.Equal(got, want) {
				t.Errorf("new domains after a failure at %s:\n got %v\nwant %v", step, got, want)
			}
			r.wait("six runs counted", func() bool {
				st := r.eng.Stats()
				return len(st) == 2 && st[0].Runs >= 3 && st[1].Runs >= 3
			})
			var runs, failed, faulty int64
			for _, st := range r.eng.Stats() {
				runs, failed, faulty = runs+st.Runs, failed+st.Failed, faulty+st.Faulty
			}
			if failed != 1 || faulty != 0 || runs != 6 {
				t.Errorf("stats: %d runs, %d failed, %d faulty; want 6, the failure counted as 1 attempt, none faulty", runs, failed, faulty)
			}
			rep, err := fsck.Check(context.Background(), r.db, r.store, fsck.Options{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }, Scratch: r.eng.Scratch})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Clean() || rep.Scratch != 0 {
				t.Errorf("left behind: %s", rep)
			}
		})
	}
}

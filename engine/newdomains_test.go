package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// newDomainsAcross runs builtin:dns per site and builtin:newdomains as a
// window stage across sites over three hours of two sites' captures,
// with k injecting a failure into the second hour's window, and returns
// the new domains each window reported, in order, and every queried
// name.
func newDomainsAcross(t *testing.T, k *knob) (r *rig, got []string, queried map[string]bool) {
	r = newRigWith(t, engine.Config{Slots: 3, Inject: k.inject, GapWait: time.Hour}, nil)
	r.mustAccept("job: d\nfrom: earliest\nqueues: [pcap]\nstages:\n  - {name: d, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}\n")
	hour := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	for i, site := range []string{"lax", "ams"} {
		for seq := uint64(1); seq <= 4; seq++ {
			tm := hour.Add(time.Duration(seq-1) * time.Hour)
			r.putAt("pcap", site, seq, tm, capture(t, uint64(10*i)+seq, tm))
		}
	}
	// Every site's records are there before the window stage starts, so
	// which site asked first does not depend on the order runs finish.
	r.wait("both sites' records", func() bool { return r.count("dns.arrow") == 8 })
	r.mustAccept(`
job: nd
from: earliest
stages:
  - name: n
    abstraction: window
    window: {size: 1h, per_instance: all}
    inputs: [dns.arrow]
    program: "builtin:newdomains?names=qname&fp=0.00001"
    outputs: [nod.arrow]
    retention: forever
`)
	r.wait("three hours across sites", func() bool { return r.count("nod.arrow") == 3 })
	queried = map[string]bool{}
	for _, site := range []string{"lax", "ams"} {
		for seq := uint64(1); seq <= 3; seq++ {
			eachBatch(t, r.readName(t, block.Name{Time: hour.Add(time.Duration(seq-1) * time.Hour), Seq: seq, Instance: site, Queue: "dns.arrow"}.String()),
				func(_ arrow.RecordBatch, col func(string) arrow.Array) {
					qr, qn := col("qr").(*array.Boolean), col("qname").(*array.String)
					for i := range qn.Len() {
						if !qr.Value(i) && qn.Value(i) != "" {
							queried[strings.ToLower(qn.Value(i))] = true
						}
					}
				})
		}
	}
	bs, err := r.db.Blocks("nod.arrow", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for w, b := range bs {
		if b.Instance != "all" {
			t.Errorf("window output %s: want instance all", b.Name)
		}
		eachBatch(t, r.readName(t, b.Name), func(_ arrow.RecordBatch, col func(string) arrow.Array) {
			dom, inst := col("domain").(*array.String), col("instance").(*array.String)
			for i := range dom.Len() {
				got = append(got, fmt.Sprintf("%d %s %s", w, inst.Value(i), dom.Value(i)))
			}
		})
	}
	return r, got, queried
}

// TestNewDomainsAcrossSites: builtin:newdomains as a window stage over
// every site reports each name once across the sites, at the hour and
// site that asked first, going on from hour to hour; a failure injected
// at each step of the middle hour's run is one attempt, the hour is run
// again from the memory the first hour committed, the result is the
// same as a run that never failed, and nothing is left behind.
func TestNewDomainsAcrossSites(t *testing.T) {
	_, want, queried := newDomainsAcross(t, &knob{step: engine.StepCommit, seq: 99})
	names := map[string]bool{}
	sites := map[string]bool{}
	for _, row := range want {
		f := strings.Fields(row)
		if names[f[2]] {
			t.Errorf("%s reported twice across sites and hours", f[2])
		}
		names[f[2]], sites[f[1]] = true, true
	}
	if len(names) != len(queried) || len(sites) != 2 {
		t.Fatalf("%d names reported new from sites %v; %d distinct names were asked", len(names), sites, len(queried))
	}
	windowIndex := uint64(time.Date(2025, 5, 5, 1, 0, 0, 0, time.UTC).Unix()/3600)*100 + 1 // revision 1
	for _, step := range []engine.Step{engine.StepScratch, engine.StepOpen, engine.StepStart, engine.StepStore, engine.StepEdgeStore, engine.StepCommit} {
		t.Run(string(step), func(t *testing.T) {
			k := &knob{step: step, seq: windowIndex, instance: "all"}
			r, got, _ := newDomainsAcross(t, k)
			k.mu.Lock()
			hit := k.hit
			k.mu.Unlock()
			if !hit {
				t.Fatalf("the second hour's run never reached step %s", step)
			}
			if !slices.Equal(got, want) {
				t.Errorf("new domains after a failure at %s:\n got %v\nwant %v", step, got, want)
			}
			var failed, faulty int64
			for _, st := range r.eng.Stats() {
				failed, faulty = failed+st.Failed, faulty+st.Faulty
			}
			if failed != 1 || faulty != 0 {
				t.Errorf("stats: %d failed, %d faulty; want the failure counted as 1 attempt, none faulty", failed, faulty)
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

// TestNewDomainsWhereItRemembers: a job that would run builtin:newdomains
// without its memory (after another step that carries state, before
// another step, or over two queues) is refused with what to do, instead
// of running and writing no row; one that gives it a stage is accepted.
func TestNewDomainsWhereItRemembers(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1})
	for _, c := range []struct{ program, inputs, want string }{
		{"[builtin:dns, builtin:newdomains]", "[pcap]", "builtin:dns and builtin:newdomains both carry state from block to block, which only a stage's last step does; give builtin:newdomains a stage of its own reading builtin:dns's output"},
		{"[builtin:newdomains, builtin:dnstop]", "[dns.arrow]", "builtin:newdomains remembers from block to block, which it does only as its stage's last step; give it a stage of its own after builtin:dnstop"},
		{"builtin:newdomains", "[a.arrow, b.arrow]", "builtin:newdomains remembers from block to block, which it does only over one input queue; 2 are listed"},
	} {
		res := r.submit(fmt.Sprintf("job: bad\nqueues: [pcap, dns.arrow, a.arrow, b.arrow]\nstages:\n  - {name: s, inputs: %s, program: %s, outputs: [nod.arrow]}\n", c.inputs, c.program))
		if res.State != "rejected" || !strings.Contains(res.Reason, c.want) {
			t.Errorf("%s over %s: %+v\nwant %q", c.program, c.inputs, res, c.want)
		}
	}
	r.mustAccept("job: good\nqueues: [pcap]\nstages:\n  - {name: d, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow]}\n  - {name: n, inputs: [dns.arrow], program: builtin:newdomains, outputs: [nod.arrow]}\n")
}

package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/fsck"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin/dns"
)

// siteBlocks cuts real captures (TCP split across the cuts, IP
// fragments) into n blocks of one site, and returns them with the rows
// the uncut capture gives, sorted.
func siteBlocks(t testing.TB, n int) (blocks [][]byte, want []string) {
	t.Helper()
	link, cis, frames := captureFrames(t, "dnscap__dnsotcp-manyopkts.pcap", "dnscap__frags.pcap", "dnscap__dns.pcap")
	x := dnsrec.NewExtractor(link, nil, func(r *dnsrec.Record) {
		want = append(want, fmt.Sprintf("%d %04x %s", r.Time.UnixNano(), r.Msg.ID, r.Msg.QName))
	})
	per := (len(frames) + n - 1) / n
	for start := 0; start < len(frames); start += per {
		var b bytes.Buffer
		w, _ := pcap.NewWriter(&b, link, 65535, true)
		for i := start; i < min(start+per, len(frames)); i++ {
			w.WritePacket(cis[i], frames[i])
			x.Packet(cis[i].Timestamp, frames[i])
		}
		w.Flush()
		blocks = append(blocks, b.Bytes())
	}
	slices.Sort(want)
	return blocks, want
}

// knob fails one step of the runs of one block, once, and remembers
// which steps the runs of that block went through.
type knob struct {
	step engine.Step
	seq  uint64
	// queue, when set, limits the knob to runs whose input is of it.
	queue string
	// instance is the site of the block (default lax; "all" for a
	// window across sites).
	instance string
	mu       sync.Mutex
	hit      bool
	seen     map[engine.Step]bool
	// panics: the built-in panics at step instead (start or join).
	panics bool
}

func (k *knob) of(name string) bool {
	n, err := block.Parse(name)
	inst := k.instance
	if inst == "" {
		inst = "lax"
	}
	return err == nil && n.Seq == k.seq && n.Instance == inst && (k.queue == "" || n.Queue == k.queue)
}

// fire says whether step fails now for the named block: the first time,
// and by a panic only when the knob panics.
func (k *knob) fire(step engine.Step, name string, panics bool) bool {
	if !k.of(name) {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen == nil {
		k.seen = map[engine.Step]bool{}
	}
	k.seen[step] = true
	if step != k.step || k.hit || panics != k.panics {
		return false
	}
	k.hit = true
	return true
}

func (k *knob) inject(step engine.Step, name string) error {
	if !k.fire(step, name, false) {
		return nil
	}
	return fmt.Errorf("injected failure at %s", step)
}

// panicky is builtin:dns whose Start or Finish panics when its knob says.
type panicky struct {
	*dns.Messages
	k *knob
}

func (p panicky) Run(ctx context.Context, in stage.Input, r io.Reader, w io.Writer) error {
	part, err := p.Start(ctx, in, r, w)
	if err != nil {
		return err
	}
	defer part.Discard()
	return part.Finish(ctx, in)
}

func (p panicky) Start(ctx context.Context, in stage.Input, r io.Reader, w io.Writer) (stage.Part, error) {
	if p.k.fire(engine.StepStart, in.Block.String(), true) {
		var m map[string]int
		m["a nil map"]++ // a real runtime panic, as a bug on hostile bytes makes
	}
	part, err := p.Messages.Start(ctx, in, r, w)
	if err != nil {
		return nil, err
	}
	return panickyPart{part, p.k}, nil
}

type panickyPart struct {
	stage.Part
	k *knob
}

func (p panickyPart) Finish(ctx context.Context, in stage.Input) error {
	if p.k.fire(engine.StepJoin, in.Block.String(), true) {
		var hp *struct{ files []int }
		_ = hp.files // the nil dereference that took the server down
	}
	return p.Part.Finish(ctx, in)
}

var (
	_ stage.Edged = panicky{}
)

// TestFailureAtEachStep injects a failure at each step of builtin:dns's
// runs on the middle of three blocks of a site, as a block run (the
// site's blocks in order, each read whole) and as a parted run (its
// neighbours first, so it is read apart and joined at its turn), and a
// panic in the built-in's two halves. Each time: the engine goes on, the
// failure is one attempt (the stage counts one failed run, none faulty),
// the block and its neighbours are all made with the rows of the uncut
// capture, and no scratch or orphan blob is left behind. The old code
// died of a nil dereference on every early failure of a parted run.
func TestFailureAtEachStep(t *testing.T) {
	blocks, want := siteBlocks(t, 3)
	blockSteps := []engine.Step{engine.StepScratch, engine.StepOpen, engine.StepStart, engine.StepStore, engine.StepEdgeStore, engine.StepCommit}
	partSteps := []engine.Step{engine.StepScratch, engine.StepOpen, engine.StepStart, engine.StepFirstHalf, engine.StepJoin, engine.StepStore, engine.StepEdgeStore, engine.StepCommit}
	type tc struct {
		parted bool
		k      *knob
	}
	var cases []tc
	for _, s := range blockSteps {
		cases = append(cases, tc{false, &knob{step: s, seq: 2}})
	}
	for _, s := range partSteps {
		cases = append(cases, tc{true, &knob{step: s, seq: 2}})
	}
	for _, s := range []engine.Step{engine.StepStart, engine.StepJoin} {
		cases = append(cases, tc{false, &knob{step: s, seq: 2, panics: true}}, tc{true, &knob{step: s, seq: 2, panics: true}})
	}
	for _, c := range cases {
		name := fmt.Sprintf("block/%s", c.k.step)
		if c.parted {
			name = fmt.Sprintf("parted/%s", c.k.step)
		}
		if c.k.panics {
			name += "/panic"
		}
		t.Run(name, func(t *testing.T) {
			failAtStep(t, blocks, want, c.parted, c.k)
		})
	}
}

func failAtStep(t *testing.T, blocks [][]byte, want []string, parted bool, k *knob) {
	r := newRigWith(t, engine.Config{Slots: 3, Inject: k.inject, GapWait: time.Hour}, func(reg *stage.Registry) {
		reg.Add(stage.Factory{Name: "panicky", New: func(url.Values) (stage.Builtin, error) { return panicky{&dns.Messages{}, k}, nil }})
	})
	r.mustAccept("job: dns\nfrom: earliest\nqueues: [pcap]\nstages:\n  - {name: d, inputs: [pcap], program: builtin:panicky, outputs: [dns.arrow], retention: forever}\n")
	put := func(seq int) { r.put("pcap", uint64(seq), blocks[seq-1]) }
	done := func(seq int) bool {
		_, err := r.db.Lookup(block.ID{Queue: "dns.arrow", Instance: "lax", Seq: uint64(seq)})
		return err == nil
	}
	if parted {
		// The neighbours come first: block 2 and 3 wait for block 1, so
		// their first halves run apart.
		put(3)
		put(2)
		r.wait("block 2's first half", func() bool {
			k.mu.Lock()
			defer k.mu.Unlock()
			return k.seen[engine.StepFirstHalf]
		})
		put(1)
	} else {
		for seq := 1; seq <= 3; seq++ {
			put(seq)
			r.wait(fmt.Sprintf("block %d", seq), func() bool { return done(seq) || seq == 2 })
			if seq == 2 {
				r.wait("block 2", func() bool { return done(2) })
			}
		}
	}
	r.wait("all three blocks", func() bool { return done(1) && done(2) && done(3) })
	k.mu.Lock()
	hit, seen := k.hit, k.seen
	k.mu.Unlock()
	if !hit {
		t.Fatalf("the run of block 2 never reached step %s (it went through %v): the test tested nothing", k.step, seen)
	}
	if parted && !seen[engine.StepFirstHalf] {
		t.Fatalf("block 2 was never read apart (steps %v)", seen)
	}
	// A run is counted just after its commit is visible.
	r.wait("three runs counted", func() bool { return r.eng.Stats()[0].Runs >= 3 })
	st := r.eng.Stats()[0]
	if st.Failed != 1 || st.Faulty != 0 || st.Runs != 3 {
		t.Errorf("stats: %d runs, %d failed, %d faulty; want 3 runs, the failure counted as 1 attempt, none faulty", st.Runs, st.Failed, st.Faulty)
	}
	var got []string
	for seq := 1; seq <= 3; seq++ {
		got = append(got, dnsRows(t, r.read("dns.arrow", uint64(seq)))...)
	}
	slices.Sort(got)
	// The last block's held bytes wait for a next block, as they would
	// live: the uncut rows hold them as unflushed too.
	if !slices.Equal(got, want) {
		t.Errorf("%d rows, the uncut capture %d:\n%s", len(got), len(want), rowDiff(got, want))
	}
	rep, err := fsck.Check(context.Background(), r.db, r.store, fsck.Options{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }, Scratch: r.eng.Scratch})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Scratch != 0 {
		t.Errorf("left behind: %s", rep)
	}
}

// rowDiff names a few rows one side has and the other lacks.
func rowDiff(got, want []string) string {
	var b strings.Builder
	extra, missing := slices.Clone(got), slices.Clone(want)
	for _, w := range want {
		if i := slices.Index(extra, w); i >= 0 {
			extra = slices.Delete(extra, i, i+1)
		}
	}
	for _, g := range got {
		if i := slices.Index(missing, g); i >= 0 {
			missing = slices.Delete(missing, i, i+1)
		}
	}
	fmt.Fprintf(&b, "extra %d: %.3q\nmissing %d: %.3q", len(extra), extra, len(missing), missing)
	return b.String()
}

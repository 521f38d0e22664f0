package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/stage/program"

	"gopkg.in/yaml.v3"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/state"
	"github.com/plumb-dev/plumb/windowing"
)

// WindowSpec turns a job's window spec into the tracker's.
func WindowSpec(w *pipeline.WindowSpec) (windowing.Spec, error) {
	var s windowing.Spec
	if w == nil {
		return s, errors.New("a window stage needs window.size")
	}
	if d, err := pipeline.ParseDuration(w.Size); err == nil && d > 0 {
		s.Size = time.Duration(d)
	} else if n, err := fmt.Sscan(w.Size, &s.SizeBlocks); n != 1 || err != nil {
		return s, fmt.Errorf("window.size %q: want a duration or a number of blocks", w.Size)
	}
	if w.Start != "" {
		t, err := time.Parse(time.RFC3339, w.Start)
		if err != nil {
			return s, fmt.Errorf("window.start: %w", err)
		}
		s.Phase = t
		if w.End != "" {
			end, err := time.Parse(time.RFC3339, w.End)
			if err != nil {
				return s, fmt.Errorf("window.end: %w", err)
			}
			s.From, s.To = t, end
		}
	}
	s.MaxWait, s.IdleTimeout = time.Duration(w.MaxWait), time.Duration(w.IdleTimeout)
	var err error
	if s.MaxMissing, s.MaxMissingPct, err = windowing.ParseMissing(w.MaxMissing); err != nil {
		return s, err
	}
	s.Ordering, s.Cutoff, s.Late = windowing.Ordering(w.Ordering), windowing.Cutoff(w.Cutoff), windowing.Late(w.Late)
	s.AllInstances = w.PerInstance == "all"
	s.Instances = w.Instances
	if w.Empty != "" && w.Empty != "skip" && w.Empty != "run" {
		return s, fmt.Errorf("window.empty %q: want skip or run", w.Empty)
	}
	if h := w.LateHorizon; h != "" {
		if n, err := strconv.ParseInt(h, 10, 32); err == nil && n > 0 {
			s.LateHorizon = n
		} else if d, err := pipeline.ParseDuration(h); err == nil && d > 0 && s.Size > 0 {
			s.LateHorizon = int64((time.Duration(d) + s.Size - 1) / s.Size)
		} else {
			return s, fmt.Errorf("window.late_horizon %q: want a number of windows, or a duration for time windows", h)
		}
		// The horizon's blocks are held in memory.
		if s.LateHorizon > pipeline.MaxLateHorizonWindows {
			return s, fmt.Errorf("window.late_horizon %q is %d windows of %s; at most %d are held", h, s.LateHorizon, s.Size, pipeline.MaxLateHorizonWindows)
		}
	}
	s.Defaults()
	return s, s.Validate()
}

// windowState is a window stage as the engine runs it.
type windowState struct {
	tracker  *windowing.Tracker
	runEmpty bool // window.empty: run, not skip
	queue    string
	group    string
	after    uint64 // the last serial fed to the tracker
	retry    []pendingWindow
	// carried: the program ends in a Sequential built-in, whose state
	// goes from each window to the next of its instance (a site, or
	// "all"): such windows run strictly in order, each from the carry
	// the previous one committed.
	carried  bool
	released map[string]uint64 // per site, the sequence number released up to
	fired    firedLog
}

// firedLog summarises the "window fired" lines: a backfill fires
// windows by the thousand (51,096 lines in 25 minutes for one hourly
// job), burying every other line. A stage writes one at most every
// firedLogEvery at Info, counting the windows fired meanwhile, which are
// each logged at Debug.
type firedLog struct {
	mu    sync.Mutex
	last  time.Time // when a line was last written at Info
	quiet int       // windows fired since then without one
}

const firedLogEvery = 10 * time.Second

// note says whether a window fired at now gets its line at Info, and
// how many fired quietly before it.
func (l *firedLog) note(now time.Time) (info bool, quiet int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < firedLogEvery {
		l.quiet++
		return false, 0
	}
	quiet, l.quiet, l.last = l.quiet, 0, now
	return true, quiet
}

type pendingWindow struct {
	f        windowing.Firing
	attempts int
	notUntil time.Time
}

// newWindowState builds a window stage's tracker and replays what it has
// seen: the windows it already fired, then the input queue's blocks since
// the stage subscribed, so a restart fires nothing twice; the tracker
// keeps of them only the open windows and the late horizon.
func (e *Engine) newWindowState(n *pipeline.Node, group string) (*windowState, error) {
	if len(n.Inputs) != 1 {
		return nil, fmt.Errorf("stage %s: a window stage reads one input queue", n.Name)
	}
	spec, err := WindowSpec(n.Window)
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", n.Name, err)
	}
	tr, err := windowing.New(spec)
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", n.Name, err)
	}
	ws := &windowState{tracker: tr, queue: n.Inputs[0], group: group, released: map[string]uint64{}, runEmpty: n.Window.Empty == "run"}
	g, err := e.db.EnsureGroup(ws.queue, group, state.From(n.From))
	if err != nil {
		return nil, err
	}
	fired, err := e.db.FiredWindows(group)
	if err != nil {
		return nil, err
	}
	for _, f := range fired {
		if id, ok := parseWindowID(f.ID); ok {
			tr.MarkFired(id, f.Revision)
		}
	}
	// Replay what the tracker may still need, not the queue's history:
	// a restart costs what is open, however long the stage has run.
	tails, err := e.db.SiteTails(ws.queue, group, g.Start, func(low, b state.Block) bool {
		return tr.Needed(windowBlock(low), windowBlock(b))
	})
	if err != nil {
		return nil, err
	}
	for _, b := range tails.Blocks {
		tr.Replay(windowBlock(b))
		if _, owes := tails.Owed[b.Instance]; !owes {
			ws.released[b.Instance] = max(ws.released[b.Instance], b.Seq)
		}
	}
	for site, low := range tails.Owed {
		ws.released[site] = low - 1 // every block below it is done
	}
	ws.after = max(g.Start, tails.Newest)
	return ws, nil
}

func windowBlock(b state.Block) windowing.Block {
	return windowing.Block{Instance: b.Instance, Seq: b.Seq, Time: b.Time, Arrived: b.Arrived, Name: b.Name}
}

func parseWindowID(s string) (windowing.WindowID, bool) {
	var id windowing.WindowID
	i := bytes.LastIndexByte([]byte(s), '/')
	if i < 0 {
		return id, false
	}
	if _, err := fmt.Sscan(s[i+1:], &id.Index); err != nil {
		return id, false
	}
	if id.Instance = s[:i]; id.Instance == "all" {
		id.Instance = ""
	}
	return id, true
}

// feed gives the tracker the blocks that arrived since the last feed.
func (e *Engine) feed(ws *windowState) error {
	for {
		bs, err := e.db.Blocks(ws.queue, ws.after, 1000)
		if err != nil {
			return err
		}
		for _, b := range bs {
			ws.after = b.Serial
			if ws.tracker.Add(windowBlock(b)) == windowing.TooLate {
				// No window will take it: done with, or it would be owed
				// for ever.
				e.log.Warn("block past the window stage's late horizon: no window holds it any more; raise window.late_horizon to take blocks this late",
					"queue", ws.queue, "block", b.Name)
				if _, err := e.db.Ack(ws.queue, ws.group, []block.ID{b.ID()}); err != nil {
					return err
				}
			}
		}
		if len(bs) < 1000 {
			return nil
		}
	}
}

// dueWindows feeds a window stage and returns the windows to run now.
func (e *Engine) dueWindows(st *graphStage, now time.Time) ([]pendingWindow, error) {
	ws := st.win
	if err := e.feed(ws); err != nil {
		return nil, err
	}
	var run, wait []pendingWindow
	if ws.carried {
		// In order: a window waiting for its retry holds back the later
		// windows of its instance, which go on from its state.
		for _, f := range ws.tracker.Due(now) {
			ws.retry = append(ws.retry, pendingWindow{f: f})
		}
		held := map[string]bool{}
		for _, p := range ws.retry {
			if held[p.f.ID.Instance] || now.Before(p.notUntil) {
				held[p.f.ID.Instance] = true
				wait = append(wait, p)
			} else {
				run = append(run, p)
			}
		}
		ws.retry = wait
		return run, nil
	}
	for _, p := range ws.retry {
		if now.Before(p.notUntil) {
			wait = append(wait, p)
		} else {
			run = append(run, p)
		}
	}
	ws.retry = wait
	for _, f := range ws.tracker.Due(now) {
		run = append(run, pendingWindow{f: f})
	}
	return run, nil
}

// runWindows runs fired windows one after another, in order. Empty
// windows run nothing unless the stage asks: a consecutive stretch of
// them is recorded as one, so a window stage costs what its data holds,
// not the time its data spans (one hourly job over 55 years of sparse
// backfill made 48,300 runs of nothing).
func (e *Engine) runWindows(ctx context.Context, st *graphStage, spec runSpec, ws []pendingWindow) {
	var stretch []windowing.Firing
	flush := func() {
		if len(stretch) > 0 {
			e.skipEmpty(st, spec, stretch)
			stretch = stretch[:0]
		}
	}
	defer flush()
	held := map[string]bool{} // instances whose carry waits for a retry
	for _, p := range ws {
		if ctx.Err() != nil {
			return
		}
		if held[p.f.ID.Instance] {
			e.mu.Lock()
			st.win.retry = append(st.win.retry, p)
			e.mu.Unlock()
			continue
		}
		if !st.win.runEmpty && p.attempts == 0 && p.f.Empty() {
			if n := len(stretch); n > 0 && !p.f.Follows(stretch[n-1]) {
				flush()
			}
			stretch = append(stretch, p.f)
			continue
		}
		flush()
		err := e.runWindow(ctx, st, spec, p.f)
		if err == nil || ctx.Err() != nil {
			continue
		}
		p.attempts++
		if p.attempts < e.cfg.MaxAttempts {
			p.notUntil = e.cfg.Now().Add(e.backoff(p.attempts))
			e.log.Warn("window run failed; will retry", "stage", spec.node.Name, "window", p.f.ID.String(), "attempt", p.attempts, "err", err)
			e.mu.Lock()
			st.win.retry = append(st.win.retry, p)
			e.mu.Unlock()
			held[p.f.ID.Instance] = st.win.carried
			continue
		}
		e.log.Error("window set aside after its last attempt; see `plumb windows`", "stage", spec.node.Name, "window", p.f.ID.String(), "err", err)
		rec := e.windowRecord(st, p.f)
		rec.Error = err.Error()
		if _, cerr := e.db.CommitWindow(rec, st.win.queue, nil, nil, nil); cerr != nil {
			e.log.Error("record a faulty window", "stage", spec.node.Name, "window", p.f.ID.String(), "err", cerr)
		}
	}
}

// skipEmpty records a stretch of consecutive empty windows of one site as
// one fired record, and runs nothing.
func (e *Engine) skipEmpty(st *graphStage, spec runSpec, fs []windowing.Firing) {
	first, last := fs[0], fs[len(fs)-1]
	rec := e.windowRecord(st, first)
	rec.Reason, rec.To, rec.Empty = "empty", last.To, int64(len(fs))
	if _, err := e.db.CommitWindow(rec, st.win.queue, nil, nil, nil); err != nil {
		e.log.Error("record empty windows", "stage", spec.node.Name, "window", rec.ID, "windows", len(fs), "err", err)
		return
	}
	e.log.Debug("empty windows skipped", "stage", spec.node.Name, "from", rec.ID, "windows", len(fs), "from_time", rec.From, "to_time", rec.To)
}

func (e *Engine) windowRecord(st *graphStage, f windowing.Firing) state.WindowRecord {
	rec := state.WindowRecord{Stage: st.group, ID: idText(f.ID), Revision: f.Revision, Reason: string(f.Reason),
		From: f.From, To: f.To, Fired: f.At.UTC()}
	for _, b := range f.Blocks {
		rec.Blocks = append(rec.Blocks, b.Name)
	}
	for _, m := range f.Missing {
		rec.Missing = append(rec.Missing, fmt.Sprintf("%s:%d", m.Instance, m.Seq))
	}
	for _, l := range f.Late {
		rec.Late = append(rec.Late, fmt.Sprintf("%s:%d", l.Instance, l.Seq))
	}
	return rec
}

func idText(id windowing.WindowID) string {
	if id.Instance == "" {
		return fmt.Sprintf("all/%d", id.Index)
	}
	return id.String()
}

// runWindow runs one window: its blocks as files, the listing on stdin,
// outputs stored, then outputs, record and release committed at once.
// Each step can be failed by Config.Inject under the name of the
// window's output block in its input queue (outputs' stores under their
// own).
func (e *Engine) runWindow(ctx context.Context, st *graphStage, spec runSpec, f windowing.Firing) (err error) {
	if t := e.timeout(spec.node); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t, program.ErrTimeout)
		defer cancel()
	}
	m := runMeasure{}
	defer func() {
		if err != nil && ctx.Err() == nil {
			st.count(&m, "failed")
		}
	}()
	// Outputs are named after the window: its site (or "all"), its start,
	// and a sequence number of index·100 + revision, so each revision is
	// its own block.
	name := block.Name{Time: f.From, Seq: uint64(f.ID.Index)*100 + uint64(f.Revision), Instance: f.ID.Instance}
	if name.Instance == "" {
		name.Instance = "all"
	}
	if f.From.IsZero() && len(f.Blocks) > 0 {
		name.Time = f.Blocks[0].Time
	}
	at := name // the window as its failures are injected: of its input queue
	at.Queue = st.win.queue
	scratch := ""
	if err = e.inject(StepScratch, at.String()); err == nil {
		scratch, err = e.scratch.make(e.cfg.Scratch, "window-")
	}
	if err != nil {
		return fmt.Errorf("scratch space for window %s: %w (is %s writable, with room?)", idText(f.ID), err, e.cfg.Scratch)
	}
	defer e.scratch.done(scratch)
	var in stage.WindowInput
	in.Window.Stage, in.Window.ID, in.Window.Instance = spec.node.Name, idText(f.ID), f.ID.Instance
	if in.Window.Instance == "" {
		in.Window.Instance = "all"
	}
	in.Window.From, in.Window.To, in.Window.FirstSeq, in.Window.LastSeq = f.From, f.To, f.FirstSeq, f.LastSeq
	in.Window.Revision, in.Window.Reason = f.Revision, string(f.Reason)
	for _, b := range f.Blocks {
		path := filepath.Join(scratch, b.Name)
		if err := e.inject(StepOpen, at.String()); err != nil {
			return fmt.Errorf("window block %s: %w", b.Name, err)
		}
		n, err := e.materialize(ctx, st.win.queue, b, path)
		if err != nil {
			return err
		}
		m.in.Add(n)
		in.Blocks = append(in.Blocks, stage.WindowBlock{Name: b.Name, Instance: b.Instance, Seq: b.Seq, Time: b.Time, Path: path})
	}
	rec := e.windowRecord(st, f)
	in.Missing, in.Late = rec.Missing, rec.Late
	doc, err := yaml.Marshal(in)
	if err != nil {
		return err
	}
	var outs []program.Port
	var files []*program.HashFile
	for _, q := range spec.node.Outputs {
		fh, err := os.CreateTemp(scratch, "out-")
		if err != nil {
			return err
		}
		defer fh.Close()
		hf := program.NewHashFile(fh)
		files = append(files, hf)
		outs = append(outs, program.Port{Queue: q, W: hf})
	}
	start := e.cfg.Now()
	// A confined program reads the window's blocks by their paths in
	// scratch, which it may pass through but not list or write.
	x := e.confine(spec.node)
	if x.Sandbox != nil {
		if err := os.Chmod(scratch, 0o711); err != nil {
			return err
		}
		x.ReadOnly = []string{scratch}
	}
	sin := stage.Input{Drops: &stage.Drops{}}

	var cin *state.CarryIn
	var carry *state.CarryUpdate
	if st.win.carried {
		if cin, carry, err = e.windowCarry(ctx, st, f); err != nil {
			return err // the server's own state: not the window's fault
		}
		if cin.Carried {
			sin.Carry = &stage.Carry{In: cin.State}
		}
	}
	var res program.Outcome
	if err = e.inject(StepStart, at.String()); err == nil {
		res, err = program.Execute(ctx, sin, x, spec.steps, []program.Port{{Queue: st.win.queue, R: bytes.NewReader(doc)}}, outs, scratch)
	}
	m.took, m.cpu = e.cfg.Now().Sub(start), res.CPU
	if err != nil {
		if res.Stderr != "" {
			err = fmt.Errorf("%w; stderr: %s", err, lastLine(res.Stderr))
		}
		return err
	}
	blocks, out, err := e.storeOutputs(ctx, name, spec.node.Outputs, files)
	m.out += out
	if err != nil {
		return err
	}
	consumed, err := e.releasable(st.win, f)
	if err != nil {
		return err
	}
	if sin.Carry != nil {
		carry.State = sin.Carry.Out
		if err = e.inject(StepEdgeStore, at.String()); err == nil {
			err = e.storeCarry(ctx, st.group, carry)
		}
		if err != nil {
			return err
		}
	}
	again := false
	if err = e.inject(StepCommit, at.String()); err == nil {
		again, err = e.db.CommitWindow(rec, st.win.queue, consumed, blocks, carry)
	}
	e.carryCommitted(ctx, cin, carry, err == nil && !again)
	if err != nil {
		return fmt.Errorf("commit window %s: %w", rec.ID, err)
	}
	m.edges(st.win.queue, len(f.Blocks), m.in.Load(), blocks)
	m.drops = sin.Drops.Counts()
	st.count(&m, "ok")
	var ins []state.Block
	for _, b := range f.Blocks {
		ins = append(ins, state.Block{Arrived: b.Arrived, Time: b.Time})
	}
	e.outputLatency(spec.node.Name, ins)
	args := []any{"stage", spec.node.Name, "window", rec.ID, "revision", f.Revision, "reason", f.Reason,
		"blocks", len(f.Blocks), "missing", len(f.Missing), "late", len(f.Late)}
	if info, quiet := st.win.fired.note(e.cfg.Now()); info {
		e.log.Info("window fired", append(args, "fired_since_last_line", quiet)...)
	} else {
		e.log.Debug("window fired", args...)
	}
	return nil
}

// windowCarry says how a window of a carried stage runs: from the state
// its instance's previous window committed, or, for a revision of a
// window already passed (late blocks refired: revision 2 on), on its own, the carry
// only counting it.
func (e *Engine) windowCarry(ctx context.Context, st *graphStage, f windowing.Firing) (*state.CarryIn, *state.CarryUpdate, error) {
	inst := f.ID.Instance
	if inst == "" {
		inst = "all"
	}
	c, have, err := e.db.GetCarry(st.group, inst)
	if err != nil {
		return nil, nil, err
	}
	if f.Revision > 1 || f.ID.Index < 0 || (have && uint64(f.ID.Index) < c.Next) {
		return &state.CarryIn{Instance: inst}, &state.CarryUpdate{Instance: inst, Late: true}, nil
	}
	cin := &state.CarryIn{Instance: inst, Carried: true, State: c.State, StateKey: c.StateKey}
	if err := e.loadCarry(ctx, cin); err != nil {
		return nil, nil, err
	}
	return cin, &state.CarryUpdate{Instance: inst, Seq: uint64(f.ID.Index)}, nil
}

// materialize puts a block in the run's scratch space: a hard link when
// the store is a local directory, a copy otherwise.
func (e *Engine) materialize(ctx context.Context, queue string, b windowing.Block, path string) (int64, error) {
	sb, err := e.db.Lookup(block.ID{Queue: queue, Instance: b.Instance, Seq: b.Seq})
	if err != nil {
		return 0, fmt.Errorf("window block %s: %w", b.Name, err)
	}
	if l, ok := e.store.(blob.Linker); ok {
		if err := l.Link(sb.Key, path); err == nil {
			if e.cfg.Sandbox != nil {
				// The run's own uid reads it. The store's directories stay
				// 0750, so nothing outside the store sees more.
				if err := os.Chmod(path, 0o644); err != nil {
					return 0, err
				}
			}
			return sb.Size, nil
		}
	}
	rc, err := e.store.Open(ctx, sb.Key)
	if err != nil {
		return 0, fmt.Errorf("window block %s: %w", b.Name, err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	if e.cfg.Sandbox != nil {
		if err := f.Chmod(0o644); err != nil { // whatever the umask
			f.Close()
			return 0, err
		}
	}
	n, err := io.Copy(f, rc)
	return n, errors.Join(err, f.Close())
}

// releasable returns the blocks a fired window lets go: each site's blocks
// before the window's first member. The window's own blocks stay owed
// until the next window fires, as its left bracket may be among them.
func (e *Engine) releasable(ws *windowState, f windowing.Firing) ([]state.Block, error) {
	first := map[string]uint64{}
	for _, b := range f.Blocks {
		if s, ok := first[b.Instance]; !ok || b.Seq < s {
			first[b.Instance] = b.Seq
		}
	}
	var out []state.Block
	sites := make([]string, 0, len(first))
	for s := range first {
		sites = append(sites, s)
	}
	sort.Strings(sites)
	for _, site := range sites {
		for seq := first[site] - 1; seq > ws.released[site]; seq-- {
			b, err := e.db.Lookup(block.ID{Queue: ws.queue, Instance: site, Seq: seq})
			if errors.Is(err, state.ErrNotFound) {
				continue // deleted, or never there
			}
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		ws.released[site] = max(ws.released[site], first[site]-1)
	}
	return out, nil
}

// WindowView is one window of plumb windows, as the protocol defines it.
type WindowView = flight.WindowView

// Windows lists the windows of every window stage (or of one, by name or
// ID): those waiting, with what they wait for, then those fired.
func (e *Engine) Windows(graphStage string) ([]WindowView, error) {
	return e.WindowsMatching(WindowFilter{Stage: graphStage}, nil)
}

// WindowsMatching lists the windows f picks, as Windows orders them, of
// the stages readable accepts (all when nil), stopping at f.Limit. The
// engine's lock is held only for the windows waiting, which it holds in
// memory; fired ones are read from the metadata after, and no further
// than the limit, so a listing of a long history neither reads all of
// it nor holds the engine meanwhile.
func (e *Engine) WindowsMatching(f WindowFilter, readable func(graphStage string) bool) ([]WindowView, error) {
	if e.cfg.Shared && !e.scheduling.Load() {
		return nil, ErrNotScheduling // the open windows are the scheduler's
	}
	type stageWindows struct {
		name, group string
		waiting     []WindowView
	}
	var stages []stageWindows
	e.mu.Lock()
	now := e.cfg.Now()
	for _, st := range e.sorted() {
		if st.win == nil || f.Stage != "" && f.Stage != st.node.Name && f.Stage != st.group {
			continue
		}
		if readable != nil && !readable(st.node.Name) {
			continue
		}
		if err := e.feed(st.win); err != nil {
			e.mu.Unlock()
			return nil, err
		}
		sw := stageWindows{name: st.node.Name, group: st.group}
		for _, s := range st.win.tracker.Open(now) {
			v := WindowView{Stage: st.node.Name, ID: idText(s.ID), State: "waiting", From: s.From, To: s.To,
				Blocks: len(s.Present), Bracketed: s.Bracketed, WaitUntil: s.WaitUntil}
			for _, m := range s.Missing {
				v.Missing = append(v.Missing, fmt.Sprintf("%s:%d", m.Instance, m.Seq))
			}
			if s.Blocked != nil {
				v.BlockedBy = idText(*s.Blocked)
			}
			if f.Match(v) {
				sw.waiting = append(sw.waiting, v)
			}
		}
		stages = append(stages, sw)
	}
	if _, ok := e.stageNamed(f.Stage); f.Stage != "" && !ok {
		e.mu.Unlock()
		return nil, fmt.Errorf("no window stage %q; `plumb graph` lists the stages", f.Stage)
	}
	e.mu.Unlock()
	var out []WindowView
	full := func() bool { return f.Limit > 0 && len(out) >= f.Limit }
	for _, sw := range stages {
		for _, v := range sw.waiting {
			if full() {
				return out, nil
			}
			out = append(out, v)
		}
		if full() {
			return out, nil
		}
		left := 0
		if f.Limit > 0 {
			left = f.Limit - len(out)
		}
		prefix := ""
		if f.Site != "" {
			prefix = f.Site + "/" // IDs are SITE/INDEX
		}
		recs, err := e.db.WindowsWhere(sw.group, prefix, func(r *state.WindowRecord) bool { return f.Match(firedView(sw.name, r)) }, left)
		if err != nil {
			return nil, err
		}
		for i := range recs {
			out = append(out, firedView(sw.name, &recs[i]))
		}
	}
	return out, nil
}

// firedView is a fired window's record as a listing shows it.
func firedView(graphStage string, r *state.WindowRecord) WindowView {
	v := WindowView{Stage: graphStage, ID: r.ID, State: "fired", From: r.From, To: r.To, Revision: r.Revision,
		Reason: r.Reason, Blocks: len(r.Blocks), Missing: r.Missing, Late: r.Late, Error: r.Error, Fired: r.Fired, Empty: r.Empty}
	if r.Error != "" {
		v.State = "faulty"
	}
	return v
}

func (e *Engine) stageNamed(name string) (*graphStage, bool) {
	for _, st := range e.stages {
		if st.node.Name == name || st.group == name {
			return st, st.win != nil
		}
	}
	return nil, false
}

// FireWindow fires a waiting window now, with whatever it holds, as an
// operator decides; it runs at the stage's next turn.
func (e *Engine) FireWindow(graphStage, id string) error {
	if e.cfg.Shared && !e.scheduling.Load() {
		return ErrNotScheduling
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.stageNamed(graphStage)
	if !ok {
		return fmt.Errorf("no window stage %q; `plumb windows` lists them", graphStage)
	}
	wid, ok := parseWindowID(id)
	if !ok {
		return fmt.Errorf("window %q: want SITE/INDEX as `plumb windows` shows", id)
	}
	f, err := st.win.tracker.Force(wid, e.cfg.Now())
	if err != nil {
		return err
	}
	st.win.retry = append(st.win.retry, pendingWindow{f: f})
	e.poke()
	return nil
}

// WindowFilter picks windows for a listing: by stage (name or ID), site,
// state (waiting, fired, faulty) and time (a window overlapping From to
// To); Limit keeps the first that many (0: all). A year of hourly windows
// listed whole was 11.5 MB that the dashboard polled every 2 s.
type WindowFilter struct {
	Stage, Site, State string
	From, To           time.Time
	Limit              int
}

// Match reports whether a window passes the filter (all but Limit).
func (f WindowFilter) Match(w WindowView) bool {
	site, _, _ := strings.Cut(w.ID, "/")
	switch {
	case f.Site != "" && site != f.Site:
		return false
	case f.State != "" && w.State != f.State:
		return false
	case !f.From.IsZero() && !w.To.IsZero() && !w.To.After(f.From):
		return false
	case !f.To.IsZero() && !w.From.IsZero() && !w.From.Before(f.To):
		return false
	}
	return true
}

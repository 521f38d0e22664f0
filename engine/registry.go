// Package engine runs the merged pipeline graph: it schedules stage runs
// over worker slots in proportion to each stage's backlog, runs each
// program (built-in or executable, alone or chained by pipes) over a
// block, and publishes the outputs and the release of the input in one
// metadata transaction.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/plumb-dev/plumb/block"
)

// ErrMalformed marks input a program can never process (a corrupt block):
// the block is set aside as faulty at once instead of being retried.
var ErrMalformed = errors.New("malformed input")

// Builtin is a stage that runs in the server's process. Its lifecycle:
// the registry's New decodes its arguments strictly, fills defaults and
// validates them (fast, no I/O); then Run is called once per block, from
// many goroutines at once; it holds no metrics code (the runner measures).
type Builtin interface {
	// Run streams one block from in to out. Errors wrapping ErrMalformed
	// set the block aside.
	Run(ctx context.Context, in io.Reader, out io.Writer) error
}

type blockKey struct{}

// WithBlock tells a Builtin which input block it reads (for outputs that
// name their block, such as DNS records carrying the site and sequence
// number).
func WithBlock(ctx context.Context, name block.Name) context.Context {
	return context.WithValue(ctx, blockKey{}, name)
}

// BlockOf returns the input block a run reads, when the runner said.
func BlockOf(ctx context.Context) (block.Name, bool) {
	n, ok := ctx.Value(blockKey{}).(block.Name)
	return n, ok
}

// Splitter is a Builtin that writes several outputs, each chosen by its
// queue's name (flowhash writes QUEUE.h0 … QUEUE.h{N-1}).
type Splitter interface {
	Builtin
	// CheckOutputs says whether the stage's output queues fit; it runs
	// when the job is submitted.
	CheckOutputs(queues []string) error
	// Split streams one block from in to the outputs, keyed by queue.
	Split(ctx context.Context, in io.Reader, outs map[string]io.Writer) error
}

// Sequential is a Builtin whose runs over a site's blocks go one at a
// time in sequence order, each going on from the state the previous run
// left (see CarryOf), so what it makes does not depend on where the
// agent cut the capture. Blocks of different sites still run in
// parallel.
type Sequential interface {
	Builtin
	Sequential()
}

// Edged is a Sequential built-in whose runs split in two, so that one
// site's blocks still run in parallel: Start reads a block on its own,
// in any order and at the same time as its neighbours, and writes what
// the block completes alone; the Part it returns finishes in sequence
// order, from what the site's previous block left (its Carry), and
// writes the rows the block's edges complete. Run is Start and Finish
// at once.
type Edged interface {
	Sequential
	Start(ctx context.Context, in io.Reader, out io.Writer) (Part, error)
}

// Part is a block read apart from its neighbours, waiting for its turn.
type Part interface {
	// Finish writes the rows the block's edges complete, going on from
	// carry (nil: a block on its own, which lets go of everything at its
	// end), ends the output, and sets carry.Out.
	Finish(ctx context.Context, carry *Carry) error
	// Discard lets the part go unfinished.
	Discard()
}

// Carry is the state a Sequential built-in's run goes on from and
// leaves. Without one (CarryOf returns nil) the run is on its own: a
// block that came after its place in the sequence was passed, or a run
// outside a pipeline; it lets go of everything it holds at its end.
type Carry struct {
	In  []byte // the previous block's state; nil at a site's start
	Gap bool   // blocks were skipped before this one: let go of In first
	// Final: the site's capture ends with this block (an import's last
	// block): let go of everything held at its end.
	Final bool
	Out   []byte // set by the run: what the next block goes on from
}

type carryKey struct{}

// WithCarry gives a run's context its carry; a worker running a leased
// run of a sequential stage calls it, the engine does for its own runs.
func WithCarry(ctx context.Context, c *Carry) context.Context {
	return context.WithValue(ctx, carryKey{}, c)
}

// CarryOf returns the carry of a Sequential built-in's run, or nil.
func CarryOf(ctx context.Context) *Carry {
	c, _ := ctx.Value(carryKey{}).(*Carry)
	return c
}

// Drops counts, by reason, what a run let go of to stay within its
// bounds (a budget, a cap): the stage's stats and metrics add them up,
// so an operator sees what a bound cost. A nil *Drops counts nothing.
type Drops struct {
	mu sync.Mutex
	m  map[string]int64
}

// Add counts n more let go of for reason.
func (d *Drops) Add(reason string, n int64) {
	if d == nil || n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]int64{}
	}
	d.m[reason] += n
}

// Counts returns the counts so far, nil when none.
func (d *Drops) Counts() map[string]int64 {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.m)
}

// The reasons runs count drops under. Each is a metric label, so a
// worker's commit naming another is refused (CheckDrops).
const (
	DropEdgeBudget     = "edge_budget"     // frames a block's edge let go for the budget
	DropTCPEvicted     = "tcp_evicted"     // TCP streams let go for room
	DropTCPHoles       = "tcp_holes"       // holes in TCP streams given up on
	DropDefrag         = "defrag_dropped"  // datagrams never made whole
	DropPairingInexact = "pairing_inexact" // pairing decided past the budget
)

// CheckDrops refuses drop counts a worker sends that no run counts: an
// unknown reason, or a count below 0.
func CheckDrops(d map[string]int64) error {
	for reason, n := range d {
		switch reason {
		case DropEdgeBudget, DropTCPEvicted, DropTCPHoles, DropDefrag, DropPairingInexact:
		default:
			return fmt.Errorf("dropped: %q is not a reason runs count drops under", reason)
		}
		if n < 0 {
			return fmt.Errorf("dropped: %s is %d, below 0", reason, n)
		}
	}
	return nil
}

type dropsKey struct{}

// WithDrops gives a run's context what counts its drops; the engine does
// for its own runs, a worker for the runs it leases.
func WithDrops(ctx context.Context, d *Drops) context.Context {
	return context.WithValue(ctx, dropsKey{}, d)
}

// DropsOf returns what counts a run's drops, or nil.
func DropsOf(ctx context.Context) *Drops {
	d, _ := ctx.Value(dropsKey{}).(*Drops)
	return d
}

// A Tally counts what a run saw, for metrics exported once the run is
// committed, so a run retried or lost is counted once or not at all
// (builtin:dnsmetrics counts DNS messages by site, type and rcode). Its
// keys are the Tallier's to define and check.
type Tally struct{ Drops }

type tallyKey struct{}

// WithTally gives a run's context what counts what it saw.
func WithTally(ctx context.Context, t *Tally) context.Context {
	return context.WithValue(ctx, tallyKey{}, t)
}

// TallyOf returns what counts what a run saw, or nil.
func TallyOf(ctx context.Context) *Tally {
	t, _ := ctx.Value(tallyKey{}).(*Tally)
	return t
}

// A Tallier takes the tallies of committed runs (Config.Tallier).
type Tallier interface {
	// Check refuses a tally a worker sends that no run makes.
	Check(map[string]int64) error
	// Add counts a committed run's tally.
	Add(map[string]int64)
}

// Describer is a Builtin that says how it works, e.g. which xz encoder
// it drives; stats and metrics show it.
type Describer interface {
	Describe() string
}

// Factory makes a built-in from its arguments.
type Factory struct {
	Name string
	Doc  string
	New  func(args url.Values) (Builtin, error)
}

// Registry holds the built-in stages by name. It is a value built in main,
// not filled by init, so tests can make their own.
type Registry struct {
	byName map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byName: map[string]Factory{}} }

// Add registers a built-in; a second one of the same name panics, as that
// is a programming error.
func (r *Registry) Add(f Factory) {
	if _, ok := r.byName[f.Name]; ok {
		panic("engine: built-in " + f.Name + " registered twice")
	}
	r.byName[f.Name] = f
}

// New makes the named built-in with its arguments.
func (r *Registry) New(name string, args url.Values) (Builtin, error) {
	f, ok := r.byName[name]
	if !ok {
		return nil, fmt.Errorf("built-in %q is not known (known: %s)", name, strings.Join(r.Names(), ", "))
	}
	b, err := f.New(args)
	if err != nil {
		return nil, fmt.Errorf("builtin:%s: %w", name, err)
	}
	return b, nil
}

// Names lists the registered built-ins, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.byName))
	for n := range r.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Docs returns each built-in's documentation, sorted by name.
func (r *Registry) Docs() []Factory {
	out := make([]Factory, 0, len(r.byName))
	for _, n := range r.Names() {
		out = append(out, r.byName[n])
	}
	return out
}

// StrictArgs checks that args hold only the known keys, each once, so a
// misspelt argument is refused instead of ignored.
func StrictArgs(args url.Values, known ...string) error {
	for k, v := range args {
		ok := false
		for _, kn := range known {
			ok = ok || k == kn
		}
		if !ok {
			return fmt.Errorf("unknown argument %q (known: %s)", k, strings.Join(known, ", "))
		}
		if len(v) > 1 {
			return fmt.Errorf("argument %q given %d times", k, len(v))
		}
	}
	return nil
}

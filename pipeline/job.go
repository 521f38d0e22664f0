// Package pipeline holds users' jobs and the graph they merge into: the
// job YAML and its validation, the merge rules that run each shared stage
// once, and the graph's YAML and Graphviz renderings. It knows nothing of
// the server; the engine runs what it describes.
package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The abstractions a stage may run under.
const (
	Block  = "block"  // one run per block, any order, in parallel
	Window = "window" // one run per complete window of blocks
	Stream = "stream" // one long-running program fed blocks in order
)

// Where a new stage starts reading its inputs.
const (
	FromLatest   = "latest"   // only blocks that arrive after it
	FromEarliest = "earliest" // every block its inputs retain
)

// Job is one user's pipeline: a list of stages.
type Job struct {
	// Name names the job; its stages are JOB/STAGE.
	Name string `yaml:"job"`
	// Owner is the user the job belongs to; when users are on, the
	// authenticated submitter, whatever the file says.
	Owner string `yaml:"owner,omitempty"`
	// OwnerID is the authenticated owner's stable id, set by the server,
	// never read from a file: a user removed and added again under the
	// same name is someone else, and owns none of the earlier one's jobs.
	OwnerID string `yaml:"-"`
	// From says where the job's new stages start: FromLatest (default)
	// or FromEarliest.
	From string `yaml:"from,omitempty"`
	// Queues are source queues the job expects agents to ship into: the
	// job may be submitted before they hold a block.
	Queues []string `yaml:"queues,omitempty"`
	// Stages are the job's steps; a stage equal to another job's (same
	// inputs and program) is run once for both.
	Stages []*Stage `yaml:"stages"`
}

// Stage is one step of a job: inputs → program → outputs.
type Stage struct {
	// Name names the stage within its job.
	Name string `yaml:"name"`
	// Inputs are the queues the stage reads: one, or several whose
	// blocks of the same site and sequence number a run reads together.
	Inputs []string `yaml:"inputs"`
	// Outputs are the queues the stage writes, one file each per run;
	// none for a stage that writes nothing downstream.
	Outputs []string `yaml:"outputs"`
	// Program is what a run executes: builtin:NAME?ARGS, or an argv list
	// whose first word names a registered program (or, unconfined, a
	// path); a list of built-ins and programs is a chain.
	Program Program `yaml:"program"`
	// Abstraction is how the stage sees its input: block (default, one
	// block a run), window (complete windows, with window:) or stream
	// (a site's blocks in order, with stream:).
	Abstraction string `yaml:"abstraction"`
	// Timeout bounds one run; a run that passes it is killed and counts
	// as a failed attempt. Zero: no limit.
	Timeout Duration `yaml:"timeout,omitempty"`
	// Retention keeps the stage's outputs: a duration ("30d"), forever,
	// or by default until every stage reading them is done.
	Retention Retention `yaml:"retention,omitempty"`
	// Window is the window of a window stage.
	Window *WindowSpec `yaml:"window,omitempty"`
	// Stream is the gap policy of a stream stage.
	Stream *StreamSpec `yaml:"stream,omitempty"`
	// Network asks for the host's network in the stage's runs; a run has
	// none unless its program was registered with the network allowed.
	Network bool `yaml:"network,omitempty"`
	// Line is where the stage starts in its job file; Fields where each
	// of its fields does (program, inputs, window…), so that a problem
	// found later is reported at the field.
	Line   int                 `yaml:"-"`
	Fields map[string]Position `yaml:"-"`
}

// The bounds of a window's late_horizon: its blocks are held in memory.
const (
	MaxLateHorizonWindows = 10000
	MaxLateHorizon        = 31 * 24 * time.Hour
)

// Position is a line and column in a job file.
type Position struct{ Line, Column int }

// At returns where the stage's field starts, or the stage's own line.
func (s *Stage) At(field string) Position {
	if p, ok := s.Fields[field]; ok {
		return p
	}
	return Position{Line: s.Line, Column: 1}
}

// WindowSpec is the window of a window stage. It is validated now; window
// stages run once windowing lands.
type WindowSpec struct {
	Size  string `yaml:"size" json:"size"`                       // a duration ("24h") or a number of blocks
	Start string `yaml:"start,omitempty" json:"start,omitempty"` // RFC 3339 phase; with end, a one-off range; UTC midnight when empty
	End   string `yaml:"end,omitempty" json:"end,omitempty"`     // RFC 3339: with start, the one window from start to end
	// MaxWait fires a window this long after its end even if blocks are
	// missing (they are named in its header).
	MaxWait    Duration `yaml:"max_wait,omitempty" json:"max_wait,omitempty"`
	MaxMissing string   `yaml:"max_missing,omitempty" json:"max_missing,omitempty"` // a count or a percentage
	// IdleTimeout fires a window when no block of it came for this long.
	IdleTimeout Duration `yaml:"idle_timeout,omitempty" json:"idle_timeout,omitempty"`
	Ordering    string   `yaml:"ordering,omitempty" json:"ordering,omitempty"` // "any" (default) or "strict"
	// LateHorizon is how far back late blocks are still taken: a number
	// of windows, or a duration for time windows. Default: 2 windows, and
	// at least a day for time windows.
	LateHorizon string   `yaml:"late_horizon,omitempty" json:"late_horizon,omitempty"`
	Cutoff      string   `yaml:"cutoff,omitempty" json:"cutoff,omitempty"`             // "start" (default), "next" or "both"
	Late        string   `yaml:"late,omitempty" json:"late,omitempty"`                 // "report" (default) or "refire"
	PerInstance string   `yaml:"per_instance,omitempty" json:"per_instance,omitempty"` // "each" (default) or "all"
	Instances   []string `yaml:"instances,omitempty" json:"instances,omitempty"`       // only these sites
	// Empty says what a window with no block does: "skip" (default)
	// runs nothing, and a stretch of them is one record; "run" runs the
	// program on each, as on any window.
	Empty string `yaml:"empty,omitempty" json:"empty,omitempty"`
}

// StreamSpec is the gap policy of a stream stage.
type StreamSpec struct {
	// GapWait is how long the stream waits at a missing block (0: for
	// ever).
	GapWait Duration `yaml:"gap_wait,omitempty"`
	GapThen string   `yaml:"gap_then,omitempty"` // "skip" or "stop"
	// Replay keeps blocks behind the last checkpoint so the stage can go
	// back: a duration of event time ("2h") or a number of blocks.
	Replay string `yaml:"replay,omitempty"`
}

// ReplayLimits reads Replay: how many blocks, or how much event time,
// to keep behind a checkpoint.
func (s *StreamSpec) ReplayLimits() (blocks uint64, span time.Duration, err error) {
	if s == nil || s.Replay == "" {
		return 0, 0, nil
	}
	if n, err := strconv.ParseUint(s.Replay, 10, 32); err == nil {
		return n, 0, nil
	}
	d, err := ParseDuration(s.Replay)
	if err != nil {
		return 0, 0, fmt.Errorf("replay %q: want a duration of event time such as 2h, or a number of blocks", s.Replay)
	}
	return 0, time.Duration(d), nil
}

// Duration is a time.Duration that also reads days ("30d").
type Duration time.Duration

// Retention says how long an output queue keeps a block: until every
// subscriber is done with it (the default, empty), "forever", or a
// duration.
type Retention string

// Retention values besides durations.
const (
	UntilConsumed Retention = ""
	Forever       Retention = "forever"
)

// Problem is one thing wrong with a job file, at a line and column.
type Problem struct {
	File   string
	Line   int
	Column int
	Field  string // e.g. "stages[1].inputs"
	What   string
}

func (p Problem) String() string {
	pos := p.File
	if p.Line > 0 {
		pos = fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
	}
	if p.Field == "" {
		return pos + ": " + p.What
	}
	return pos + ": " + p.Field + ": " + p.What
}

// Problems is every problem found in a job; it is the error ParseJob and
// Merge return, so a user fixes them all in one go.
type Problems []Problem

func (ps Problems) Error() string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// ErrInvalidJob marks a job that was refused for what it says (as opposed
// to a failure to read it); every Problems error matches it.
var ErrInvalidJob = errors.New("invalid job")

// Is lets errors.Is(err, ErrInvalidJob) match.
func (ps Problems) Is(target error) bool { return target == ErrInvalidJob }

// ParseJob reads and validates one job file; file names it in problems.
// It checks everything that can be checked without the rest of the graph,
// and reports every problem at once. With problems it also returns the
// job as far as it could be read (nil when the file is not YAML), so a
// caller's later checks can report theirs in the same answer.
func ParseJob(file string, r io.Reader) (*Job, error) {
	src, err := io.ReadAll(io.LimitReader(r, maxJobBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read job %s: %w", file, err)
	}
	if len(src) > maxJobBytes {
		return nil, Problems{{File: file, What: fmt.Sprintf("job file is larger than %d bytes", maxJobBytes)}}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, Problems{yamlProblem(file, err)}
	}
	p := &parser{file: file}
	job := p.job(&doc)
	if len(p.problems) > 0 {
		return job, p.problems
	}
	return job, nil
}

// maxJobBytes bounds a job file: a real one is a few hundred bytes, and
// the file is stored with the job.
const maxJobBytes = 256 << 10

// ParseJobBytes is ParseJob over bytes.
func ParseJobBytes(file string, src []byte) (*Job, error) {
	return ParseJob(file, bytes.NewReader(src))
}

func yamlProblem(file string, err error) Problem {
	// yaml.v3 says "yaml: line N: what"; keep the line as a position.
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var line int
	if n, _ := fmt.Sscanf(msg, "line %d:", &line); n == 1 {
		msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
		return Problem{File: file, Line: line, Column: 1, What: msg}
	}
	return Problem{File: file, What: msg}
}

// Validate checks a job on its own (names, fields, programs); the graph
// checks come in Merge.
func (j *Job) Validate() error {
	p := &parser{file: "job " + j.Name}
	p.validate(j, nil)
	if len(p.problems) > 0 {
		return p.problems
	}
	return nil
}

// Marshal renders a job as YAML.
func (j *Job) Marshal() []byte {
	out, err := yaml.Marshal(j)
	if err != nil {
		panic(fmt.Sprintf("marshal job: %v", err)) // plain data never fails
	}
	return out
}

func sortedUnique(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

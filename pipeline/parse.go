package pipeline

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/plumb-dev/plumb/block"
)

// parser walks a job's YAML node tree, so that every problem carries its
// line and column and all of them are reported at once. (Decoding into
// structs would stop at the first and lose positions.)
type parser struct {
	file     string
	problems Problems
}

func (p *parser) add(n *yaml.Node, field, format string, args ...any) {
	pr := Problem{File: p.file, Field: field, What: fmt.Sprintf(format, args...)}
	if n != nil {
		n = within(n, field)
		pr.Line, pr.Column = n.Line, n.Column
	}
	p.problems = append(p.problems, pr)
}

// within finds, under a stage's mapping, the node of the field a problem
// names (`stage "c".window.size`), so that a check made on the whole
// stage reports the field's line and column; as deep as the path goes.
func within(n *yaml.Node, field string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return n
	}
	_, path, ok := strings.Cut(field, `".`)
	if !ok {
		if _, path, ok = strings.Cut(field, "]."); !ok {
			return n
		}
	}
	for _, key := range strings.Split(path, ".") {
		if n.Kind != yaml.MappingNode {
			break
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return n
}

// fields returns a mapping's values by key, reporting unknown and
// repeated keys.
func (p *parser) fields(n *yaml.Node, field string, known ...string) map[string]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		p.add(n, field, "want a mapping of %s", strings.Join(known, ", "))
		return nil
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		switch {
		case !contains(known, name):
			p.add(k, join(field, name), "unknown field (known: %s)", strings.Join(known, ", "))
		case out[name] != nil:
			p.add(k, join(field, name), "given twice")
		default:
			out[name] = v
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func join(parent, child string) string {
	if parent == "" {
		return child
	}
	return parent + "." + child
}

func (p *parser) str(n *yaml.Node, field string) string {
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.add(n, field, "want a string")
		return ""
	}
	return n.Value
}

func (p *parser) strings(n *yaml.Node, field string) []string {
	if n == nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!null" || n.Value == "None" {
			return nil
		}
		return []string{n.Value}
	}
	if n.Kind != yaml.SequenceNode {
		p.add(n, field, "want a list of queue names")
		return nil
	}
	var out []string
	for i, c := range n.Content {
		if s := p.str(c, fmt.Sprintf("%s[%d]", field, i)); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) boolean(n *yaml.Node, field string) bool {
	if n == nil {
		return false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.add(n, field, "want true or false")
	}
	return b
}

func (p *parser) duration(n *yaml.Node, field string) Duration {
	s := p.str(n, field)
	if s == "" {
		return 0
	}
	d, err := ParseDuration(s)
	if err != nil {
		p.add(n, field, "%v", err)
	}
	return d
}

// ParseDuration reads a Go duration, also accepting whole days ("30d").
func ParseDuration(s string) (Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("duration %q: want a number of days such as 30d, or a Go duration such as 90m", s)
		}
		return Duration(time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("duration %q: want a Go duration such as 90s, 5m or 24h, or days such as 30d", s)
	}
	return Duration(d), nil
}

func (d Duration) String() string {
	if d != 0 && time.Duration(d)%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", time.Duration(d)/(24*time.Hour))
	}
	return time.Duration(d).String()
}

// MarshalYAML writes the duration as it would be written by hand.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes the duration as text ("30m", "2d").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration written as text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want text such as \"30m\" or \"2d\"", b)
	}
	v, err := ParseDuration(s)
	*d = v
	return err
}

func (p *parser) job(doc *yaml.Node) *Job {
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.add(nil, "", "empty job file; a job needs `job: NAME` and `stages:`")
		return nil
	}
	f := p.fields(doc.Content[0], "", "job", "owner", "from", "queues", "stages")
	if f == nil {
		return nil
	}
	j := &Job{Name: p.str(f["job"], "job"), Owner: p.str(f["owner"], "owner"), From: p.str(f["from"], "from"), Queues: p.strings(f["queues"], "queues")}
	for _, q := range j.Queues {
		if err := block.ValidateQueue(q); err != nil {
			p.add(f["queues"], "queues", "%v", err)
		}
	}
	var nodes []*yaml.Node
	switch st := f["stages"]; {
	case st == nil:
		p.add(doc.Content[0], "stages", "missing; list at least one stage")
	case st.Kind != yaml.SequenceNode:
		p.add(st, "stages", "want a list of stages")
	default:
		for i, sn := range st.Content {
			field := fmt.Sprintf("stages[%d]", i)
			if name := peekName(sn); name != "" {
				field = fmt.Sprintf("stage %q", name)
			}
			sf := p.fields(sn, field, "name", "inputs", "outputs", "program", "abstraction", "timeout", "retention", "window", "stream", "network")
			if sf == nil {
				continue
			}
			name := p.str(sf["name"], field+".name")
			s := &Stage{
				Name:        name,
				Inputs:      p.strings(sf["inputs"], field+".inputs"),
				Outputs:     p.strings(sf["outputs"], field+".outputs"),
				Abstraction: p.str(sf["abstraction"], field+".abstraction"),
				Timeout:     p.duration(sf["timeout"], field+".timeout"),
				Network:     p.boolean(sf["network"], field+".network"),
				Line:        sn.Line,
				Fields:      map[string]Position{},
			}
			for k, v := range sf {
				if v != nil {
					s.Fields[k] = Position{v.Line, v.Column}
				}
			}
			if sf["program"] == nil {
				p.add(sn, field+".program", "missing; give builtin:NAME or a command as a list")
			} else {
				prog, err := parseProgramNode(sf["program"])
				if err != nil {
					p.add(sf["program"], field+".program", "%v", err)
				}
				s.Program = prog
			}
			if r := p.str(sf["retention"], field+".retention"); r != "" {
				s.Retention = Retention(r)
			}
			if w := sf["window"]; w != nil {
				s.Window = p.window(w, field+".window")
			}
			if sm := sf["stream"]; sm != nil {
				s.Stream = p.stream(sm, field+".stream")
			}
			j.Stages = append(j.Stages, s)
			nodes = append(nodes, sn)
		}
	}
	p.validate(j, nodes)
	return j
}

// peekName returns a stage mapping's name, so that problems found while
// reading its other fields can say which stage they are in.
func peekName(n *yaml.Node) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" && n.Content[i+1].Kind == yaml.ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}

func (p *parser) window(n *yaml.Node, field string) *WindowSpec {
	f := p.fields(n, field, "size", "start", "end", "max_wait", "max_missing", "idle_timeout", "ordering", "cutoff", "late", "late_horizon", "per_instance", "instances", "empty")
	if f == nil {
		return nil
	}
	return &WindowSpec{
		Size:        p.str(f["size"], field+".size"),
		Start:       p.str(f["start"], field+".start"),
		End:         p.str(f["end"], field+".end"),
		MaxWait:     p.duration(f["max_wait"], field+".max_wait"),
		MaxMissing:  p.str(f["max_missing"], field+".max_missing"),
		IdleTimeout: p.duration(f["idle_timeout"], field+".idle_timeout"),
		Ordering:    p.str(f["ordering"], field+".ordering"),
		LateHorizon: p.str(f["late_horizon"], field+".late_horizon"),
		Cutoff:      p.str(f["cutoff"], field+".cutoff"),
		Late:        p.str(f["late"], field+".late"),
		PerInstance: p.str(f["per_instance"], field+".per_instance"),
		Instances:   p.strings(f["instances"], field+".instances"),
		Empty:       p.str(f["empty"], field+".empty"),
	}
}

func (p *parser) stream(n *yaml.Node, field string) *StreamSpec {
	f := p.fields(n, field, "gap_wait", "gap_then", "replay")
	if f == nil {
		return nil
	}
	s := &StreamSpec{GapWait: p.duration(f["gap_wait"], field+".gap_wait"), GapThen: p.str(f["gap_then"], field+".gap_then"),
		Replay: p.str(f["replay"], field+".replay")}
	if _, _, err := s.ReplayLimits(); err != nil {
		p.add(f["replay"], field+".replay", "%v", err)
	}
	return s
}

// validate checks a job on its own. nodes, when given, hold each stage's
// node for positions.
func (p *parser) validate(j *Job, nodes []*yaml.Node) {
	if j == nil {
		return
	}
	at := func(i int) *yaml.Node {
		if i < len(nodes) {
			return nodes[i]
		}
		return nil
	}
	if j.Name == "" {
		p.add(nil, "job", "missing; name the job (letters, digits, '_' and '-')")
	} else if err := block.ValidateGroup(j.Name); err != nil {
		p.add(nil, "job", "%q is not a valid job name: use letters, digits, '_' and '-'", j.Name)
	}
	switch j.From {
	case "", FromLatest, FromEarliest:
	default:
		p.add(nil, "from", "%q: want %q or %q", j.From, FromLatest, FromEarliest)
	}
	if len(j.Stages) == 0 && len(p.problems) == 0 {
		p.add(nil, "stages", "no stages; list at least one")
	}
	names := map[string]int{}
	produced := map[string]string{}
	for i, s := range j.Stages {
		field := fmt.Sprintf("stages[%d]", i)
		if s.Name != "" {
			field = fmt.Sprintf("stage %q", s.Name)
		}
		n := at(i)
		switch {
		case s.Name == "":
			p.add(n, field+".name", "missing; name every stage")
		case block.ValidateGroup(s.Name) != nil:
			p.add(n, field+".name", "%q is not a valid stage name: use letters, digits, '_' and '-'", s.Name)
		case names[s.Name] > 0:
			p.add(n, field+".name", "the job already has a stage named %q (line %d)", s.Name, names[s.Name])
		default:
			names[s.Name] = max(s.Line, 1)
		}
		if len(s.Inputs) == 0 {
			p.add(n, field+".inputs", "missing; a stage reads at least one queue")
		}
		for _, q := range append(append([]string(nil), s.Inputs...), s.Outputs...) {
			if err := block.ValidateQueue(q); err != nil {
				p.add(n, field, "queue %q is not a valid queue name: %v", q, err)
			}
		}
		if len(sortedUnique(s.Inputs)) != len(s.Inputs) || len(sortedUnique(s.Outputs)) != len(s.Outputs) {
			p.add(n, field, "a queue is listed twice among its inputs or outputs")
		}
		for _, q := range s.Outputs {
			if contains(s.Inputs, q) {
				p.add(n, field+".outputs", "queue %q is both an input and an output of the stage", q)
			}
			if other, ok := produced[q]; ok {
				p.add(n, field+".outputs", "queue %q is also produced by stage %q of this job; a queue has one producer", q, other)
			}
			produced[q] = s.Name
		}
		if s.Abstraction == "" {
			s.Abstraction = Block
		}
		switch s.Abstraction {
		case Block:
			if s.Window != nil || s.Stream != nil {
				p.add(n, field, "window: and stream: belong to stages with abstraction window or stream")
			}
		case Window:
			if s.Window == nil {
				p.add(n, field+".window", "missing; a window stage needs at least window.size")
			} else {
				p.checkWindow(n, field+".window", s.Window)
			}
		case Stream:
			if s.Stream != nil {
				switch s.Stream.GapThen {
				case "", "skip", "stop":
				default:
					p.add(n, field+".stream.gap_then", "%q: want skip or stop", s.Stream.GapThen)
				}
			}
		default:
			p.add(n, field+".abstraction", "%q: want block, window or stream", s.Abstraction)
		}
		if _, err := s.Retention.Limits(); err != nil {
			p.add(n, field+".retention", "%v; or leave it out to keep blocks until every subscriber is done", err)
		}
		if len(s.Outputs) == 0 && s.Retention != UntilConsumed {
			p.add(n, field+".retention", "the stage has no outputs to retain")
		}
		if err := s.Program.check(len(s.Inputs), len(s.Outputs)); err != nil && len(s.Program.Steps) > 0 {
			p.add(n, field+".program", "%v", err)
		}
	}
}

func (p *parser) checkWindow(n *yaml.Node, field string, w *WindowSpec) {
	if w.Size == "" {
		p.add(n, field+".size", "missing; a duration such as 24h or a number of blocks")
	} else if _, err := strconv.ParseUint(w.Size, 10, 32); err != nil {
		if d, err := ParseDuration(w.Size); err != nil || d == 0 {
			p.add(n, field+".size", "%q: want a duration such as 24h or a number of blocks", w.Size)
		}
	}
	for _, t := range []struct{ name, v string }{{"start", w.Start}, {"end", w.End}} {
		if t.v != "" {
			if _, err := time.Parse(time.RFC3339, t.v); err != nil {
				p.add(n, field+"."+t.name, "%q: want an RFC 3339 time such as 2025-05-05T00:00:00Z", t.v)
			}
		}
	}
	if m := w.MaxMissing; m != "" {
		num := strings.TrimSuffix(m, "%")
		if v, err := strconv.ParseFloat(num, 64); err != nil || v < 0 || strings.HasSuffix(m, "%") && v > 100 {
			p.add(n, field+".max_missing", "%q: want a number of blocks or a percentage such as 1%%", m)
		}
	}
	for _, c := range []struct{ name, v, want string }{
		{"ordering", w.Ordering, "any strict"}, {"cutoff", w.Cutoff, "start next both"},
		{"late", w.Late, "report refire"}, {"per_instance", w.PerInstance, "each all"}, {"empty", w.Empty, "skip run"},
	} {
		if c.v != "" && !slices.Contains(strings.Fields(c.want), c.v) {
			p.add(n, field+"."+c.name, "%q: want %s", c.v, strings.ReplaceAll(c.want, " ", " or "))
		}
	}
	if h := w.LateHorizon; h != "" {
		// Bounded: the horizon's blocks are held in memory, so a job
		// cannot make its window stage hold the whole history.
		if count, err := strconv.ParseUint(h, 10, 31); err == nil && count > 0 {
			if count > MaxLateHorizonWindows {
				p.add(n, field+".late_horizon", "%q: at most %d windows", h, MaxLateHorizonWindows)
			}
		} else if d, err := ParseDuration(h); err != nil || d <= 0 {
			p.add(n, field+".late_horizon", "%q: want a number of windows (2) or a duration (48h)", h)
		} else if time.Duration(d) > MaxLateHorizon {
			p.add(n, field+".late_horizon", "%q: at most %s", h, Duration(MaxLateHorizon))
		}
	}
	if w.End != "" && w.Start == "" {
		p.add(n, field+".end", "a range needs its start too")
	}
	for _, i := range w.Instances {
		if block.ValidateInstance(i) != nil {
			p.add(n, field+".instances", "%q is not a valid instance name", i)
		}
	}
}

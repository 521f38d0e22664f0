package pipeline

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Program is what a stage runs: one step, or a chain of steps connected by
// pipes with no block stored between them.
type Program struct {
	Steps []Step
}

// Step is one built-in stage or one executable.
type Step struct {
	Builtin string     // the built-in's name, or "" for an executable
	Args    url.Values // a built-in's arguments
	Argv    []string   // an executable and its arguments
}

// BuiltinPrefix starts a built-in program's name.
const BuiltinPrefix = "builtin:"

// ParseStep reads "builtin:NAME?k=v&..." or a command line split on
// spaces.
func ParseStep(s string) (Step, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, BuiltinPrefix); ok {
		name, query, _ := strings.Cut(rest, "?")
		if name == "" {
			return Step{}, fmt.Errorf("%q names no built-in; write builtin:NAME", s)
		}
		args, err := url.ParseQuery(query)
		if err != nil {
			return Step{}, fmt.Errorf("%q: arguments: %v; write builtin:NAME?key=value&key=value", s, err)
		}
		return Step{Builtin: name, Args: args}, nil
	}
	argv := strings.Fields(s)
	if len(argv) == 0 {
		return Step{}, errors.New("empty program")
	}
	return Step{Argv: argv}, nil
}

// parseProgramNode reads a program: a string (one step), a list of strings
// (an argv, or a chain when any element is a built-in), or a list whose
// elements are strings and lists (a chain of steps).
func parseProgramNode(n *yaml.Node) (Program, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		st, err := ParseStep(n.Value)
		return Program{Steps: []Step{st}}, err
	case yaml.SequenceNode:
	default:
		return Program{}, errors.New("want builtin:NAME, a command, or a list")
	}
	if len(n.Content) == 0 {
		return Program{}, errors.New("empty program")
	}
	chain := false
	for _, c := range n.Content {
		if c.Kind == yaml.SequenceNode || c.Kind == yaml.ScalarNode && strings.HasPrefix(strings.TrimSpace(c.Value), BuiltinPrefix) {
			chain = true
		}
	}
	if !chain {
		var argv []string
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return Program{}, errors.New("an argv list holds strings")
			}
			argv = append(argv, c.Value)
		}
		return Program{Steps: []Step{{Argv: argv}}}, nil
	}
	var p Program
	for i, c := range n.Content {
		switch c.Kind {
		case yaml.ScalarNode:
			st, err := ParseStep(c.Value)
			if err != nil {
				return Program{}, fmt.Errorf("step %d: %v", i+1, err)
			}
			p.Steps = append(p.Steps, st)
		case yaml.SequenceNode:
			var argv []string
			for _, a := range c.Content {
				if a.Kind != yaml.ScalarNode {
					return Program{}, fmt.Errorf("step %d: an argv list holds strings", i+1)
				}
				argv = append(argv, a.Value)
			}
			if len(argv) == 0 {
				return Program{}, fmt.Errorf("step %d: empty command", i+1)
			}
			p.Steps = append(p.Steps, Step{Argv: argv})
		default:
			return Program{}, fmt.Errorf("step %d: want builtin:NAME, a command, or an argv list", i+1)
		}
	}
	return p, nil
}

// check validates the program's shape against the stage's queues.
func (p Program) check(inputs, outputs int) error {
	if len(p.Steps) > 1 && (inputs > 1 || outputs > 1) {
		return errors.New("a chain of steps reads one input and writes at most one output")
	}
	for _, st := range p.Steps {
		if st.Builtin != "" && inputs > 1 {
			return fmt.Errorf("builtin:%s reads one input; use an executable for several", st.Builtin)
		}
	}
	return nil
}

// String is the program's canonical text: steps joined by " | ", built-in
// arguments sorted, so that equal programs have equal text.
func (p Program) String() string {
	parts := make([]string, len(p.Steps))
	for i, st := range p.Steps {
		parts[i] = st.String()
	}
	return strings.Join(parts, " | ")
}

func (st Step) String() string {
	if st.Builtin != "" {
		s := BuiltinPrefix + st.Builtin
		if len(st.Args) > 0 {
			s += "?" + st.Args.Encode() // Encode sorts by key
		}
		return s
	}
	q := make([]string, len(st.Argv))
	for i, a := range st.Argv {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " \t\"'|\\") {
			q[i] = strconv.Quote(a)
		}
	}
	return strings.Join(q, " ")
}

// MarshalYAML writes the program in the form a job file would use.
func (p Program) MarshalYAML() (any, error) {
	step := func(st Step) any {
		if st.Builtin != "" {
			return st.String()
		}
		return st.Argv
	}
	if len(p.Steps) == 1 {
		return step(p.Steps[0]), nil
	}
	out := make([]any, len(p.Steps))
	for i, st := range p.Steps {
		out[i] = step(st)
	}
	return out, nil
}

// UnmarshalYAML reads the forms MarshalYAML writes.
func (p *Program) UnmarshalYAML(n *yaml.Node) error {
	prog, err := parseProgramNode(n)
	*p = prog
	return err
}

// Builtins returns the names of the built-ins the program uses, sorted.
func (p Program) Builtins() []string {
	var out []string
	for _, st := range p.Steps {
		if st.Builtin != "" {
			out = append(out, st.Builtin)
		}
	}
	sort.Strings(out)
	return out
}

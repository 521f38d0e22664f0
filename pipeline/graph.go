package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Graph is every accepted job merged: one node per distinct stage.
type Graph struct {
	Stages []*Node `yaml:"stages"`
}

// Node is one stage of the merged graph, run once for all its owners.
type Node struct {
	// Name is the first owner's JOB/STAGE; it is how people refer to it.
	Name string `yaml:"name"`
	// Key identifies the node across merges and restarts: its input and
	// output sets (and, for a stage without outputs, its program).
	Key         string      `yaml:"-"`
	Inputs      []string    `yaml:"inputs"`
	Outputs     []string    `yaml:"outputs,omitempty"`
	Program     Program     `yaml:"program"`
	Abstraction string      `yaml:"abstraction"`
	Timeout     Duration    `yaml:"timeout,omitempty"`
	Retention   Retention   `yaml:"retention,omitempty"`
	Window      *WindowSpec `yaml:"window,omitempty"`
	Stream      *StreamSpec `yaml:"stream,omitempty"`
	Network     bool        `yaml:"network,omitempty"`
	From        string      `yaml:"from"`
	Owners      []Owner     `yaml:"owners"`
	Merged      bool        `yaml:"merged,omitempty"` // more than one job owns it
}

// Owner is one job's stage that a node stands for.
type Owner struct {
	Job   string `yaml:"job"`
	Stage string `yaml:"stage"`
	User  string `yaml:"user,omitempty"`
}

// ID is a short name for the node made of letters, digits and '-', fit
// for consumer group names and file names; it follows from Key.
func (n *Node) ID() string {
	sum := sha256.Sum256([]byte(n.Key))
	return "stage-" + hex.EncodeToString(sum[:6])
}

// Warning is advice for a job that was accepted.
type Warning struct {
	Job  string `json:"job"`
	What string `json:"what"`
}

// Options change how jobs merge.
type Options struct {
	// NoDedup keeps every job's stages apart: the queues a job derives
	// are renamed JOB.QUEUE so nothing is shared. For measuring what
	// merging saves.
	NoDedup bool
	// Exists reports whether a queue that no stage produces is known
	// (it holds blocks, or is a declared source). Nil accepts any.
	Exists func(queue string) bool
}

// Merge merges jobs in the order they were accepted: a stage whose input
// and output sets equal an earlier one's becomes another owner of it. It
// checks the whole graph (one producer per queue, inputs that exist, no
// cycles) and returns every problem at once, each naming the stages
// involved. Warnings go to the later job when programs differ.
func Merge(jobs []*Job, opts Options) (*Graph, []Warning, error) {
	g := &Graph{}
	var (
		problems Problems
		warnings []Warning
		byKey    = map[string]*Node{}
		producer = map[string]*Node{}
	)
	for _, j := range jobs {
		file := "job " + j.Name
		rename := func(q string) string { return q }
		if opts.NoDedup {
			mine := map[string]bool{}
			for _, s := range j.Stages {
				for _, q := range s.Outputs {
					mine[q] = true
				}
			}
			rename = func(q string) string {
				if mine[q] {
					return j.Name + "." + q
				}
				return q
			}
		}
		for _, s := range j.Stages {
			in, out := renameAll(s.Inputs, rename), renameAll(s.Outputs, rename)
			key := "in=" + strings.Join(in, ",") + " out=" + strings.Join(out, ",")
			if len(out) == 0 {
				key += " program=" + s.Program.String()
			}
			if opts.NoDedup {
				key = "job=" + j.Name + " " + key
			}
			owner := Owner{Job: j.Name, Stage: s.Name, User: j.Owner}
			if n := byKey[key]; n != nil {
				if why := differs(n, s); why != "" {
					problems = append(problems, Problem{File: file, Line: s.Line, Column: 1, Field: fmt.Sprintf("stage %q", s.Name),
						What: fmt.Sprintf("it has the inputs and outputs of stage %s but a different %s; it cannot share that stage: rename its outputs", n.Name, why)})
					continue
				}
				if n.Program.String() != s.Program.String() {
					warnings = append(warnings, Warning{Job: j.Name, What: fmt.Sprintf(
						"stage %q merged with stage %s, which runs %q; your program %q will not run (rename your outputs to run your own)",
						s.Name, n.Name, n.Program, s.Program)})
				}
				n.Owners = append(n.Owners, owner)
				n.Merged = ownerJobs(n.Owners) > 1
				continue
			}
			n := &Node{
				Name: j.Name + "/" + s.Name, Key: key, Inputs: in, Outputs: out, Program: s.Program,
				Abstraction: s.Abstraction, Timeout: s.Timeout, Retention: s.Retention, Network: s.Network,
				Window: s.Window, Stream: s.Stream, From: j.From, Owners: []Owner{owner},
			}
			if n.From == "" {
				n.From = FromLatest
			}
			clash := false
			for _, q := range out {
				if other := producer[q]; other != nil {
					clash = true
					problems = append(problems, Problem{File: file, Line: s.Line, Column: 1, Field: fmt.Sprintf("stage %q", s.Name),
						What: fmt.Sprintf("queue %s is already produced by stage %s (inputs %s); a queue has one producer: rename this stage's output, or make its inputs and outputs equal to share that stage",
							q, other.Name, strings.Join(other.Inputs, ","))})
				}
			}
			if clash {
				continue
			}
			for _, q := range out {
				producer[q] = n
			}
			byKey[key] = n
			g.Stages = append(g.Stages, n)
		}
	}
	declared := map[string]bool{}
	for _, j := range jobs {
		for _, q := range j.Queues {
			declared[q] = true
		}
	}
	for _, n := range g.Stages {
		for _, q := range n.Inputs {
			if producer[q] == nil && !declared[q] && opts.Exists != nil && !opts.Exists(q) {
				o := n.Owners[0]
				problems = append(problems, Problem{File: "job " + o.Job, Field: fmt.Sprintf("stage %q", o.Stage),
					What: fmt.Sprintf("input queue %s holds no blocks and no stage produces it; declare it under the job's `queues:` if agents will ship into it, import into it first, or add the stage that makes it", q)})
			}
		}
	}
	if c := g.cycle(producer); c != "" {
		problems = append(problems, Problem{File: "graph", What: "cycle: " + c + "; a stage may not read, directly or through others, what it writes"})
	}
	if len(problems) > 0 {
		return nil, warnings, problems
	}
	return g, warnings, nil
}

func renameAll(qs []string, rename func(string) string) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = rename(q)
	}
	return sortedUnique(out)
}

func ownerJobs(os []Owner) int {
	jobs := map[string]bool{}
	for _, o := range os {
		jobs[o.Job] = true
	}
	return len(jobs)
}

// differs names what keeps a stage from merging with node n.
func differs(n *Node, s *Stage) string {
	switch {
	case n.Abstraction != s.Abstraction:
		return fmt.Sprintf("abstraction (%s, not %s)", s.Abstraction, n.Abstraction)
	case !reflect.DeepEqual(n.Window, s.Window):
		return "window spec"
	case !reflect.DeepEqual(n.Stream, s.Stream):
		return "stream spec"
	}
	return ""
}

// cycle returns a cycle of the graph as "stage a → q → stage b → ...", or
// "" when there is none.
func (g *Graph) cycle(producer map[string]*Node) string {
	const (
		unseen = iota
		onPath
		finished
	)
	mark := map[*Node]int{}
	var path []string
	var visit func(n *Node) string
	visit = func(n *Node) string {
		mark[n] = onPath
		path = append(path, "stage "+n.Name)
		for _, q := range n.Inputs {
			p := producer[q]
			if p == nil {
				continue
			}
			path = append(path, q)
			switch mark[p] {
			case onPath:
				start := slices.Index(path, "stage "+p.Name)
				c := append(slices.Clone(path[start:]), "stage "+p.Name)
				slices.Reverse(c) // data flows from producer to reader
				return strings.Join(c, " → ")
			case unseen:
				if c := visit(p); c != "" {
					return c
				}
			}
			path = path[:len(path)-1]
		}
		path = path[:len(path)-1]
		mark[n] = finished
		return ""
	}
	for _, n := range g.Stages {
		if mark[n] == unseen {
			if c := visit(n); c != "" {
				return c
			}
		}
	}
	return ""
}

// Node returns the node with the given name or ID, or nil.
func (g *Graph) Node(nameOrID string) *Node {
	for _, n := range g.Stages {
		if n.Name == nameOrID || n.ID() == nameOrID {
			return n
		}
	}
	return nil
}

// Readers returns the nodes that read a queue.
func (g *Graph) Readers(queue string) []*Node {
	var out []*Node
	for _, n := range g.Stages {
		if slices.Contains(n.Inputs, queue) {
			out = append(out, n)
		}
	}
	return out
}

package pipeline

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// YAML renders the merged graph: every stage with its owners, and whether
// it was merged.
func (g *Graph) YAML() []byte {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(g); err != nil {
		panic(fmt.Sprintf("render graph: %v", err)) // plain data never fails
	}
	enc.Close()
	return b.Bytes()
}

// Queues returns every queue the graph names, sorted.
func (g *Graph) Queues() []string {
	seen := map[string]bool{}
	for _, n := range g.Stages {
		for _, q := range append(append([]string(nil), n.Inputs...), n.Outputs...) {
			seen[q] = true
		}
	}
	out := make([]string, 0, len(seen))
	for q := range seen {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// Annotation is live detail drawn on a stage of the DOT rendering.
type Annotation struct {
	Backlog int64
	Workers int
	Faulty  int64
}

// DOT renders the graph for Graphviz: queues as ovals, stages as boxes
// labelled with their program and owners, merged stages drawn double.
// notes, when given, adds backlog, workers and faulty counts per node ID.
func (g *Graph) DOT(notes map[string]Annotation) []byte {
	var b bytes.Buffer
	b.WriteString("digraph plumb {\n  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=10];\n")
	produced := map[string]bool{}
	for _, n := range g.Stages {
		for _, q := range n.Outputs {
			produced[q] = true
		}
	}
	for _, q := range g.Queues() {
		style := ""
		if !produced[q] {
			style = ", style=filled, fillcolor=\"#e8f0fe\"" // a source queue
		}
		fmt.Fprintf(&b, "  %s [shape=ellipse, label=%s%s];\n", dotID("q:"+q), dotString(q), style)
	}
	for _, n := range g.Stages {
		var owners []string
		for _, o := range n.Owners {
			owners = append(owners, o.Job+"/"+o.Stage)
		}
		label := n.Name + "\n" + n.Program.String()
		if n.Merged {
			label += fmt.Sprintf("\nmerged: %d owners", len(n.Owners))
		}
		attrs := ""
		if a, ok := notes[n.ID()]; ok {
			label += fmt.Sprintf("\nbacklog %d · workers %d", a.Backlog, a.Workers)
			if a.Faulty > 0 {
				label += fmt.Sprintf("\nfaulty %d", a.Faulty)
				attrs += ", color=red, fontcolor=red"
			}
		}
		if n.Merged {
			attrs += ", peripheries=2"
		}
		fmt.Fprintf(&b, "  %s [shape=box, label=%s, tooltip=%s%s];\n",
			dotID("s:"+n.Key), dotString(label), dotString("owners: "+strings.Join(owners, ", ")), attrs)
		for _, q := range n.Inputs {
			fmt.Fprintf(&b, "  %s -> %s;\n", dotID("q:"+q), dotID("s:"+n.Key))
		}
		for _, q := range n.Outputs {
			fmt.Fprintf(&b, "  %s -> %s;\n", dotID("s:"+n.Key), dotID("q:"+q))
		}
	}
	b.WriteString("}\n")
	return b.Bytes()
}

func dotString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func dotID(s string) string { return dotString(s) }

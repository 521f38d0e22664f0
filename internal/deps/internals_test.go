package deps_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite docs/internals.md's table of packages")

// The generated part of docs/internals.md lies between these lines.
const (
	tableStart = "<!-- packages: generated from each package's doc comment and the rules of internal/deps; go test ./internal/deps -run TestInternalsTable -update -->"
	tableEnd   = "<!-- end of packages -->"
)

// TestInternalsTable: docs/internals.md's table of packages is each
// package's own doc comment (its first sentence) and what the rules say it
// never links, so the page cannot say one thing while the code does
// another. The benchmarks, one command each, are one row the page keeps.
func TestInternalsTable(t *testing.T) {
	out, err := exec.Command(testenv.Tool(t, "go"), "list", "-f", "{{.ImportPath}}\t{{.Doc}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var b strings.Builder
	b.WriteString(tableStart + "\n\n\"The server side\" is " + strings.Join(quoted(serverSide), ", ") + ": the packages only `plumb serve` needs.\n\n| package | what it is | never links |\n|---|---|---|\n")
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		pkg, doc, _ := strings.Cut(strings.TrimSpace(line), "\t")
		pkg = strings.TrimPrefix(pkg, module)
		if pkg == "bench" || strings.HasPrefix(pkg, "bench/") {
			continue
		}
		if doc == "" {
			t.Errorf("package %s has no doc comment: say in one sentence what it is for", pkg)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", pkg, cell(synopsis(doc)), cell(neverOf(pkg)))
	}
	b.WriteString("\n" + tableEnd)
	raw, err := os.ReadFile("../../docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	i, j := strings.Index(page, tableStart), strings.Index(page, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/internals.md has no lines %q … %q around its table of packages", tableStart, tableEnd)
	}
	testenv.CheckGenerated(t, "../../docs/internals.md", page[:i]+b.String()+page[j+len(tableEnd):], *update, "go test ./internal/deps -run TestInternalsTable -update")
}

// synopsis is a package's doc without its "Package x" or "Command x"
// opening: what the package is, as the table's cell reads it.
func synopsis(doc string) string {
	for _, lead := range []string{"Package ", "Command "} {
		if rest, ok := strings.CutPrefix(doc, lead); ok {
			if _, after, ok := strings.Cut(rest, " "); ok {
				return after
			}
		}
	}
	return doc
}

// neverOf lists what the rules forbid pkg to link, in the rules' order.
func neverOf(pkg string) string {
	var never []string
	for _, r := range rules {
		if !matches(r.pkgs, pkg) {
			continue
		}
		for _, n := range r.never {
			if !slices.Contains(never, n) {
				never = append(never, n)
			}
		}
	}
	var cells []string
	if !slices.ContainsFunc(serverSide, func(p string) bool { return !slices.Contains(never, p) }) {
		cells = append(cells, "the server side")
		never = slices.DeleteFunc(never, func(n string) bool { return slices.Contains(serverSide, n) })
	}
	for _, n := range never {
		cells = append(cells, "`"+strings.TrimSuffix(n, "/")+"`")
	}
	return strings.Join(cells, ", ")
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return out
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

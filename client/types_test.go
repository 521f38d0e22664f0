package client_test

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/tabwriter"
)

var update = flag.Bool("update", false, "rewrite client/types.go from package flight")

// TestTypesDocumented: the client's types are the protocol's (aliases of
// package flight's), and go doc shows an alias without its fields. So
// each alias's comment lists its fields, made from flight's declaration
// here: this test fails when client/types.go differs from what flight
// says now (go test ./client -run TestTypesDocumented -update rewrites
// it), and go doc of the client package shows the fields.
func TestTypesDocumented(t *testing.T) {
	structs := flightStructs(t)
	raw, err := os.ReadFile("types.go")
	if err != nil {
		t.Fatal(err)
	}
	want := typesFile(t, raw, structs)
	if *update {
		if err := os.WriteFile("types.go", want, 0o644); err != nil {
			t.Fatal(err)
		}
		raw = want
	}
	if !bytes.Equal(raw, want) {
		t.Fatal("client/types.go does not list the fields package flight declares now; run go test ./client -run TestTypesDocumented -update")
	}
	out, err := exec.Command("go", "doc", ".", "Block").CombinedOutput()
	if err != nil {
		t.Fatalf("go doc: %v\n%s", err, out)
	}
	for _, field := range []string{"SHA256", "KernelDropped", "Serial"} {
		if !regexp.MustCompile(`(?m)^\s+` + field + `\s`).Match(out) {
			t.Errorf("go doc client.Block does not show the field %s:\n%s", field, out)
		}
	}
}

// flightStructs are package flight's struct types by name: each field as
// a line, "Name Type // comment".
func flightStructs(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("../flight/*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			var lines []string
			for _, fl := range st.Fields.List {
				var names []string
				for _, n := range fl.Names {
					names = append(names, n.Name)
				}
				if len(names) == 0 || !ast.IsExported(names[0]) {
					continue
				}
				line := strings.Join(names, ", ") + "\t" + types.ExprString(fl.Type)
				var words []string
				for _, g := range []*ast.CommentGroup{fl.Doc, fl.Comment} {
					if g != nil {
						words = append(words, strings.Fields(g.Text())...)
					}
				}
				if len(words) > 0 {
					line += "\t// " + strings.Join(words, " ")
				}
				lines = append(lines, line)
			}
			out[ts.Name.Name] = lines
			return false
		})
	}
	return out
}

var aliasRE = regexp.MustCompile(`^\t(\w+) = flight\.(\w+)$`)

// typesFile is types.go with each alias's comment ending in its fields:
// the comment's own lines up to a "Fields:" line, then the fields.
func typesFile(t *testing.T, raw []byte, structs map[string][]string) []byte {
	t.Helper()
	lines := strings.Split(string(raw), "\n")
	var out []string
	for _, line := range lines {
		m := aliasRE.FindStringSubmatch(line)
		if m == nil {
			out = append(out, line)
			continue
		}
		// Drop a field listing made before, back to the comment's text.
		i := len(out) - 1
		for i >= 0 && strings.HasPrefix(out[i], "\t//") && !strings.HasPrefix(out[i], "\t// Fields:") {
			i--
		}
		if i >= 0 && strings.HasPrefix(out[i], "\t// Fields:") {
			out = out[:i]
			if n := len(out); n > 0 && out[n-1] == "\t//" {
				out = out[:n-1]
			}
		}
		fields, ok := structs[m[2]]
		if !ok {
			t.Fatalf("types.go: %s aliases flight.%s, which is not a struct of package flight", m[1], m[2])
		}
		var b bytes.Buffer
		tw := tabwriter.NewWriter(&b, 0, 4, 1, ' ', 0)
		for _, f := range fields {
			fmt.Fprintln(tw, f)
		}
		tw.Flush()
		out = append(out, "\t//", "\t// Fields:", "\t//")
		for _, f := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
			out = append(out, "\t//\t"+strings.TrimRight(f, " "))
		}
		out = append(out, line)
	}
	return []byte(strings.Join(out, "\n"))
}

package flight_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/flight"
)

// TestActionsNamedOnce: outside this package's table, no Go file of the
// module spells an action's name where an action is made or called
// (flight.Action{Name: ...}, aflight.Action{Type: ...}), so client,
// server, worker and CLI call what the table names and nothing else.
// Tests may: they send the wire's own bytes, wrong names too.
func TestActionsNamedOnce(t *testing.T) {
	if len(flight.Actions) == 0 {
		t.Fatal("no actions")
	}
	seen := map[string]bool{}
	for i, a := range flight.Actions {
		if a.Name == "" || a.Doc == "" {
			t.Errorf("action %d has no name or doc: %+v", i, a)
		}
		if seen[a.Name] {
			t.Errorf("action %s is listed twice", a.Name)
		}
		seen[a.Name] = true
		if got, ok := flight.ActionNamed(a.Name); !ok || got != a {
			t.Errorf("ActionNamed(%q) = %+v, %v", a.Name, got, ok)
		}
	}
	if _, ok := flight.ActionNamed("frobnicate"); ok {
		t.Error("ActionNamed found an action that is not there")
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Clean(path) == filepath.Join("..", "flight", "actions.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Action" {
				return true
			}
			for _, e := range lit.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				if s, ok := kv.Value.(*ast.BasicLit); ok && s.Kind == token.STRING {
					name, _ := strconv.Unquote(s.Value)
					t.Errorf("%s spells the action %q: call flight's table (flight.Actions) instead", fset.Position(s.Pos()), name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPythonClientActions: every action the Python client calls is in
// the table, so a renamed action fails here, not in a user's notebook.
func TestPythonClientActions(t *testing.T) {
	raw, err := os.ReadFile("../clients/python/plumb_client/_client.py")
	if err != nil {
		t.Fatal(err)
	}
	calls := regexp.MustCompile(`action\("([a-z-]+)"`).FindAllStringSubmatch(string(raw), -1)
	if len(calls) < 10 {
		t.Fatalf("found %d action calls in the Python client; has the way it calls them changed?", len(calls))
	}
	for _, c := range calls {
		if _, ok := flight.ActionNamed(c[1]); !ok {
			t.Errorf("the Python client calls action %q, which flight.Actions does not have", c[1])
		}
	}
}

package server

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"reflect"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/testenv"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/reference/protocol.md")

// TestProtocolReference: docs/reference/protocol.md is every ticket's
// fields (from package flight's source and doc comments) and every
// action the server takes (from its table: what it does, its body, who
// may call it, its size cap). A test fails when they drift, or a ticket
// field has no doc.
func TestProtocolReference(t *testing.T) {
	fset := token.NewFileSet()
	structs := map[string]*ast.TypeSpec{}
	docs := map[string]string{}
	for _, file := range []string{"../flight/protocol.go", "../flight/wire.go"} {
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				if ts, ok := spec.(*ast.TypeSpec); ok {
					structs[ts.Name.Name] = ts
					docs[ts.Name.Name] = strings.Join(strings.Fields(g.Doc.Text()+ts.Doc.Text()), " ")
				}
			}
		}
	}
	var b strings.Builder
	b.WriteString("# The Flight protocol: every ticket and action\n\n*Find what to send the server, from any Arrow Flight client.*\n\n")
	b.WriteString("Generated from package `flight` and the server's action table (`go test ./server -run TestProtocolReference -update`);\na test fails when this page and the code differ. See [the protocol](../protocol.md) for how streams are framed.\n")
	b.WriteString("\n## Tickets (DoGet), as JSON\n")
	for _, name := range []string{"Ticket", "RecordsTicket", "WindowTicket", "StreamTicket"} {
		ts := structs[name]
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			t.Fatalf("flight.%s is not a struct", name)
		}
		fmt.Fprintf(&b, "\n### %s\n\n%s\n\n| key | type | meaning |\n|---|---|---|\n", name, docs[name])
		for _, fld := range st.Fields.List {
			if fld.Tag == nil || len(fld.Names) == 0 {
				continue
			}
			tag := reflect.StructTag(strings.Trim(fld.Tag.Value, "`"))
			key, _, _ := strings.Cut(tag.Get("json"), ",")
			var typ bytes.Buffer
			printer.Fprint(&typ, fset, fld.Type)
			if w, unit, ok := strings.Cut(tag.Get("wire"), ","); ok {
				// Written by the type's own MarshalJSON, in a unit.
				key = w
				typ.Reset()
				typ.WriteString("number (" + unit + ")")
			}
			if key == "-" || key == "" {
				continue
			}
			doc := strings.Join(strings.Fields(fld.Doc.Text()+" "+fld.Comment.Text()), " ")
			if doc == "" {
				t.Errorf("flight.%s.%s (%s) has no doc comment", name, fld.Names[0].Name, key)
			}
			fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", key, typ.String(), strings.ReplaceAll(doc, "|", `\|`))
		}
	}
	b.WriteString("\n## Actions (DoAction), bodies as JSON\n\n| action | who | body cap | what |\n|---|---|---|---|\n")
	for _, a := range flight.Actions {
		who := "anyone allowed on the queue"
		if a.Admin {
			who = "admin of `*`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %d KiB | %s |\n", a.Name, who, a.Limit()>>10, strings.ReplaceAll(a.Doc, "|", `\|`))
	}
	testenv.CheckGenerated(t, "../docs/reference/protocol.md", b.String(), *updateDocs, "go test ./server -run TestProtocolReference -update")
}

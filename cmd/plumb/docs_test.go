package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/plumb-dev/plumb/dns/dnspair"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/dns/enrich"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/kafkapub"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated references in docs/reference")

// checkGenerated compares a generated page with the committed one, or
// writes it with -update.
func checkGenerated(t *testing.T, path, got string) {
	t.Helper()
	testenv.CheckGenerated(t, path, got, *updateDocs, "go test ./cmd/plumb -run "+t.Name()+" -update")
}

// TestCLIReference: docs/reference/cli.md is every verb's help, as the
// flag sets print it.
func TestCLIReference(t *testing.T) {
	// Defaults read from the environment print as they would on a
	// machine with none set.
	t.Setenv("TMPDIR", "/tmp")
	for _, v := range []string{"PLUMB_SERVER", "PLUMB_USER", "PLUMB_TOKEN_FILE", "PLUMB_TLS_CA", "PLUMB_SECRET"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	var b strings.Builder
	b.WriteString("# The command line\n\n*Find every verb and flag of `plumb`.*\n\n")
	b.WriteString("Generated from the code's flag sets (`go test ./cmd/plumb -run TestCLIReference -update`); a test fails when\nthis page and the code differ. Each verb also prints its page with `plumb VERB -h`.\n\n")
	var top bytes.Buffer
	run([]string{"-h"}, &top, &top)
	b.WriteString("```text\n" + top.String() + "```\n")
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	sort.Strings(names)
	for _, name := range names {
		var out bytes.Buffer
		if code := run([]string{name, "-h"}, &out, &out); code != 0 {
			t.Fatalf("plumb %s -h exited %d: %s", name, code, out.String())
		}
		fmt.Fprintf(&b, "\n## plumb %s\n\n```text\n%s```\n", name, strings.TrimRight(out.String(), "\n")+"\n")
	}
	checkGenerated(t, "../../docs/reference/cli.md", b.String())
}

// TestRecordsReference: docs/reference/records.md is every column of the
// DNS records and transactions, its Arrow type, meaning and tshark field;
// a column without a meaning fails.
func TestRecordsReference(t *testing.T) {
	var b strings.Builder
	b.WriteString("# DNS records and transactions: every column\n\n*Find which column holds what, its type, and the tshark field with the same value.*\n\n")
	b.WriteString("Generated from the schemas (`go test ./cmd/plumb -run TestRecordsReference -update`); a test fails when\nthis page and the code differ, or a column has no meaning written. See [DNS records and transactions](../dns.md)\nfor how rows are made.\n")
	table := func(title, stage string, schema *arrow.Schema, docs map[string]dnsrec.ColumnDoc) {
		fmt.Fprintf(&b, "\n## %s (`%s`)\n\n| column | type | meaning | tshark | changed by |\n|---|---|---|---|---|\n", title, stage)
		for _, f := range schema.Fields() {
			d, ok := docs[f.Name]
			if !ok || d.Meaning == "" {
				t.Errorf("%s: column %s has no meaning in its ColumnDocs", stage, f.Name)
			}
			typ := f.Type.String()
			if f.Nullable {
				typ += ", nullable"
			}
			cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
			fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s |\n", f.Name, cell(typ), cell(d.Meaning), cell(code(d.Tshark)), cell(code(d.Option)))
		}
		for name := range docs {
			if !schema.HasField(name) {
				t.Errorf("%s: ColumnDocs has %s, which the schema does not", stage, name)
			}
		}
	}
	table("Records", "builtin:dns", dnsrec.Schema, dnsrec.ColumnDocs)
	table("Transactions", "builtin:dnspairs", dnspair.Schema, dnspair.ColumnDocs)
	checkGenerated(t, "../../docs/reference/records.md", b.String())
}

// code puts each of a list of names in backquotes.
func code(s string) string {
	if s == "" {
		return ""
	}
	parts := strings.Split(s, ", ")
	for i, p := range parts {
		parts[i] = "`" + p + "`"
	}
	return strings.Join(parts, ", ")
}

// TestInternalsNamesEveryPackage: docs/internals.md's table names every
// package of the module (but benchmarks and examples), and its diagram
// every top-level folder of one.
func TestInternalsNamesEveryPackage(t *testing.T) {
	raw, err := os.ReadFile("../../docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	start := strings.Index(page, "```mermaid")
	end := strings.Index(page[start+1:], "```") + start + 1
	if start < 0 || end <= start {
		t.Fatal("docs/internals.md has no mermaid diagram")
	}
	diagram := page[start:end]
	var pkgs []string
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", path)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bench" || rel == "examples" || rel == "clients" || rel == "tests" || rel == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir := filepath.ToSlash(filepath.Dir(rel))
			if !slices.Contains(pkgs, dir) && dir != "." {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 30 {
		t.Fatalf("found %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		if !strings.Contains(page[:start]+page[end:], "| `"+p+"` |") {
			t.Errorf("docs/internals.md's table does not name package %s", p)
		}
		top, _, _ := strings.Cut(p, "/")
		if top == "internal" {
			continue
		}
		if !strings.Contains(diagram, top) {
			t.Errorf("docs/internals.md's diagram does not show %s", top)
		}
	}
}

// docBlock is a code block of a docs page marked runnable.
type docBlock struct {
	page, lang, code string
	prints           string // what its output must contain, if the marker says
	// output is the whole output the page shows for it, when the block
	// is followed by one marked `<!-- output -->`: see sameOutput.
	output []string
}

// runnableBlocks reads the blocks of a page marked `<!-- runnable -->`
// (or `<!-- runnable, prints: TEXT -->`) on the line before their fence.
func runnableBlocks(t *testing.T, page string) []docBlock {
	raw, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		marker, ok := strings.CutPrefix(lines[i], "<!-- runnable")
		if !ok || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			continue
		}
		b := docBlock{page: filepath.Base(page), lang: strings.TrimPrefix(lines[i+1], "```")}
		if _, p, ok := strings.Cut(marker, "prints: "); ok {
			b.prints = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(p), "-->"))
		}
		var code []string
		for i += 2; i < len(lines) && lines[i] != "```"; i++ {
			code = append(code, lines[i])
		}
		b.code = strings.Join(code, "\n")
		// The page may show what the block prints: the next fenced block
		// after an `<!-- output -->` line, with only blank lines between.
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j+1 < len(lines) && strings.HasPrefix(lines[j], "<!-- output") && strings.HasPrefix(lines[j+1], "```") {
			b.output = []string{}
			for j += 2; j < len(lines) && lines[j] != "```"; j++ {
				b.output = append(b.output, lines[j])
			}
			i = j
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// localAddr is an address a docs block serves on or dials.
var localAddr = regexp.MustCompile(`127\.0\.0\.1:88[0-9][0-9]`)

// TestDocsRun runs every block of the docs marked runnable, as a
// newcomer would: docs/getting-started.md's first, in order, then those
// of the other pages, which start from where getting started ends. Shell
// blocks run in bash with plumb on PATH, Python blocks with the client
// package (a page's later ones after its earlier ones, as in one
// session), in one working directory, against the servers the blocks
// start (each page address, 127.0.0.1:88xx, becomes a free port). Each
// must succeed and print what its marker says.
func TestDocsRun(t *testing.T) {
	blocks := runnableBlocks(t, "../../docs/getting-started.md")
	if len(blocks) < 3 {
		t.Fatalf("%d runnable blocks in docs/getting-started.md", len(blocks))
	}
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if filepath.Base(p) != "getting-started.md" {
			blocks = append(blocks, runnableBlocks(t, p)...)
		}
	}
	python := testenv.Tool(t, "python3")
	addrs := map[string]string{}
	bin := t.TempDir()
	if err := os.Symlink(os.Args[0], filepath.Join(bin, "plumb")); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	root, _ := filepath.Abs("../..")
	env := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "PLUMB_TEST_AS_PLUMB=1",
		"PYTHONPATH="+filepath.Join(root, "clients", "python"), "PLUMB_SRC="+root)
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(work, "server-*.pid"))
		for _, f := range pids {
			if pid, err := os.ReadFile(f); err == nil {
				exec.Command("kill", strings.TrimSpace(string(pid))).Run()
			}
		}
	})
	servers := 0
	pySoFar := map[string]string{}
	for i, b := range blocks {
		code := localAddr.ReplaceAllStringFunc(b.code, func(a string) string {
			if addrs[a] == "" {
				addrs[a] = testenv.FreeAddr(t)
			}
			return addrs[a]
		})
		var cmd *exec.Cmd
		switch b.lang {
		case "sh":
			// A server started in the background is waited for, and its
			// process id kept for the end.
			var script []string
			for _, l := range strings.Split(code, "\n") {
				if !strings.Contains(l, "$PLUMB_SRC") {
					l = strings.ReplaceAll(l, "examples/", root+"/examples/")
				}
				if strings.HasPrefix(l, "plumb serve") {
					servers++
					l, _, _ = strings.Cut(l, " #")
					l = strings.TrimSuffix(strings.TrimSpace(l), "&") + fmt.Sprintf(" >server-%d.log 2>&1 &", servers)
					listen := localAddr.FindString(l)
					if listen == "" {
						listen = strings.Fields(l[strings.Index(l, "--listen")+len("--listen"):])[0]
					}
					host, port, _ := strings.Cut(listen, ":")
					script = append(script, l, fmt.Sprintf("echo $! > server-%d.pid", servers),
						fmt.Sprintf("until (exec 3<>/dev/tcp/%s/%s) 2>/dev/null; do sleep 0.1; done", host, port))
					continue
				}
				script = append(script, l)
			}
			cmd = testenv.Command(t, 2*time.Minute, "bash", "-euc", strings.Join(script, "\n"))
			cmd.Env = append(env, "PLUMB_SERVER="+addrs["127.0.0.1:8815"])
		case "python":
			// The getting-started job's stages run in the background:
			// wait for its rows.
			wait := "import time\nfor _ in range(600):\n    try:\n        import plumb_client\n        if plumb_client.connect(" + fmt.Sprintf("%q", addrs["127.0.0.1:8815"]) + ").blocks('dns.arrow'): break\n    except Exception: pass\n    time.sleep(0.1)\n"
			// A page's Python blocks build on each other, as in one
			// session: each runs after the page's earlier ones.
			cmd = testenv.Command(t, 2*time.Minute, python, "-c", wait+pySoFar[b.page]+code)
			pySoFar[b.page] += code + "\n"
			cmd.Env = env
		default:
			t.Fatalf("runnable block %d of docs/%s: language %q", i+1, b.page, b.lang)
		}
		cmd.Dir = work
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("runnable %s block of docs/%s: %v\n%s\n%s", b.lang, b.page, err, code, out)
		}
		if !strings.Contains(string(out), b.prints) {
			t.Fatalf("runnable %s block of docs/%s printed no %q:\n%s\n%s", b.lang, b.page, b.prints, code, out)
		}
		if b.output != nil {
			if why := sameOutput(b.output, strings.Split(strings.TrimRight(string(out), "\n"), "\n")); why != "" {
				t.Fatalf("runnable %s block of docs/%s does not print what the page shows: %s\n%s\n--- printed:\n%s", b.lang, b.page, why, code, out)
			}
		}
		t.Logf("docs/%s: a %s block ran", b.page, b.lang)
		if os.Getenv("PLUMB_DOCS_SHOW") != "" {
			t.Logf("it printed:\n%s", out)
		}
	}
}

// sameOutput compares what a block printed with what its page shows,
// line by line and whole, as Python's doctest does with ELLIPSIS: "..."
// in a shown line stands for any text within the line, and a line that
// is only "..." for any number of lines. It says where they part, or "".
func sameOutput(want, got []string) string {
	var match func(w, g int) bool
	match = func(w, g int) bool {
		if w == len(want) {
			return g == len(got)
		}
		if strings.TrimSpace(want[w]) == "..." {
			for k := g; k <= len(got); k++ {
				if match(w+1, k) {
					return true
				}
			}
			return false
		}
		return g < len(got) && lineMatches(want[w], got[g]) && match(w+1, g+1)
	}
	if match(0, 0) {
		return ""
	}
	for i := range want {
		if i >= len(got) {
			return fmt.Sprintf("it printed %d lines, the page shows more (from %q)", len(got), want[i])
		}
		if strings.TrimSpace(want[i]) == "..." || !lineMatches(want[i], got[i]) {
			return fmt.Sprintf("line %d is %q, the page shows %q", i+1, got[i], want[i])
		}
	}
	return fmt.Sprintf("it printed %d lines, the page shows %d", len(got), len(want))
}

// lineMatches matches a printed line to a shown one, "..." standing for
// any text. Runs of spaces count as one: a table's column widths follow
// the values in it (a latency of 3.5s or 12.3s), which the page cannot
// know, while the words and their order are what a reader checks.
func lineMatches(want, got string) bool {
	want, got = oneSpace(want), oneSpace(got)
	parts := strings.Split(want, "...")
	if len(parts) == 1 {
		return strings.TrimRight(want, " ") == strings.TrimRight(got, " ")
	}
	if !strings.HasPrefix(got, parts[0]) {
		return false
	}
	got = got[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(got, p)
		if i < 0 {
			return false
		}
		got = got[i+len(p):]
	}
	last := strings.TrimRight(parts[len(parts)-1], " ")
	return strings.HasSuffix(strings.TrimRight(got, " "), last) && len(strings.TrimRight(got, " ")) >= len(last)
}

// oneSpace turns every run of blanks into one space.
func oneSpace(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// TestSameOutput: the comparison of shown and printed output finds a
// missing, an extra and a changed line, and lets "..." stand for text.
func TestSameOutput(t *testing.T) {
	for _, c := range []struct {
		want, got string
		ok        bool
	}{
		{"a\nb", "a\nb", true},
		{"a\nb", "a", false},
		{"a", "a\nb", false},
		{"a\nb", "a\nc", false},
		{"stream at ...", "stream at 7", true},
		{"... packets", "12 packets", true},
		{"... packets", "12 bytes", false},
		{"a\n...\nz", "a\nb\nc\nz", true},
		{"a\n...\nz", "a\nz", true},
		{"a\n...\nz", "a\nb", false},
		{"24", "0", false},
		{"A  B   C", "A    B C", true},
		{"A  B   C", "A B", false},
		{"AB C", "A BC", false},
	} {
		if got := sameOutput(strings.Split(c.want, "\n"), strings.Split(c.got, "\n")) == ""; got != c.ok {
			t.Errorf("shown %q, printed %q: same %v, want %v", c.want, c.got, got, c.ok)
		}
	}
}

// TestJobReference: docs/reference/job.md is every field of a job file,
// read from the pipeline package's source: its key, Go type and doc
// comment; a field without one fails.
func TestJobReference(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../pipeline/job.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	structs := map[string]*ast.StructType{}
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok {
			if st, ok := ts.Type.(*ast.StructType); ok {
				structs[ts.Name.Name] = st
			}
		}
		return true
	})
	var b strings.Builder
	b.WriteString("# Job files: every field\n\n*Find what each key of a job file means.*\n\n")
	b.WriteString("Generated from `pipeline/job.go` (`go test ./cmd/plumb -run TestJobReference -update`); a test fails when\nthis page and the code differ, or a field has no doc comment. See [pipelines](../pipelines.md) for how jobs run.\n")
	for _, s := range []struct{ name, title string }{{"Job", "The job"}, {"Stage", "A stage (`stages:`)"},
		{"WindowSpec", "A window (`window:`)"}, {"StreamSpec", "A stream's gaps (`stream:`)"}} {
		st := structs[s.name]
		if st == nil {
			t.Fatalf("pipeline/job.go has no struct %s", s.name)
		}
		fmt.Fprintf(&b, "\n## %s\n\n| key | type | meaning |\n|---|---|---|\n", s.title)
		for _, fld := range st.Fields.List {
			if fld.Tag == nil || len(fld.Names) == 0 {
				continue
			}
			key, _, _ := strings.Cut(reflect.StructTag(strings.Trim(fld.Tag.Value, "`")).Get("yaml"), ",")
			if key == "-" || key == "" {
				continue
			}
			doc := strings.Join(strings.Fields(fld.Doc.Text()+" "+fld.Comment.Text()), " ")
			if doc == "" {
				t.Errorf("pipeline.%s.%s (%s) has no doc comment", s.name, fld.Names[0].Name, key)
			}
			var typ bytes.Buffer
			printer.Fprint(&typ, fset, fld.Type)
			fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", key, typ.String(), strings.ReplaceAll(doc, "|", `\|`))
		}
	}
	checkGenerated(t, "../../docs/reference/job.md", b.String())
}

// TestBuiltinsReference: docs/reference/builtins.md is every built-in
// stage a server registers, with what it does and its arguments, as the
// registry documents them; a built-in without a doc fails.
func TestBuiltinsReference(t *testing.T) {
	reg := stage.NewRegistry()
	builtin.Register(reg, builtin.FindXZ())
	builtin.RegisterAnonymize(reg, "")
	dbs := enrich.NewDatabases(t.TempDir(), nil)
	builtin.RegisterEnrich(reg, dbs)
	builtin.RegisterFilter(reg, dbs)
	builtin.RegisterKafka(reg, kafkapub.Config{})
	var b strings.Builder
	b.WriteString("# Built-in stages\n\n*Find every `builtin:NAME` a job's `program` may name, and its arguments.*\n\n")
	b.WriteString("Generated from the server's registry (`go test ./cmd/plumb -run TestBuiltinsReference -update`); a test fails when\nthis page and the code differ. Arguments follow the name as a query: `builtin:dnstop?n=20&window=5m`; an argument\na built-in does not know is refused when the job is submitted.\n\n")
	b.WriteString("| built-in | what it does |\n|---|---|\n")
	for _, f := range reg.Docs() {
		if strings.TrimSpace(f.Doc) == "" {
			t.Errorf("builtin:%s has no doc", f.Name)
		}
		fmt.Fprintf(&b, "| `builtin:%s` | %s |\n", f.Name, strings.ReplaceAll(f.Doc, "|", `\|`))
	}
	checkGenerated(t, "../../docs/reference/builtins.md", b.String())
}

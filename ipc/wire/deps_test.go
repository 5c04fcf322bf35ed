package wire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/localbus/localbus/ipc/ipctest"
)

// TestWireImportsTheStandardLibraryOnly guards the rule that the shared
// vocabulary costs a client nothing: no package of the server, no module
// at all (SPEC §1).
func TestWireImportsTheStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	for _, d := range ipctest.Deps(t, ".", "./grammar") {
		if !d.Standard && d.Path != "github.com/localbus/localbus/ipc/wire" && d.Path != "github.com/localbus/localbus/ipc/wire/grammar" {
			t.Errorf("ipc/wire or ipc/wire/grammar depends on %s, outside the standard library", d.Path)
		}
	}
}

// TestErrorCodesAreTheProtocolDocs pins the error codes to the table of
// ipc/protocol.md: every code the table lists is a Code constant, and
// every Code constant is named in the document (internal, the 500 of an
// unforeseen failure, excepted).
func TestErrorCodesAreTheProtocolDocs(t *testing.T) {
	t.Parallel()
	consts := map[string]string{} // value → name
	f, err := parser.ParseFile(token.NewFileSet(), "codes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(n.Name, "Code") {
					v, _ := strconv.Unquote(lit.Value)
					consts[v] = n.Name
				}
			}
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	_, table, ok := strings.Cut(text, "## Errors")
	if !ok {
		t.Fatal("protocol.md has no Errors section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rows := regexp.MustCompile("(?m)^\\| [0-9]{3} \\|.*$").FindAllString(table, -1)
	if len(rows) == 0 {
		t.Fatal("protocol.md: no rows in the error table")
	}
	code := regexp.MustCompile("`([a-z][A-Za-z_]*)`")
	for _, row := range rows {
		for _, m := range code.FindAllStringSubmatch(row, -1) {
			if _, ok := consts[m[1]]; !ok && m[1] != "Allow" {
				t.Errorf("protocol.md lists code %q; package wire has no constant for it", m[1])
			}
		}
	}
	for v, name := range consts {
		if v != "internal" && !strings.Contains(text, "`"+v+"`") {
			t.Errorf("%s = %q is not named in protocol.md", name, v)
		}
	}
}

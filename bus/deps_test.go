package bus_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localbus/localbus/ipc/ipctest"
)

// ownPackages are the bus's packages: pure themselves, each may import the
// others.
var ownPackages = map[string]bool{
	"github.com/localbus/localbus/bus":         true,
	"github.com/localbus/localbus/bus/bustest": true,
	"github.com/localbus/localbus/bus/hub":     true,
	"github.com/localbus/localbus/bus/share":   true,
	// The grammar clients and the bus share: the standard library only.
	"github.com/localbus/localbus/ipc/wire/grammar": true,
}

// TestBusImportsNoIO guards the rule that the bus, and the hub over it,
// are pure: the standard library only, and no networking (net/http
// included: HTTP statuses and bodies are the router's), process or systemd
// package, however indirectly (SPEC §1, STYLE "Where things go").
func TestBusImportsNoIO(t *testing.T) {
	t.Parallel()
	forbidden := []string{"net", "os/exec", "os/signal", "plugin", "github.com/coder/websocket", "github.com/coreos/go-systemd",
		"golang.org/x/net/websocket", "github.com/gorilla/websocket", "nhooyr.io/websocket"}
	for _, d := range ipctest.Deps(t, ".", "./bustest", "./share", "./hub") {
		path := d.Path
		for _, f := range forbidden {
			if path == f || strings.HasPrefix(path, f+"/") {
				t.Errorf("bus depends on %s", path)
			}
		}
		if !d.Standard && !ownPackages[path] {
			t.Errorf("bus depends on %s, outside the standard library", path)
		}
	}
}

// TestPackageDocs checks that bus, bustest and share each have one package
// comment, in doc.go.
func TestPackageDocs(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "bustest", "share"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		var docs []string
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if f.Doc != nil {
				docs = append(docs, filepath.Base(name))
				if !strings.HasPrefix(f.Doc.Text(), "Package "+f.Name.Name+" ") {
					t.Errorf("%s: package comment does not start with %q", name, "Package "+f.Name.Name)
				}
			}
		}
		if len(docs) != 1 || docs[0] != "doc.go" {
			t.Errorf("%s: package comments in %v, want in doc.go only", dir, docs)
		}
	}
}

// TestBusExportsFewFunctions keeps the bus's surface small: go doc -short
// lists at most 10 functions of package bus at its top level (methods,
// and constructors, it lists under their types). The query grammar lives
// in ipc/wire/grammar, and parsed values are types with their parsers.
func TestBusExportsFewFunctions(t *testing.T) {
	t.Parallel()
	const most = 10
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/localbus/localbus/bus")
	if err != nil {
		t.Fatal(err)
	}
	var funcs []string
	for _, f := range pkg.Funcs {
		funcs = append(funcs, f.Name)
	}
	if len(funcs) == 0 || len(funcs) > most {
		t.Errorf("package bus exports %d functions at its top level, want 1 to %d: %v", len(funcs), most, funcs)
	}
}

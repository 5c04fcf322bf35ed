package ipc_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageHasItsDocInDocGo walks the module: every directory with
// Go files other than tests (testdata and hidden directories aside) keeps
// its package doc in doc.go, and in no other file. A library's starts
// "Package <name> "; a command's (package main) starts "Command <dir> " or
// with its directory's name capitalised, as cmd/localbus's "Localbus is".
func TestEveryPackageHasItsDocInDocGo(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		var sources []string
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				sources = append(sources, f)
			}
		}
		if len(sources) == 0 {
			return nil
		}
		checked++
		rel, _ := filepath.Rel(root, path)
		fset := token.NewFileSet()
		var docFound bool
		for _, f := range sources {
			file, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			base := filepath.Base(f)
			if base != "doc.go" {
				if file.Doc != nil {
					t.Errorf("%s: package doc in %s; it belongs in doc.go", rel, base)
				}
				continue
			}
			docFound = true
			if file.Doc == nil {
				t.Errorf("%s: doc.go has no package doc", rel)
				continue
			}
			text := file.Doc.Text()
			pkg := file.Name.Name
			var prefixes []string
			if pkg == "main" {
				prefixes = []string{"Command " + name + " ", strings.ToUpper(name[:1]) + name[1:] + " "}
			} else {
				prefixes = []string{"Package " + pkg + " "}
			}
			ok := false
			for _, p := range prefixes {
				ok = ok || strings.HasPrefix(text, p)
			}
			if !ok {
				t.Errorf("%s: the package doc starts %.30q, want one of %q", rel, text, prefixes)
			}
		}
		if !docFound {
			t.Errorf("%s: no doc.go", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked only %d packages: is the walk starting at the module root?", checked)
	}
}

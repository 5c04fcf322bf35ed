package ipc_test

import (
	"bytes"
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
	root := moduleRoot(t)
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if skippedDir(root, path, name) {
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

// TestNoSourceFileIsOver600Lines walks the module: no Go file other than
// a test (testdata and hidden directories aside) is over 600 lines. Past
// that, a file is split by concern (STYLE, "Files and names").
func TestNoSourceFileIsOver600Lines(t *testing.T) {
	const most = 600
	root := moduleRoot(t)
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if skippedDir(root, path, name) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		if n := bytes.Count(b, []byte("\n")); n > most {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: %d lines, want at most %d: split it by concern", rel, n, most)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Errorf("checked %d files, want the module's (over 100)", checked)
	}
}

// moduleRoot is the module's directory, the one above this package's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// skippedDir reports whether the walks over the module's sources leave
// out the directory at path, named name: testdata and hidden directories,
// as the go tool does.
func skippedDir(root, path, name string) bool {
	return path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_"))
}

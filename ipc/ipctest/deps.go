package ipctest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Dep is one package a listed package depends on.
type Dep struct {
	// Path is the import path.
	Path string
	// Standard reports whether the package is in the standard library.
	Standard bool
}

// Deps returns every package the packages pkgs (patterns as go list takes
// them, relative to the test's directory) depend on, themselves included,
// as "go list -deps" names them: the arrows of SPEC §1 are pinned with it.
// It skips the test when no go command can be found.
func Deps(t testing.TB, pkgs ...string) []Dep {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := exec.LookPath(goCmd); err != nil {
			t.Skip("no go command to list dependencies with")
		}
	}
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}"}, pkgs...)
	out, err := exec.Command(goCmd, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var deps []Dep
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, std, _ := strings.Cut(line, " ")
		deps = append(deps, Dep{Path: path, Standard: std == "true"})
	}
	return deps
}

package ipc_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// goTool returns the go command, or skips the test without one.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(p); err != nil {
		t.Skip("no go command to list dependencies with")
	}
	return p
}

// TestRouterDoesNotImportTheDaemon guards SPEC §1: dependencies point down,
// cmd → daemon → ipc → bus. The router knows storage errors from bus, not
// from the journal that returns them, and nothing of the daemon.
func TestRouterDoesNotImportTheDaemon(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(goTool(t), "list", "-deps", "-f", "{{.ImportPath}}", ".", "./access", "./wire").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const daemon = "github.com/localbus/localbus/daemon"
	for _, path := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path == daemon || strings.HasPrefix(path, daemon+"/") {
			t.Errorf("ipc depends on %s", path)
		}
	}
}

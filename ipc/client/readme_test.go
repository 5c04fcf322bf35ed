package client_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"
)

// TestReadmeGoExampleCompiles vets the README's Go example as a program of
// its own against this module, so the README never shows code that does not
// build.
func TestReadmeGoExampleCompiles(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README has no ```go block with a main package")
	}
	if !regexp.MustCompile(`"github.com/localbus/localbus/ipc/client"`).Match(m[1]) {
		t.Errorf("README's Go example does not import the client package:\n%s", m[1])
	}
	main := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(main, m[1], 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "vet", main)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go vet of the README's Go example: %v\n%s\n%s", err, out, m[1])
	}
}

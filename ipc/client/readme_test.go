package client_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
)

// TestReadmeGoExampleRunsOnTheSocketOfLocalbusSocket vets and builds the
// README's Go example as a program of its own against this module, so the
// README never shows code that does not build, then runs it with
// $LOCALBUS_SOCKET naming a daemon that is not on the default socket: it
// must find it there, as the Python and Node examples do through
// "localbus socket", publish, and print the event it follows.
func TestReadmeGoExampleRunsOnTheSocketOfLocalbusSocket(t *testing.T) {
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
	dir := t.TempDir()
	main := filepath.Join(dir, "main.go")
	if err := os.WriteFile(main, m[1], 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"vet", main}, {"build", "-o", filepath.Join(dir, "example"), main}} {
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s of the README's Go example: %v\n%s\n%s", args[0], err, out, m[1])
		}
	}

	sock := filepath.Join(shortDir(t), "elsewhere.sock")
	startDaemon(t, sock, bus.Limits{})
	cmd := exec.Command(filepath.Join(dir, "example"))
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCALBUS_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "LOCALBUS_SOCKET="+sock)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			first <- sc.Text()
		}
		close(first)
	}()
	var line string
	select {
	case line = <-first:
	case <-time.After(wait):
	}
	cmd.Process.Kill()
	cmd.Wait()
	if want := `1 build:step {"n":1}`; line != want {
		t.Errorf("the README's Go example with LOCALBUS_SOCKET=%s printed %q, want %q; stderr:\n%s", sock, line, want, stderr.String())
	}
}

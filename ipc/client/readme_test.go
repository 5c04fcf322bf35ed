package client_test

import (
	"bufio"
	"bytes"
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
	// The module the README sets up: main.go in a directory beside a
	// checkout named localbus, then the README's commands in it, "go run ."
	// replaced by go vet and go build.
	setup := regexp.MustCompile("(?s)```sh\n([^`]*go mod edit[^`]*)```").FindSubmatch(b)
	if setup == nil {
		t.Fatal("README has no ```sh block with go mod edit")
	}
	if bytes.Index(b, setup[0]) < bytes.Index(b, m[0]) {
		t.Error("README's Go setup comes before the program: go mod tidy before main.go is there drops the requirement")
	}
	top := t.TempDir()
	if err := os.Symlink(root, filepath.Join(top, "localbus")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(top, "follow")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), m[1], 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var lines []string
	ran := false
	for _, line := range strings.Split(string(setup[1]), "\n") {
		line, _, _ = strings.Cut(line, "#")
		switch line = strings.TrimSpace(line); line {
		case "":
		case "go run .":
			ran = true
			lines = append(lines, "go vet .", "go build -o example .")
		default:
			lines = append(lines, line)
		}
	}
	if !ran || len(lines) < 4 {
		t.Fatalf("README's Go setup does not end in go run .:\n%s", setup[1])
	}
	for _, line := range lines {
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(goTool)+string(os.PathListSeparator)+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s, in a directory beside the checkout with the README's Go example as main.go: %v\n%s", line, err, out)
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

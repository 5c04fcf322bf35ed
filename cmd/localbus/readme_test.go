package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository's top level, seen from this package.
const repoRoot = "../.."

// fencedBlocks returns the lines of each fenced code block in the README
// section headed "## "+heading, in order.
func fencedBlocks(t *testing.T, readme, heading string) [][]string {
	t.Helper()
	var blocks [][]string
	var block []string
	in, fenced := false, false
	sc := bufio.NewScanner(strings.NewReader(readme))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !fenced && strings.HasPrefix(line, "## "):
			in = line == "## "+heading
		case in && strings.HasPrefix(line, "```"):
			if fenced {
				blocks = append(blocks, block)
				block = nil
			}
			fenced = !fenced
		case in && fenced:
			block = append(block, line)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md has no section %q with a fenced command", "## "+heading)
	}
	return blocks
}

// command returns the command of a README line, without its comment.
func command(line string) string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

// TestReadmeRunAndTestCommandsAreTheOnesThatWork pins the README's two
// commands: "Run it" is one command, "go run ./cmd/localbus serve", and
// the commands it shows for a second terminal are commands of this binary;
// "Test it" is one command, an executable script in the repository, and
// .ci/run runs that same command, so CI tests what a newcomer runs.
func TestReadmeRunAndTestCommandsAreTheOnesThatWork(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	app := newApp(io.Discard, io.Discard)

	run := fencedBlocks(t, string(readme), "Run it")
	if len(run[0]) != 1 || command(run[0][0]) != "go run ./cmd/localbus serve" {
		t.Errorf("Run it: first block is %q, want the one command \"go run ./cmd/localbus serve\"", run[0])
	}
	for _, block := range run {
		for _, line := range block {
			f := strings.Fields(command(line))
			if len(f) < 4 || f[0] != "go" || f[1] != "run" || f[2] != "./cmd/localbus" {
				t.Errorf("Run it: %q is not \"go run ./cmd/localbus COMMAND…\", which needs only Go and this checkout", line)
				continue
			}
			if app.Command(f[3]) == nil {
				t.Errorf("Run it: %q: localbus has no command %q", line, f[3])
			}
		}
	}

	test := fencedBlocks(t, string(readme), "Test it")
	if len(test[0]) != 1 {
		t.Fatalf("Test it: first block is %q, want one command", test[0])
	}
	testCmd := command(test[0][0])
	st, err := os.Stat(filepath.Join(repoRoot, testCmd))
	if err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("Test it: %q is not an executable script in the repository (%v)", testCmd, err)
	}

	ci, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	calls := false
	for _, line := range strings.Split(string(ci), "\n") {
		f := strings.Fields(command(line))
		if len(f) > 0 && f[0] == "exec" {
			f = f[1:]
		}
		if len(f) > 0 && !strings.HasPrefix(f[0], "#") && f[0] == testCmd {
			calls = true
		}
	}
	if !calls {
		t.Errorf(".ci/run does not run the README's test command %q:\n%s", testCmd, ci)
	}
}

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
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

// TestReadmeInstallsFromACheckoutWithFlagsThatExist pins the README's
// install paths: the module is not published, so every go command in
// "Install" and "systemd" builds a package of the checkout (never
// module@version), and every localbus command there names a command and
// flags the binary has.
func TestReadmeInstallsFromACheckoutWithFlagsThatExist(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	app := newApp(io.Discard, io.Discard)
	checked := 0
	for _, heading := range []string{"Install", "systemd"} {
		for _, block := range fencedBlocks(t, string(readme), heading) {
			for _, line := range block {
				f := strings.Fields(command(line))
				if len(f) > 0 && f[0] == "sudo" {
					f = f[1:]
				}
				switch {
				case len(f) > 1 && f[0] == "go":
					if f[1] != "build" && f[1] != "install" || !strings.HasPrefix(f[len(f)-1], "./") || strings.Contains(line, "@") {
						t.Errorf("%s: %q does not build a package of the checkout", heading, line)
					}
					checked++
				case len(f) > 1 && filepath.Base(f[0]) == "localbus":
					if err := knownCommandAndFlags(app.Commands, f[1:]); err != nil {
						t.Errorf("%s: %q: %v", heading, line, err)
					}
					checked++
				}
			}
		}
	}
	if checked < 4 {
		t.Errorf("checked %d go and localbus commands in Install and systemd, want at least 4", checked)
	}
}

// knownCommandAndFlags reports whether args, after the program's name,
// start with a command path of cmds and give only flags that command has.
func knownCommandAndFlags(cmds []*cli.Command, args []string) error {
	var cmd *cli.Command
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(args[0]) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd, cmds, args = next, next.Subcommands, args[1:]
	}
	if cmd == nil {
		return fmt.Errorf("no such command")
	}
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			continue
		}
		found := false
		for _, fl := range cmd.Flags {
			for _, n := range fl.Names() {
				found = found || n == name
			}
		}
		if !found {
			return fmt.Errorf("%s has no flag %s", cmd.Name, a)
		}
	}
	return nil
}

// shellLines returns the lines of the README's ```sh blocks, a line ending
// in a backslash or a pipe joined to the next, as a shell reads them.
func shellLines(readme string) []string {
	var lines []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme, -1) {
		cont := ""
		for _, line := range strings.Split(strings.TrimRight(m[1], "\n"), "\n") {
			line = cont + line
			trimmed := strings.TrimSpace(command(line))
			if strings.HasSuffix(trimmed, "\\") || strings.HasSuffix(trimmed, "|") {
				cont = strings.TrimSuffix(trimmed, "\\") + " "
				continue
			}
			cont = ""
			lines = append(lines, line)
		}
	}
	return lines
}

// pipeline splits a shell line, without its comment, at the pipes that
// are not quoted, and returns each stage's words (quotes kept).
func pipeline(line string) [][]string {
	var stages [][]string
	var quote rune
	start := 0
	line = command(line)
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '|':
			stages = append(stages, strings.Fields(line[start:i]))
			start = i + 1
		}
	}
	return append(stages, strings.Fields(line[start:]))
}

// TestReadmeShellLinesRunCommandsThatExist pastes, in thought, every line
// of the README's shell blocks: a stage of a pipeline that runs localbus
// names a command and flags the binary has, and no stage starts with the
// name of a localbus command, which a shell would run as a program of its
// own (a synopsis such as "localbus session create|list" pasted as written).
func TestReadmeShellLinesRunCommandsThatExist(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	app := newApp(io.Discard, io.Discard)
	names := map[string]bool{}
	var collect func([]*cli.Command)
	collect = func(cmds []*cli.Command) {
		for _, c := range cmds {
			for _, n := range c.Names() {
				names[n] = true
			}
			collect(c.Subcommands)
		}
	}
	collect(app.Commands)
	checked := 0
	for _, line := range shellLines(string(readme)) {
		for i, words := range pipeline(line) {
			if len(words) > 0 && words[0] == "sudo" {
				words = words[1:]
			}
			if len(words) == 0 {
				continue
			}
			switch {
			case filepath.Base(words[0]) == "localbus":
				checked++
				if len(words) > 1 && words[1] == "help" {
					words = words[1:] // localbus help COMMAND
				}
				if err := knownCommandAndFlags(app.Commands, words[1:]); err != nil {
					t.Errorf("%q: %v", line, err)
				}
			case i > 0 && names[words[0]]:
				t.Errorf("%q: a shell runs %q as a program of its own: a localbus command goes on a line of its own", line, words[0])
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d localbus commands in the README's shell blocks, want at least 20", checked)
	}
}

// TestReadmeNamesThePackagesScriptsTestInstalls pins the README's list of
// the Debian packages scripts/test installs to the packages the script
// checks for (its "need PACKAGE CHECK" lines), so a newcomer can install
// them beforehand, or know what the script will ask for.
func TestReadmeNamesThePackagesScriptsTestInstalls(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(repoRoot, "scripts", "test"))
	if err != nil {
		t.Fatal(err)
	}
	var need []string
	for _, m := range regexp.MustCompile(`(?m)^\s*need ([a-z0-9.+-]+) `).FindAllStringSubmatch(string(script), -1) {
		if !slices.Contains(need, m[1]) {
			need = append(need, m[1])
		}
	}
	m := regexp.MustCompile("the Debian packages `([^`]+)`").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README's Test it names no Debian packages (\"the Debian packages `…`\")")
	}
	listed := strings.Fields(string(m[1]))
	slices.Sort(need)
	slices.Sort(listed)
	if len(need) < 5 || !slices.Equal(need, listed) {
		t.Errorf("README lists the packages %q; scripts/test checks for %q", listed, need)
	}
}

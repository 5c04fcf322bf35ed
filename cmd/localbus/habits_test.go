package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/daemon/daemontest"
)

func TestFlagsMayComeAfterTheArguments(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	if r := runBin(t, "", "session", "create", "s1", "--socket", d.Socket); r.code != exitOK {
		t.Fatalf("session create s1 --socket S: exit %d, stderr %q", r.code, r.stderr)
	}
	r := runBin(t, "", "session", "show", "s1", "--json", "--socket", d.Socket)
	if r.code != exitOK {
		t.Fatalf("session show s1 --json --socket S: exit %d, stderr %q", r.code, r.stderr)
	}
	var info struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.ID != "s1" {
		t.Fatalf("session show s1 --json: stdout %q (%v), want the session as JSON", r.stdout, err)
	}
	// or before the command, as docker -H and systemctl --user take theirs.
	r = runBin(t, "", "--socket", d.Socket, "session", "show", "s1", "--json")
	if r.code != exitOK || !strings.Contains(r.stdout, `"id":"s1"`) {
		t.Fatalf("--socket S session show s1 --json: exit %d, stdout %q, stderr %q; want the session as JSON", r.code, r.stdout, r.stderr)
	}
	// A value that looks like a flag stays an argument after "--", and
	// "-" is stdin wherever it stands.
	if r := runBin(t, "", "publish", "--session", "s1", "n:neg", "--socket", d.Socket, "--", "-5"); r.code != exitOK {
		t.Fatalf("publish … -- -5: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBin(t, `{"from":"stdin"}`, "publish", "n:in", "-", "--session=s1", "--socket", d.Socket); r.code != exitOK {
		t.Fatalf("publish n:in - --session=s1: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runBin(t, "", "events", "--since", "0", "--count", "2", "--raw", "--socket", d.Socket, "--session", "s1")
	if r.code != exitOK {
		t.Fatalf("events: exit %d, stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, `"data":-5`) || !strings.Contains(r.stdout, `"data":{"from":"stdin"}`) {
		t.Errorf("events stdout %q, want the events -5 and {\"from\":\"stdin\"}", r.stdout)
	}
}

func TestUsageErrorsAreOneLineAndAPointerToHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		says string
		help string
	}{
		{"mistyped command", []string{"sesion", "list"}, `unknown command "sesion" (did you mean "session"?)`, "localbus"},
		{"mistyped subcommand", []string{"session", "shwo", "x"}, `unknown command "shwo" (did you mean "show"?)`, "localbus session"},
		{"mistyped keys subcommand", []string{"keys", "ad"}, `unknown command "ad" (did you mean "add"?)`, "localbus keys"},
		{"mistyped flag", []string{"events", "--sesion", "x"}, `unknown flag --sesion (did you mean "--session"?)`, "localbus events"},
		{"mistyped flag after an argument", []string{"session", "show", "x", "--jsn"}, `unknown flag --jsn (did you mean "--json"?)`, "localbus session show"},
		{"unknown flag", []string{"status", "--frobnicate"}, "unknown flag --frobnicate\n", "localbus status"},
		{"unknown flag before the command", []string{"--frobnicate", "status"}, "unknown flag --frobnicate\n", "localbus status"},
		{"mistyped flag before the command", []string{"--sokcet", "/s", "status"}, `unknown flag --sokcet (did you mean "--socket"?)`, "localbus"},
		{"unknown flag of a command group", []string{"keys", "--frobnicate"}, "unknown flag --frobnicate\n", "localbus keys"},
		{"mistyped flag of a subcommand", []string{"systemd", "print", "--usr"}, `unknown flag --usr (did you mean "--user"?)`, "localbus systemd print"},
		{"missing argument", []string{"session", "show"}, "missing arguments: want one session ID", "localbus session show"},
		{"session alone", []string{"session"}, "want a command: create, list, show or delete\n", "localbus session"},
		{"keys alone", []string{"keys"}, "want a command: add, list or revoke\n", "localbus keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runBin(t, "", tt.args...)
			if r.code != exitUsage || r.stdout != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", r.code, r.stdout, exitUsage)
			}
			lines := strings.SplitAfter(strings.TrimSuffix(r.stderr, "\n"), "\n")
			hint := "Run '" + tt.help + " --help' for usage."
			if len(lines) != 2 || !strings.Contains(lines[0], tt.says) || lines[1] != hint {
				t.Errorf("stderr %q; want the line %q and then %q", r.stderr, tt.says, hint)
			}
		})
	}
}

// ls and rm are what docker's habits teach: they name list and delete (or
// revoke) wherever those are.
func TestListAndDeleteAnswerToLsAndRm(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	if r := runBin(t, "", "session", "create", "s1", "--socket", d.Socket); r.code != exitOK {
		t.Fatalf("session create s1: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBin(t, "", "session", "ls", "--socket", d.Socket); r.code != exitOK || !strings.Contains(r.stdout, "s1") {
		t.Fatalf("session ls: exit %d, stdout %q, stderr %q; want a list naming s1", r.code, r.stdout, r.stderr)
	}
	if r := runBin(t, "", "session", "rm", "s1", "--socket", d.Socket); r.code != exitOK {
		t.Fatalf("session rm s1: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBin(t, "", "session", "show", "s1", "--socket", d.Socket); r.code == exitOK {
		t.Errorf("session show s1 after rm: exit 0, stdout %q; want it gone", r.stdout)
	}
	keys := runBin(t, "", "keys", "--help")
	if !strings.Contains(keys.stdout, "list, ls") || !strings.Contains(keys.stdout, "revoke, rm") {
		t.Errorf("keys --help: %q; want list, ls and revoke, rm", keys.stdout)
	}
}

func TestHelpCommandPrintsTheHelp(t *testing.T) {
	t.Parallel()
	r := runBin(t, "", "help")
	if r.code != exitOK || !strings.Contains(r.stdout, "USAGE:") || !strings.Contains(r.stdout, "events") {
		t.Errorf("localbus help: exit %d, stdout %q, stderr %q; want the help", r.code, r.stdout, r.stderr)
	}
	r = runBin(t, "", "help", "events")
	if r.code != exitOK || !strings.Contains(r.stdout, "localbus events - follow a stream of events") {
		t.Errorf("localbus help events: exit %d, stdout %q, stderr %q; want the help of events", r.code, r.stdout, r.stderr)
	}
}

// urfave/cli makes its shared help command its own subcommand when it
// runs it; the flags moved before a command, and the did-you-mean of a
// usage error, walk every command's flags and must still end.
func TestUsageErrorsAfterHelpRanInTheSameProcess(t *testing.T) {
	if r := runCLI(t, "help"); r.code != exitOK {
		t.Fatalf("localbus help: exit %d, stderr %q", r.code, r.stderr)
	}
	r := runCLI(t, "--sokcet", "/nonexistent", "status")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown flag --sokcet (did you mean "--socket"?)`) {
		t.Errorf("localbus --sokcet PATH status after help: exit %d, stderr %q; want the did-you-mean", r.code, r.stderr)
	}
	r = runCLI(t, "keys", "add", "--name", "ci")
	if r.code != exitUsage || !strings.Contains(r.stderr, "needs --name NAME and at least one --scope SCOPE") {
		t.Errorf("localbus keys add --name ci after help: exit %d, stderr %q; want the usage error", r.code, r.stderr)
	}
}

func TestVersionCommandAndFlagPrintTheSameLine(t *testing.T) {
	t.Parallel()
	cmd := runBin(t, "", "version")
	flag := runBin(t, "", "--version")
	if cmd.code != exitOK || flag.code != exitOK || cmd.stdout != flag.stdout || !strings.HasPrefix(cmd.stdout, "localbus ") || strings.Count(cmd.stdout, "\n") != 1 {
		t.Errorf("version: %d %q; --version: %d %q; want the same one line", cmd.code, cmd.stdout, flag.code, flag.stdout)
	}
}

func TestReorderArgsMovesOnlyTheLastCommandsFlags(t *testing.T) {
	app := &cli.App{Commands: []*cli.Command{{
		Name: "session",
		Subcommands: []*cli.Command{{
			Name:  "show",
			Flags: []cli.Flag{&cli.BoolFlag{Name: "json"}, &cli.StringFlag{Name: "socket", Aliases: []string{"S"}}},
		}},
	}, {Name: "raw", SkipFlagParsing: true}}}
	tests := []struct{ in, want string }{
		{"session show ID --json", "session show --json ID"},
		{"session show ID --socket S --json", "session show --socket S --json ID"},
		{"session show ID -S S", "session show -S S ID"},
		{"session show ID -SS", "session show -S S ID"},
		{"session show ID -S=S", "session show -S=S ID"},
		{"session show -json ID", "session show -json ID"},
		{"session show ID --socket=S", "session show --socket=S ID"},
		{"session show --json -- -ID", "session show --json -- -ID"},
		{"session show - --json", "session show --json -"},
		{"session show ID --socket", "session show ID --socket"},
		{"raw a --b", "raw a --b"},
		{"session show ID --generate-bash-completion", "session show ID --generate-bash-completion"},
		{"--help session", "--help session"},
		{"unknown a --b", "unknown a --b"},
		// Flags before the command are the command's.
		{"--socket S session show ID", "session show --socket S ID"},
		{"--socket=S session show ID --json", "session show --socket=S --json ID"},
		{"-S S --json session show ID", "session show -S S --json ID"},
		{"--json session show ID", "session show --json ID"},
		{"--frob session show ID", "session show --frob ID"},
		{"--socket session show", "session show --socket"},
		{"--socket S", "--socket S"},
		{"--socket S unknown", "--socket S unknown"},
		{"--version session", "--version session"},
		{"-h session show", "-h session show"},
	}
	for _, tt := range tests {
		got := reorderArgs(app, append([]string{"localbus"}, strings.Fields(tt.in)...))
		if want := append([]string{"localbus"}, strings.Fields(tt.want)...); !slices.Equal(got, want) {
			t.Errorf("reorderArgs(%q) = %q, want %q", tt.in, got[1:], want[1:])
		}
	}
}

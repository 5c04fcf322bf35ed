package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/localbus/localbus/internal/lbtest"
	"github.com/localbus/localbus/ipc/client"
)

// sessionEvents returns the first n events of session, in order, as
// "TYPE DATA [by ORIGINATOR]".
func sessionEvents(t *testing.T, d *lbtest.Daemon, session string, n int) []string {
	t.Helper()
	r := runBin(t, "", "events", "--socket", d.Socket, "--session", session, "--since", "0", "--raw", "--count", strconv.Itoa(n))
	if r.code != 0 {
		t.Fatalf("events: exit %d, stderr %q", r.code, r.stderr)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if l == "" {
			continue
		}
		var env struct {
			Type       string
			Data       json.RawMessage
			Originator string
		}
		if err := json.Unmarshal([]byte(l), &env); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		s := env.Type + " " + string(env.Data)
		if env.Originator != "" {
			s += " by " + env.Originator
		}
		out = append(out, s)
	}
	return out
}

func TestPublishFromArgumentsAndStdin(t *testing.T) {
	t.Parallel()
	d := lbtest.Start(t, lbtest.Options{})
	tests := []struct {
		name, stdin string
		args        []string
		stdout      string
	}{
		{"argument", "", []string{"build:step", `{"n": 1}`}, "published event 1 to session s\n"},
		{"no data is null", "", []string{"build:step"}, "published event 2 to session s\n"},
		{"data from stdin", "{\"n\":\n 3}\n", []string{"build:step", "-"}, "published event 3 to session s\n"},
		{"client id", "", []string{"--client-id", "ci-7", "build:done", "true"}, "published event 4 to session s\n"},
		{"json answer", "", []string{"--json", "build:done", "false"}, `{"ids":[5],"lastId":5}` + "\n"},
	}
	for _, tt := range tests { // in order: the ids are the session's
		args := append([]string{"publish", "--socket", d.Socket, "--session", "s"}, tt.args...)
		r := runBin(t, tt.stdin, args...)
		if r.code != 0 || r.stdout != tt.stdout || r.stderr != "" {
			t.Errorf("%s: localbus %s = exit %d, stdout %q, stderr %q; want 0, %q, nothing", tt.name, strings.Join(args, " "), r.code, r.stdout, r.stderr, tt.stdout)
		}
	}
	want := []string{`build:step {"n":1}`, "build:step null", `build:step {"n":3}`, "build:done true by ci-7", "build:done false"}
	if got := sessionEvents(t, d, "s", len(want)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("session s holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestPublishNDJSONBatchesEveryLine(t *testing.T) {
	t.Parallel()
	d := lbtest.Start(t, lbtest.Options{})
	const n = 2500 // more than one batch of 1000
	var in strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&in, "{\"type\":\"log:line\",\"data\":{\"i\":%d}}\n", i)
		if i%700 == 0 {
			in.WriteString("\n   \n") // blank lines are skipped
		}
	}
	r := runBin(t, in.String(), "publish", "--socket", d.Socket, "--session", "s")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// Every batch says which ids it got; together they are 1..n.
	lineRE := regexp.MustCompile(`^published (\d+) events? to session s: ids? (\d+)(?:–(\d+))?$`)
	next := uint64(1)
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		m := lineRE.FindStringSubmatch(l)
		if m == nil {
			// One event alone says "published event N to session s".
			m = regexp.MustCompile(`^published event (\d+) to session s$`).FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("stdout line %q", l)
			}
			m = []string{l, "1", m[1], m[1]}
		}
		count, _ := strconv.Atoi(m[1])
		first, _ := strconv.ParseUint(m[2], 10, 64)
		if count > 1000 || first != next {
			t.Fatalf("batch %q: want at most 1000 events starting at %d", l, next)
		}
		next += uint64(count)
	}
	if next != n+1 {
		t.Errorf("batches covered ids 1..%d, want 1..%d", next-1, n)
	}
	ctx := context.Background()
	c := apiClient(t, d)
	if info, err := c.Session(ctx, "s"); err != nil || info.LastID != n {
		t.Errorf("session s: %+v, %v; want lastId %d", info, err, n)
	}
}

func TestPublishFailuresSayOneLineWithTheirExitCode(t *testing.T) {
	t.Parallel()
	d := lbtest.Start(t, lbtest.Options{})
	refused := fakeDaemon(t, refusing)
	nowhere := filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		name, stdin string
		args        []string
		code        int
		says        string
	}{
		{"daemon down", "", []string{"--socket", nowhere, "--session", "s", "a:b", "1"}, exitUnreachable, "cannot reach the daemon: no socket at " + nowhere},
		{"refused", "", []string{"--socket", refused, "--session", "s", "a:b", "1"}, exitRefused, "refused by the daemon (401 unauthorized)"},
		{"bad JSON", "", []string{"--socket", d.Socket, "--session", "s", "a:b", `{"n":`}, exitUsage, "the data is not valid JSON"},
		{"bad JSON on stdin", `{"n"`, []string{"--socket", d.Socket, "--session", "s", "a:b", "-"}, exitUsage, "the data is not valid JSON"},
		{"reserved type", "", []string{"--socket", d.Socket, "--session", "s", "stream:ready"}, exitUsage, "family stream is reserved"},
		{"bad type", "", []string{"--socket", d.Socket, "--session", "s", "nocolon"}, exitUsage, `invalid type "nocolon"`},
		{"bad NDJSON line", "{\"type\":\"a:b\",\"data\":1}\n{\"type\":\"a:b\",\"data\":\n", []string{"--socket", d.Socket, "--session", "bad-ndjson"}, exitUsage, "line 2: not an event"},
		{"NDJSON without type", "{\"data\":1}\n", []string{"--socket", d.Socket, "--session", "bad-ndjson"}, exitUsage, `line 1: the event has no "type"`},
		{"NDJSON unknown field", "{\"type\":\"a:b\",\"dtaa\":1}\n", []string{"--socket", d.Socket, "--session", "bad-ndjson"}, exitUsage, `unknown field "dtaa"`},
		{"no events on stdin", "\n\n", []string{"--socket", d.Socket, "--session", "s"}, exitUsage, "no events on stdin"},
		{"NDJSON daemon down", "{\"type\":\"a:b\"}\n", []string{"--socket", nowhere, "--session", "s"}, exitUnreachable, "cannot reach the daemon"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runBin(t, tt.stdin, append([]string{"publish"}, tt.args...)...)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d; stderr %q", r.code, tt.code, r.stderr)
			}
			oneLine(t, "publish", r.stderr, tt.says)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
	// A bad line stops the batch it is in: nothing of it was published.
	c := apiClient(t, d)
	if _, err := c.Session(context.Background(), "bad-ndjson"); err == nil {
		t.Errorf("session bad-ndjson exists: an invalid batch published something")
	}
}

func TestPublishUsageErrorsShowHelpOnStderr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		says string
	}{
		{"no session", []string{"a:b"}, "--session is required"},
		{"too many arguments", []string{"--session", "s", "a:b", "1", "2"}, "too many arguments"},
		{"flag after the arguments", []string{"--session", "s", "a:b", "--json"}, "flags go before the arguments: move --json before \"a:b\""},
		{"unknown flag", []string{"--sesion", "s"}, "flag provided but not defined: -sesion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runBin(t, "", append([]string{"publish", "--socket", "/nonexistent/lb.sock"}, tt.args...)...)
			if r.code != exitUsage || r.stdout != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", r.code, r.stdout, exitUsage)
			}
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			if !strings.Contains(r.stderr, "USAGE:") || !strings.Contains(lines[len(lines)-1], tt.says) {
				t.Errorf("stderr %q: want the usage, then %q", r.stderr, tt.says)
			}
		})
	}
}

func TestSessionCommands(t *testing.T) {
	t.Parallel()
	d := lbtest.Start(t, lbtest.Options{})
	run := func(args ...string) binResult {
		t.Helper()
		return runBin(t, "", append([]string{"session", args[0], "--socket", d.Socket}, args[1:]...)...)
	}
	if r := run("list"); r.code != 0 || r.stdout != "no sessions\n" {
		t.Errorf("list of none: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := run("create", "--ring-size", "10", "b-17"); r.code != 0 || r.stdout != "created session b-17\n" {
		t.Errorf("create: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := run("create", "b-17"); r.code != exitUsage || !strings.Contains(r.stderr, "session already exists (409 session_exists)") {
		t.Errorf("create again: exit %d, stderr %q; want 1 and why", r.code, r.stderr)
	}
	r := run("create", "--json")
	var created client.SessionInfo
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil || created.ID == "" {
		t.Errorf("create without id: exit %d, stdout %q; want the new session as JSON", r.code, r.stdout)
	}
	r = run("show", "b-17")
	for _, want := range []string{"session      b-17", "last id      0", "earliest id  -", "ring         0 of 10 events", "subscribers  0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show: stdout %q lacks %q", r.stdout, want)
		}
	}
	r = run("list", "--json")
	var list struct{ Sessions []client.SessionInfo }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Sessions) != 2 {
		t.Errorf("list --json: exit %d, stdout %q; want 2 sessions", r.code, r.stdout)
	}
	if r := run("list"); !strings.HasPrefix(r.stdout, "SESSION  ") || !strings.Contains(r.stdout, "\nb-17 ") {
		t.Errorf("list: stdout %q; want a table with b-17", r.stdout)
	}
	if r := run("delete", "b-17"); r.code != 0 || r.stdout != "deleted session b-17\n" {
		t.Errorf("delete: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := run("show", "b-17"); r.code != exitUsage {
		t.Errorf("show of a deleted session: exit %d, want %d", r.code, exitUsage)
	} else {
		oneLine(t, "show", r.stderr, `no such session "b-17" (404 not_found)`)
	}
	if r := run("show"); r.code != exitUsage || !strings.HasSuffix(r.stderr, "missing arguments: want one session ID\n") {
		t.Errorf("show without id: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, args := range [][]string{{"session"}, {"session", "frobnicate"}} {
		r := runBin(t, "", args...)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "create, list, show or delete\n") {
			t.Errorf("localbus %s: exit %d, stdout %q, stderr %q; want 1 and the session usage on stderr", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
}

func TestStatusAndReload(t *testing.T) {
	t.Parallel()
	d := lbtest.Start(t, lbtest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "t:n", 1, 2)
	p := startBin(t, "events", "--socket", d.Socket, "--session", "s")
	waitSubscribers(t, c, "s", 1)

	r := runBin(t, "", "status", "--socket", d.Socket)
	for _, want := range []string{"localbus ", "(schema 1) at unix:" + d.Socket, "features: session_events", "1 session, 1 subscriber on sessions", "SESSION  LAST ID"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status: stdout %q lacks %q", r.stdout, want)
		}
	}
	r = runBin(t, "", "status", "--socket", d.Socket, "--json")
	var st struct {
		Address  string
		Caps     client.Caps
		Sessions []client.SessionInfo
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st.Caps.SchemaVersion != 1 || len(st.Sessions) != 1 || st.Sessions[0].Subscribers != 1 {
		t.Errorf("status --json: exit %d, stdout %q", r.code, r.stdout)
	}

	if r := runBin(t, "", "reload", "--socket", d.Socket); r.code != 0 || r.stdout != "reloaded\n" {
		t.Errorf("reload: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	p.waitStderr(t, "localbus: the daemon is reloading its configuration; reconnecting")
	p.waitStderr(t, "localbus: reconnected; resuming after event 2")

	nowhere := filepath.Join(t.TempDir(), "none.sock")
	for _, cmd := range []string{"status", "reload"} {
		r := runBin(t, "", cmd, "--socket", nowhere)
		if r.code != exitUnreachable {
			t.Errorf("%s with no daemon: exit %d, want %d", cmd, r.code, exitUnreachable)
		}
		oneLine(t, cmd, r.stderr, "cannot reach the daemon")
	}
	refused := fakeDaemon(t, refusing)
	if r := runBin(t, "", "reload", "--socket", refused); r.code != exitRefused {
		t.Errorf("reload refused: exit %d, want %d; stderr %q", r.code, exitRefused, r.stderr)
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	d := lbtest.Start(t, lbtest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "build-17", "t:n", 1, 1)
	for shell, want := range map[string]string{"bash": "complete -o bashdefault", "zsh": "compdef _localbus localbus", "fish": "complete -c localbus"} {
		if r := runBin(t, "", "completion", shell); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s: exit %d, stdout lacks %q", shell, r.code, want)
		}
	}
	if r := runBin(t, "", "--generate-bash-completion"); !strings.Contains(r.stdout, "events\n") || !strings.Contains(r.stdout, "publish\n") {
		t.Errorf("commands completion = %q", r.stdout)
	}
	if r := runBin(t, "", "session", "show", "--socket", d.Socket, "--generate-bash-completion"); r.stdout != "build-17\n" {
		t.Errorf("session show completion = %q, want the session ids", r.stdout)
	}
	if r := runBin(t, "", "events", "--socket", d.Socket, "--session", "--generate-bash-completion"); r.stdout != "build-17\n" {
		t.Errorf("--session completion = %q, want the session ids", r.stdout)
	}
	if r := runBin(t, "", "events", "--tr", "--generate-bash-completion"); !strings.Contains(r.stdout, "--transport") {
		t.Errorf("flag completion = %q, want --transport", r.stdout)
	}
}

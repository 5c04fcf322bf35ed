package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/client"
)

// sessionEvents returns the first n events of session, in order, as
// "TYPE DATA [by ORIGINATOR]".
func sessionEvents(t *testing.T, d *daemontest.Daemon, session string, n int) []string {
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
	d := daemontest.Start(t, daemontest.Options{})
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

// ndjsonLines returns n NDJSON events of type log:line with data
// {"i":1} to {"i":n}, and blank lines here and there.
func ndjsonLines(n int) string {
	var in strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&in, "{\"type\":\"log:line\",\"data\":{\"i\":%d}}\n", i)
		if i%700 == 0 {
			in.WriteString("\n   \n") // blank lines are skipped
		}
	}
	return in.String()
}

// TestPublishNDJSONIsOneRequest: 2500 lines, more than a batch may hold,
// go in one streaming request (its reply counts them all) and arrive in
// order, each once.
func TestPublishNDJSONIsOneRequest(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	const n = 2500
	in := ndjsonLines(n)

	r := runBin(t, in, "publish", "--socket", d.Socket, "--session", "s", "--json")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// A batch holds at most 1000 events: one reply that counts 2500 is
	// one request.
	var reply client.StreamReply
	if err := json.Unmarshal([]byte(r.stdout), &reply); err != nil || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("stdout %q: want one JSON reply (%v)", r.stdout, err)
	}
	if diff := cmp.Diff(client.StreamReply{Count: n, FirstID: 1, LastID: n}, reply); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	got := sessionEvents(t, d, "s", n)
	for i, e := range got {
		if want := fmt.Sprintf(`log:line {"i":%d}`, i+1); e != want {
			t.Fatalf("event %d = %s, want %s", i+1, e, want)
		}
	}
	c := apiClient(t, d)
	if info, err := c.Session(context.Background(), "s"); err != nil || info.LastID != n {
		t.Errorf("session s: %+v, %v; want lastId %d: each event once", info, err, n)
	}

	// Without --json, one line says it all.
	r = runBin(t, in, "publish", "--socket", d.Socket, "--session", "s")
	if want := fmt.Sprintf("published %d events to session s: ids %d–%d\n", n, n+1, 2*n); r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, %q, nothing", r.code, r.stdout, r.stderr, want)
	}
}

// TestPublishNDJSONPublishesEachLineAsItArrives: with a producer that
// writes a line only once the one before has reached a subscriber, every
// event is published while stdin is still open.
func TestPublishNDJSONPublishesEachLineAsItArrives(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	if _, err := c.CreateSession(ctx, "s", 0); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stream(ctx, client.StreamOptions{Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	cmd := exec.CommandContext(ctx, daemontest.Binary(t), "publish", "--socket", d.Socket, "--session", "s")
	cmd.Env = cliEnv()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait() // after stdin is closed, below or at the end
	defer stdin.Close()
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(stdin, "{\"type\":\"log:line\",\"data\":%d}\n", i)
		for {
			f, err := st.Next(ctx)
			if err != nil {
				t.Fatalf("waiting for event %d while stdin is open: %v; stderr %q", i, err, errb.String())
			}
			if f.Reserved() {
				continue
			}
			if f.ID != uint64(i) {
				t.Fatalf("got event %d, want %d", f.ID, i)
			}
			break
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil || out.String() != "published 3 events to session s: ids 1–3\n" {
		t.Errorf("localbus publish: %v, stdout %q, stderr %q", err, out.String(), errb.String())
	}
}

// TestPublishNDJSONStopsAtARefusedLine: the lines before a refused one
// stay published, and one line on stderr says which line was refused and
// what was published before it; a line of a family the key may not
// publish is a refusal (exit 3).
func TestPublishNDJSONStopsAtARefusedLine(t *testing.T) {
	t.Parallel()
	d, keys, base := startDaemon(t, "")
	add := runBin(t, "", "keys", "add", "--keys-file", keys, "--socket", d.Socket, "--name", "log", "--scope", "publish:log")
	if add.code != 0 {
		t.Fatalf("keys add: exit %d, stderr %q", add.code, add.stderr)
	}
	key := strings.TrimSpace(add.stdout)
	good := func(i int) string { return fmt.Sprintf("{\"type\":\"log:line\",\"data\":%d}\n", i) }
	tests := []struct {
		name, session, stdin string
		args                 []string
		code                 int
		says                 string
		before               uint64 // events published before the refused line
	}{
		{"malformed", "bad-1", good(1) + "\n" + good(2) + "{\"type\":\"log:line\",\"data\":\n" + good(4), nil, exitUsage,
			`line 4: want {"type":"family:name","data":…}: unexpected EOF (400 invalid_event); the 2 events before it were published (ids 1–2)`, 2},
		{"unknown field", "bad-2", good(1) + `{"type":"log:line","dtaa":1}` + "\n", nil, exitUsage,
			`line 2: want {"type":"family:name","data":…}: json: unknown field "dtaa" (400 invalid_event)`, 1},
		{"first line", "bad-3", "{\"data\":1}\n" + good(2), nil, exitUsage,
			"line 1: invalid type", 0},
		{"reserved type", "bad-4", good(1) + `{"type":"stream:ready"}` + "\n", nil, exitUsage,
			`line 2: invalid type "stream:ready": family stream is reserved`, 1},
		{"forbidden family", "bad-5", good(1) + `{"type":"secret:x"}` + "\n", []string{"--url", base, "--key", key}, exitRefused,
			"refused by the daemon: line 2: this caller may not publish family secret (403 forbidden); the event before it was published (id 1)", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn := tt.args
			if conn == nil {
				conn = []string{"--socket", d.Socket}
			}
			r := runBin(t, tt.stdin, append(append([]string{"publish"}, conn...), "--session", tt.session)...)
			if r.code != tt.code || r.stdout != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", r.code, r.stdout, tt.code)
			}
			oneLine(t, "publish", r.stderr, tt.says)
			info, err := apiClient(t, d).Session(context.Background(), tt.session)
			if (err != nil) != (tt.before == 0) || info.LastID != tt.before {
				t.Errorf("session %s: lastId %d (%v), want %d: the lines before the refused one", tt.session, info.LastID, err, tt.before)
			}
		})
	}
}

func TestPublishFailuresSayOneLineWithTheirExitCode(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
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
		{"no events on stdin", "\n\n", []string{"--socket", d.Socket, "--session", "s"}, exitUsage, "no events on stdin"},
		{"NDJSON daemon down", "{\"type\":\"a:b\"}\n", []string{"--socket", nowhere, "--session", "s"}, exitUnreachable, "cannot reach the daemon"},
		{"NDJSON refused", "{\"type\":\"a:b\"}\n", []string{"--socket", refused, "--session", "s"}, exitRefused, "refused by the daemon (401 unauthorized)"},
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
}

func TestPublishUsageErrorsPointAtTheHelpOnStderr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		says string
	}{
		{"no session", []string{"a:b"}, "--session is required"},
		{"too many arguments", []string{"--session", "s", "a:b", "1", "2"}, "too many arguments"},
		{"unknown flag", []string{"--sesion", "s"}, `unknown flag --sesion (did you mean "--session"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runBin(t, "", append([]string{"publish", "--socket", "/nonexistent/lb.sock"}, tt.args...)...)
			if r.code != exitUsage || r.stdout != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", r.code, r.stdout, exitUsage)
			}
			want := "localbus: " + tt.says + "\nRun 'localbus publish --help' for usage.\n"
			if !strings.Contains(r.stderr, tt.says) || !strings.HasSuffix(r.stderr, "Run 'localbus publish --help' for usage.\n") || strings.Count(r.stderr, "\n") != 2 {
				t.Errorf("stderr %q: want %q", r.stderr, want)
			}
		})
	}
}

func TestSessionShowAndStatusReportTheJournal(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{Durable: true})
	if r := runBin(t, "", "publish", "--socket", d.Socket, "--session", "j", "job:done", `{"ok":true}`); r.code != 0 {
		t.Fatalf("publish: exit %d, stderr %q", r.code, r.stderr)
	}
	r := runBin(t, "", "session", "show", "--socket", d.Socket, "j")
	if !regexp.MustCompile(`durability\s+\d+(\.\d+)? ([KMG]iB|bytes) on disk, synced through id 1\n`).MatchString(r.stdout) {
		t.Errorf("session show: stdout %q; want the journal's figures", r.stdout)
	}
	r = runBin(t, "", "status", "--socket", d.Socket)
	if !strings.Contains(r.stdout, "journal: ") || !strings.Contains(r.stdout, "on disk for 1 session\n") {
		t.Errorf("status: stdout %q; want the journal's size", r.stdout)
	}
}

func TestSessionCommands(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
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
	for _, want := range []string{"session      b-17", "last id      0", "earliest id  -", "ring         0 of 10 events", "subscribers  0", "durability   memory only"} {
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
	if r := run("show"); r.code != exitUsage || r.stderr != "localbus: missing arguments: want one session ID\nRun 'localbus session show --help' for usage.\n" {
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
	d := daemontest.Start(t, daemontest.Options{})
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

	// A change the running daemon cannot take is named on stderr; the
	// reload still succeeds for the rest.
	d.WriteConfig(t, "listen_tcp = \"127.0.0.1:0\"\nidle_timeout = \"1m\"\nmax_sessions = 7\n")
	r = runBin(t, "", "reload", "--socket", d.Socket)
	if r.code != 0 || r.stdout != "reloaded\n" || r.stderr != "these changed settings keep their running values until the daemon restarts: listen_tcp, idle_timeout\n" {
		t.Errorf("reload with restart-only changes: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if caps, err := c.Caps(t.Context()); err != nil || caps.Limits.MaxSessions != 7 {
		t.Errorf("after the reload: max_sessions %+v, %v; want 7 applied", caps.Limits, err)
	}

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
	d := daemontest.Start(t, daemontest.Options{})
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
	if r := runBin(t, "", "events", "--socket", d.Socket, "--session", "build-17", "--consumer", "backup", "--count", "1"); r.code != exitOK {
		t.Fatalf("events --consumer backup: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBin(t, "", "events", "--socket", d.Socket, "--session", "build-17", "--consumer", "--generate-bash-completion"); r.stdout != "backup\n" {
		t.Errorf("--consumer completion = %q, want the session's consumers", r.stdout)
	}
	for _, flag := range []string{"--consumer", "--ack", "--exec"} {
		if r := runBin(t, "", "events", flag[:4], "--generate-bash-completion"); !strings.Contains(r.stdout, flag+"\n") {
			t.Errorf("flag completion of %s = %q, want %s", flag[:4], r.stdout, flag)
		}
	}
}

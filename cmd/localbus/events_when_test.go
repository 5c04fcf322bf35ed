package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/daemon/daemontest"
)

// dataLines returns the data of each line of --format '{{.Data}}' output.
func dataLines(out string) []string {
	return strings.Fields(out)
}

func TestEventsTailPrintsTheLastNThenFollows(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "build:step", 1, 6)
	publishData(t, c, "s", "job:done", 7, 7)
	publishData(t, c, "s", "build:step", 8, 8)
	publishData(t, c, "other", "build:step", 9, 9)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"-n1", []string{"--session", "s", "-n1"}, "8"},
		{"-n 3", []string{"--session", "s", "-n", "3"}, "6 7 8"},
		{"-n=2", []string{"--session", "s", "-n=2"}, "7 8"},
		{"--tail 2", []string{"--session", "s", "--tail", "2"}, "7 8"},
		{"more than the ring holds", []string{"--session", "s", "-n", "100"}, "1 2 3 4 5 6 7 8"},
		{"filtered", []string{"--session", "s", "--types", "build:step", "-n2"}, "6 8"},
		{"family", []string{"--family", "build", "-n2"}, "8 9"},
		{"over websocket", []string{"--session", "s", "-n2", "--transport", "ws"}, "7 8"},
	}
	t.Run("tail", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				args := append([]string{"events", "--socket", d.Socket, "--format", "{{.Data}}", "--timeout", "1s"}, tt.args...)
				r := runBin(t, "", args...)
				if got := strings.Join(dataLines(r.stdout), " "); r.code != 0 || got != tt.want || r.stderr != "" {
					t.Errorf("localbus %s: exit %d, events %q, stderr %q; want %q and nothing on stderr", strings.Join(args, " "), r.code, got, r.stderr, tt.want)
				}
			})
		}
	})

	// Then it follows, and the tail counts toward --count.
	p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "-n2", "--count", "3", "--format", "{{.Data}}")
	if a, b := p.line(t), p.line(t); a != "7" || b != "8" {
		t.Fatalf("-n2: first lines %q %q, want 7 and 8", a, b)
	}
	waitSubscribers(t, c, "s", 1)
	publishData(t, c, "s", "build:step", 10, 11)
	lines, code := p.drainExit(t)
	if code != 0 || strings.Join(lines, " ") != "10" {
		t.Errorf("-n2 --count 3 then two more events: exit %d, then %q; want 0 after 10 alone", code, lines)
	}
}

func TestEventsRefusesAnIDAboveLastIDWithTheTimeForms(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "build:step", 1, 3)
	tests := []struct {
		name string
		args []string
		says string
	}{
		{"since on a session", []string{"--session", "s", "--since", "1764643500"}, `--since 1764643500 is an event id, and session "s"'s last event id is 3; for a time, give @1764643500 (Unix seconds), a duration (10m) or an RFC 3339 time`},
		{"just above", []string{"--session", "s", "--since", "4", "--transport", "ws"}, `--since 4 is an event id, and session "s"'s last event id is 3`},
		{"until on a session", []string{"--session", "s", "--since", "0", "--until", "1764643500"}, `--until 1764643500 is an event id`},
		{"since on a family", []string{"--family", "build", "--since", "1764643500"}, `the global bus (which family "build" streams use)'s last event id is`},
		{"since on the global bus", []string{"--since", "1764643500"}, `the global bus's last event id is`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"events", "--socket", d.Socket}, tt.args...)
			r := runBin(t, "", args...)
			if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, tt.says) {
				t.Errorf("localbus %s: exit %d, stdout %q, stderr %q; want exit 1, nothing printed, and %q", strings.Join(args, " "), r.code, r.stdout, r.stderr, tt.says)
			}
			if strings.Contains(r.stderr, "lost") || strings.Contains(r.stderr, "restarted") {
				t.Errorf("localbus %s: stderr %q speaks of a restart or a loss that did not happen", strings.Join(args, " "), r.stderr)
			}
		})
	}
	// The bus is unaffected, and an id it has is still fine.
	r := runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--since", "3", "--timeout", "300ms")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("--since 3 (the last id): exit %d, stderr %q", r.code, r.stderr)
	}
	// An id of an old epoch is a real restart of the id sequence, not a
	// mistyped time.
	r = runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--since", "1764643500", "--epoch", "an-old-epoch", "--count", "3", "--format", "{{.Data}}")
	if r.code != 0 || r.stdout != "1\n2\n3\n" || !strings.Contains(r.stderr, "restarted its event ids") {
		t.Errorf("--since 1764643500 --epoch an-old-epoch: exit %d, stdout %q, stderr %q; want the gap reported and the whole ring", r.code, r.stdout, r.stderr)
	}
}

func TestEventsSinceAndUntilTakeIDsDurationsTimesAndUnixSeconds(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "build:step", 1, 2)
	mark := time.Now()
	for !time.Now().After(mark.Add(2 * time.Millisecond)) {
		time.Sleep(time.Millisecond) // waiting for the clock to move past mark, not for another process
	}
	publishData(t, c, "s", "build:step", 3, 4)
	unix := "@" + strconvSeconds(mark.Add(time.Millisecond))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"ids", []string{"--since", "1", "--until", "3"}, "2 3"},
		{"until the last id", []string{"--since", "0", "--until", "4"}, "1 2 3 4"},
		{"unix seconds", []string{"--since", unix, "--count", "2"}, "3 4"},
		{"until unix seconds", []string{"--since", "0", "--until", unix}, "1 2"},
		{"until an RFC 3339 time", []string{"--since", "0", "--until", mark.Format(time.RFC3339Nano)}, "1 2"},
		{"until a duration", []string{"--since", "1h", "--until", "1s"}, "1 2 3 4"},
		{"until a time long past, live", []string{"--until", "1h"}, ""},
		{"until an id, live", []string{"--until", "4"}, ""},
		{"tail until", []string{"-n", "3", "--until", "3"}, "2 3"},
	}
	t.Run("forms", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				for _, tr := range []string{"sse", "ws"} {
					// No --timeout: --until (or --count) alone must end the command.
					args := append([]string{"events", "--socket", d.Socket, "--session", "s", "--format", "{{.Data}}", "--transport", tr}, tt.args...)
					r := runBin(t, "", args...)
					if got := strings.Join(dataLines(r.stdout), " "); r.code != 0 || got != tt.want {
						t.Errorf("localbus %s: exit %d, events %q, stderr %q; want %q", strings.Join(args, " "), r.code, got, r.stderr, tt.want)
					}
				}
			})
		}
	})

	// --until a time ahead: follows until the clock passes it, then exits 0.
	until := time.Now().Add(1500 * time.Millisecond)
	p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--format", "{{.Data}}", "--until", until.Format(time.RFC3339Nano))
	waitSubscribers(t, c, "s", 1)
	publishData(t, c, "s", "build:step", 5, 5)
	if l := p.line(t); l != "5" {
		t.Fatalf("--until in a second: line %q, want 5", l)
	}
	lines, code := p.drainExit(t)
	if code != 0 || len(lines) != 0 || time.Now().Before(until) {
		t.Errorf("--until in a second: exit %d with %q at %v; want exit 0 once %v passed", code, lines, time.Now(), until)
	}
}

// strconvSeconds writes t as Unix seconds with milliseconds.
func strconvSeconds(t time.Time) string {
	ms := t.UnixMilli()
	return fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
}

func TestEventsFormatJSONAndTheGlobalIDColumn(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "build:step", 1, 2)

	r := runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--count", "2", "--format", "json")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("--format json: exit %d, stdout %q; want two lines", r.code, r.stdout)
	}
	for i, l := range lines {
		var env bus.Envelope
		if err := json.Unmarshal([]byte(l), &env); err != nil || env.ID != uint64(i+1) || string(env.Data) != strconv.Itoa(i+1) {
			t.Errorf("--format json line %d = %q (%v), want the envelope of event %d", i+1, l, err, i+1)
		}
	}

	// A family stream's ids are the global bus's: the column says so.
	r = runBin(t, "", "events", "--socket", d.Socket, "--family", "build", "--since", "0", "--count", "2")
	lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("--family: exit %d, stdout %q", r.code, r.stdout)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) < 5 || f[2] != "s" || !strings.HasPrefix(f[3], "global:") {
			t.Errorf("--family line %q: want TIME  s  global:ID  TYPE  DATA", l)
		}
	}
	r = runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--count", "1")
	if strings.Contains(r.stdout, "global:") {
		t.Errorf("--session line %q labels the session's own id as global", r.stdout)
	}
}

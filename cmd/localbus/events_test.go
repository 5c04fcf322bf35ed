package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/client"
)

func TestEventsCountRawPrintsExactlyNEnvelopes(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "build:step", 1, 5)

	for _, tr := range []string{"sse", "ws"} {
		t.Run("replay/"+tr, func(t *testing.T) {
			r := runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--count", "3", "--raw", "--transport", tr)
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if len(lines) != 3 {
				t.Fatalf("stdout has %d lines, want 3:\n%s", len(lines), r.stdout)
			}
			for i, l := range lines {
				var env bus.Envelope
				if err := json.Unmarshal([]byte(l), &env); err != nil || env.ID != uint64(i+1) || env.Type != "build:step" {
					t.Errorf("line %d = %q, want the envelope of event %d", i+1, l, i+1)
				}
			}
		})
	}

	t.Run("live", func(t *testing.T) {
		p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--count", "2", "--raw")
		waitSubscribers(t, c, "s", 1)
		publishData(t, c, "s", "build:step", 6, 9)
		lines, code := p.drainExit(t)
		if code != 0 || len(lines) != 2 {
			t.Fatalf("exit %d with %d lines, want 0 with 2: %q", code, len(lines), lines)
		}
		for i, l := range lines {
			var env bus.Envelope
			if json.Unmarshal([]byte(l), &env) != nil || env.ID != uint64(6+i) {
				t.Errorf("line %d = %q, want event %d", i+1, l, 6+i)
			}
		}
	})
}

// peopleLine is a line of localbus events for people: local time,
// session, id, type, data.
var peopleLine = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})  (\S+) *   *((?:global:)?\d+)  (\S+) *  (.*)$`)

func TestEventsPrintsTimeSessionIDTypeDataInAlignedColumns(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "build:step", 7, 7)
	publishData(t, c, "a-longer-session", "build:a-much-longer-type", 8, 15)
	publishData(t, c, "s", "build:step", 16, 16)

	r := runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--count", "2")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("exit %d, stdout %q; want 2 lines", r.code, r.stdout)
	}
	m := peopleLine.FindStringSubmatch(lines[0])
	if m == nil || m[2] != "s" || m[3] != "1" || m[4] != "build:step" || m[5] != "7" {
		t.Fatalf("line %q, want TIME  s  1  build:step  7", lines[0])
	}
	when, err := time.ParseInLocation("2006-01-02 15:04:05.000", m[1], time.Local)
	if err != nil || time.Since(when) > time.Hour || time.Since(when) < -time.Minute {
		t.Errorf("time %q (%v) is not the local time of a moment ago", m[1], err)
	}

	// Across sessions: each column starts where it started on the lines
	// above, however long the values before it.
	r = runBin(t, "", "events", "--socket", d.Socket, "--family", "build", "--since", "0", "--count", "10")
	lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 10 {
		t.Fatalf("family stream: exit %d, stdout %q; want 10 lines", r.code, r.stdout)
	}
	dataCol := strings.Index(lines[1], "  8")
	for i, l := range lines {
		m := peopleLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %q is not TIME  SESSION  ID  TYPE  DATA", l)
		}
		if i >= 1 && strings.LastIndex(l, "  ")+2 != dataCol+2 {
			t.Errorf("line %d %q: data starts at column %d, want %d (aligned with the line above)", i+1, l, strings.LastIndex(l, "  ")+2, dataCol+2)
		}
	}
}

func TestEventsFormatIsAGoTemplateOverTheEnvelope(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "build:step", 7, 7)
	r := runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--count", "1",
		"--format", `{{.ID}} {{.Session}} {{upper .Type}} {{.Data}} {{json .Data}} {{.Time.Format "2006"}} {{.Timestamp}}`)
	want := regexp.MustCompile(`^1 s BUILD:STEP 7 7 \d{4} \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\n$`)
	if r.code != 0 || !want.MatchString(r.stdout) {
		t.Errorf("--format: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--count", "1", "--format", `{{json .}}`)
	var env bus.Envelope
	if err := json.Unmarshal([]byte(r.stdout), &env); r.code != 0 || err != nil || env.ID != 1 || string(env.Data) != "7" {
		t.Errorf("--format '{{json .}}': exit %d, stdout %q (%v); want the envelope", r.code, r.stdout, err)
	}
	// Refused before the stream opens, in the user's words: no Go type
	// names, the fields there are.
	for bad, says := range map[string]string{
		`{{.Nope}`:  "--format: line 1: bad character",
		`{{.Nope}}`: "--format: an event has no field .Nope; it has {{.ID}} {{.V}} {{.Type}}",
	} {
		r := runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--count", "1", "--format", bad)
		if r.code != exitUsage || !strings.Contains(r.stderr, says) || strings.Contains(r.stderr, "main.") {
			t.Errorf("--format %q: exit %d, stderr %q; want 1 and %q", bad, r.code, r.stderr, says)
		}
	}
}

func TestEventsSinceTakesADurationOrATime(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--ring-size", "3"}})
	c := apiClient(t, d)
	publishData(t, c, "old", "build:step", 1, 2)
	mark := time.Now()
	for !time.Now().After(mark.Add(2 * time.Millisecond)) {
		time.Sleep(time.Millisecond) // waiting for the clock to move past mark, not for another process
	}
	publishData(t, c, "old", "build:step", 3, 4)

	// Events 3 and 4 were published after mark, 1 and 2 before.
	since := mark.Add(time.Millisecond).Format(time.RFC3339Nano)
	r := runBin(t, "", "events", "--socket", d.Socket, "--session", "old", "--since", since, "--count", "2", "--format", "{{.Data}}")
	if r.code != 0 || r.stdout != "3\n4\n" || r.stderr != "" {
		t.Errorf("--since %s: exit %d, stdout %q, stderr %q; want 3 and 4", since, r.code, r.stdout, r.stderr)
	}
	// An hour ago: before everything, but the ring (3 events) has lost
	// event 1, which may have been that recent: a gap, then what is left.
	r = runBin(t, "", "events", "--socket", d.Socket, "--session", "old", "--since", "1h", "--count", "3", "--format", "{{.Data}}")
	if r.code != 0 || r.stdout != "2\n3\n4\n" || !strings.Contains(r.stderr, "missed") && !strings.Contains(r.stderr, "gap") {
		t.Errorf("--since 1h: exit %d, stdout %q, stderr %q; want a gap reported, then 2, 3 and 4", r.code, r.stdout, r.stderr)
	}
	if r := runBin(t, "", "events", "--socket", d.Socket, "--session", "old", "--since", "yesterday"); r.code != exitUsage || !strings.Contains(r.stderr, "a duration (10m: ten minutes ago), an RFC 3339 time") {
		t.Errorf("--since yesterday: exit %d, stderr %q", r.code, r.stderr)
	}
}

// numbers reads n lines of --raw output and returns each event's data, a
// number the test published.
func numbers(t *testing.T, p *proc, n int) []int {
	t.Helper()
	var out []int
	for _, env := range p.envelopes(t, n) {
		v, err := strconv.Atoi(string(env.Data))
		if err != nil {
			t.Fatalf("event %d has data %s, want a number", env.ID, env.Data)
		}
		out = append(out, v)
	}
	return out
}

// checkSequence fails unless got is from..to, each once, in order.
func checkSequence(t *testing.T, got []int, from, to int) {
	t.Helper()
	if len(got) != to-from+1 {
		t.Errorf("got %d events, want %d", len(got), to-from+1)
	}
	for i, v := range got {
		if v != from+i {
			t.Fatalf("event %d carries %d, want %d: events lost or repeated", i, v, from+i)
		}
	}
}

func TestEventsKeepsEveryEventOnceAcrossReload(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{"sse", "ws"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := daemontest.Start(t, daemontest.Options{})
			c := apiClient(t, d)
			publishData(t, c, "s", "t:n", 1, 5)
			p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--raw", "--transport", tr)
			got := numbers(t, p, 5)

			// Publish while the daemon reloads (SIGHUP), so events land
			// while the client is away.
			const total = 300
			var wg sync.WaitGroup
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
				defer cancel()
				for n := 6; n <= total; n++ {
					if _, err := c.Publish(ctx, "s", "t:n", n); err != nil {
						t.Errorf("publish %d: %v", n, err)
						return
					}
					if n == 100 {
						d.Signal(t, syscall.SIGHUP)
					}
				}
			})
			got = append(got, numbers(t, p, total-5)...)
			wg.Wait()
			checkSequence(t, got, 1, total)
			p.waitStderr(t, "localbus: the daemon is reloading its configuration; reconnecting")
			if strings.Contains(p.Stderr(), "gap") {
				t.Errorf("stderr reports a gap across a reload:\n%s", p.Stderr())
			}
		})
	}
}

func TestEventsReportsTheEpochResetOfARestartedDaemon(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{"sse", "ws"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			d := daemontest.Start(t, daemontest.Options{Dir: dir})
			c := apiClient(t, d)
			publishData(t, c, "s", "t:n", 1, 3)
			p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--raw", "--transport", tr)
			got := numbers(t, p, 3)

			// Restart: SIGTERM, then a new daemon on the same socket with
			// the same configuration. It keeps nothing (durability
			// "memory"), so session s is back only with the next publish,
			// at id 1 on a new epoch.
			d.Stop(t)
			if err := d.Wait(t, e2eWait); err != nil {
				t.Fatalf("daemon exit: %v", err)
			}
			p.waitStderr(t, "localbus: the daemon is shutting down; reconnecting when it is back")
			d2 := daemontest.Start(t, daemontest.Options{Dir: dir, Socket: d.Socket})
			c2 := apiClient(t, d2)
			p.waitStderr(t, `session "s" does not exist (yet); retrying`)
			publishData(t, c2, "s", "t:n", 4, 6)

			envs := p.envelopes(t, 3)
			for i, env := range envs {
				if env.ID != uint64(i+1) {
					t.Errorf("after the restart: event id %d, want %d (a new sequence)", env.ID, i+1)
				}
				n, _ := strconv.Atoi(string(env.Data))
				got = append(got, n)
			}
			checkSequence(t, got, 1, 6)
			p.waitStderr(t, "localbus: gap: the bus restarted its event ids")
			if !strings.Contains(p.Stderr(), "events after 3 of the old sequence") {
				t.Errorf("the gap does not say where the old sequence stopped:\n%s", p.Stderr())
			}
		})
	}
}

// bigEvents publishes n events of about 2 KiB each, with data {"n":N,...}
// for N from..from+n-1, in batches.
func bigEvents(t *testing.T, c *client.Client, session string, from, n int) {
	t.Helper()
	pad := strings.Repeat("x", 2<<10)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	for start := from; start < from+n; start += 100 {
		var events []client.Event
		for k := start; k < min(start+100, from+n); k++ {
			events = append(events, client.Event{Type: "t:big", Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, k, pad))})
		}
		if _, err := c.PublishBatch(ctx, session, events); err != nil {
			t.Fatal(err)
		}
	}
}

// evictCLI starts "localbus events" on session s from the start and, once
// it follows, publishes n−1 more big events in batches of 100. The daemon
// queues at most 16 live events per reader, so each batch that arrives
// while the command is connected evicts it: it gets stream:lagged and must
// reconnect and resume.
func evictCLI(t *testing.T, d *daemontest.Daemon, c *client.Client, n int) *proc {
	t.Helper()
	bigEvents(t, c, "s", 1, 1)
	p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--since", "0", "--raw")
	p.envelopes(t, 1)
	waitSubscribers(t, c, "s", 1)
	bigEvents(t, c, "s", 2, n-1)
	return p
}

func TestEventsRecoversFromItsOwnEvictionWithoutLoss(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-queued", "16"}})
	c := apiClient(t, d)
	const n = 400
	p := evictCLI(t, d, c, n)
	var got []int
	for _, env := range p.envelopes(t, n-1) {
		var data struct{ N int }
		json.Unmarshal(env.Data, &data)
		got = append(got, data.N)
	}
	checkSequence(t, got, 2, n)
	p.waitStderr(t, "localbus: the daemon dropped this stream because it fell behind: 16 events were waiting unread (the limit is 16); reconnecting to catch up")
	if strings.Contains(p.Stderr(), "gap") {
		t.Errorf("stderr reports a gap though the ring held every event:\n%s", p.Stderr())
	}
}

func TestEventsReportsAGapWhenTheRingLostEvents(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-queued", "16", "--ring-size", "50"}})
	c := apiClient(t, d)
	const n = 400
	p := evictCLI(t, d, c, n)
	var ids []uint64
	for len(ids) == 0 || ids[len(ids)-1] < n {
		ids = append(ids, p.envelopes(t, 1)[0].ID)
	}
	// The first eviction comes within the first batch, long before the
	// ring of 50 lets go of the command's cursor: there is a gap. Every
	// event is printed once, in order, or lies in a gap reported on
	// stderr; nothing else.
	p.waitStderr(t, "localbus: gap:")
	gapRE := regexp.MustCompile(`localbus: gap: events (\d+)–(\d+) are no longer available \(the daemon's ring evicted them\); continuing from (\d+)\n`)
	lost := map[uint64]bool{}
	for _, m := range gapRE.FindAllStringSubmatch(p.Stderr(), -1) {
		first, _ := strconv.ParseUint(m[1], 10, 64)
		last, _ := strconv.ParseUint(m[2], 10, 64)
		next, _ := strconv.ParseUint(m[3], 10, 64)
		if next != last+1 || first > last {
			t.Errorf("gap %q does not continue right after it", m[0])
		}
		for id := first; id <= last; id++ {
			lost[id] = true
		}
	}
	if len(lost) == 0 {
		t.Fatalf("stderr does not report the gap in plain words:\n%s", p.Stderr())
	}
	want := uint64(2)
	for _, id := range ids {
		for lost[want] {
			want++
		}
		if id != want {
			t.Fatalf("printed event %d where %d was due (lost: %d events)", id, want, len(lost))
		}
		want++
	}
}

func TestEventsWaitsForASessionNotCreatedYet(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	p := startBin(t, "events", "--socket", d.Socket, "--session", "later", "--types", "build:done", "--count", "1", "--wait")
	p.waitStderr(t, `localbus: session "later" does not exist (yet); retrying in`)
	publishData(t, c, "later", "build:step", 1, 2)
	publishData(t, c, "later", "build:done", 3, 3)
	lines, code := p.drainExit(t)
	if m := peopleLine.FindStringSubmatch(strings.Join(lines, "\n")); code != 0 || len(lines) != 1 || m == nil || m[3] != "3" || m[4] != "build:done" {
		t.Errorf("exit %d, stdout %q; want 0 and the build:done event", code, lines)
	}
}

func TestEventsExitsFourWhenItsSessionIsDeleted(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "t:n", 1, 1)
	p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--transport", "ws")
	waitSubscribers(t, c, "s", 1)
	if r := runBin(t, "", "session", "delete", "--socket", d.Socket, "s"); r.code != 0 {
		t.Fatalf("session delete: exit %d, stderr %q", r.code, r.stderr)
	}
	if code := p.exitCode(t); code != exitEnded {
		t.Errorf("events exit %d after its session was deleted, want %d", code, exitEnded)
	}
	oneLine(t, "events", p.Stderr(), `session "s" was deleted; the stream has ended`)
}

func TestEventsExitCodes(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "t:n", 1, 1)
	refused := fakeDaemon(t, refusing)
	nowhere := filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"count reached", []string{"--session", "s", "--since", "0", "--count", "1"}, exitOK, ""},
		{"timeout without count", []string{"--session", "s", "--timeout", "200ms"}, exitOK, ""},
		{"timeout before count", []string{"--session", "s", "--since", "0", "--count", "2", "--timeout", "3s"}, exitUsage, "timed out after 3s with 1 of 2 events"},
		{"missing session", []string{"--session", "nope"}, exitEnded, `session "nope" does not exist`},
		{"daemon down", []string{"--socket", nowhere, "--session", "s"}, exitUnreachable, "cannot reach the daemon: no socket at " + nowhere},
		{"refused", []string{"--socket", refused, "--session", "s"}, exitRefused, "refused by the daemon (401 unauthorized)"},
		{"bad type filter", []string{"--session", "s", "--types", "nocolon"}, exitUsage, "invalid_types"},
		{"bad since", []string{"--session", "s", "--since", "-1"}, exitUsage, `--since "-1": want an event id (42), a duration (10m: ten minutes ago), an RFC 3339 time (2026-12-01T20:00:00Z) or Unix seconds (@1764643500)`},
		{"bad until", []string{"--session", "s", "--until", "@soon"}, exitUsage, `--until "@soon": want @ and Unix seconds`},
		{"tail and since", []string{"--session", "s", "-n", "3", "--since", "0"}, exitUsage, "give --tail or --since, not both"},
		{"negative tail", []string{"--session", "s", "-n-1"}, exitUsage, "--tail must be 0 or more"},
		{"session and family", []string{"--session", "s", "--family", "f"}, exitUsage, "give --session or --family, not both"},
		{"bad transport", []string{"--session", "s", "--transport", "carrier-pigeon"}, exitUsage, "--transport must be sse or ws"},
		{"unknown flag", []string{"--sesion", "s"}, exitUsage, "unknown flag --sesion"},
		{"an argument", []string{"s"}, exitUsage, "want no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"events", "--socket", d.Socket}, tt.args...)
			r := runBin(t, "", args...)
			if r.code != tt.code {
				t.Errorf("localbus %s: exit %d, want %d; stderr %q", strings.Join(args, " "), r.code, tt.code, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.says) {
				t.Errorf("localbus %s: stderr %q, want it to say %q", strings.Join(args, " "), r.stderr, tt.says)
			}
			if tt.code == exitUnreachable || tt.code == exitRefused || tt.code == exitEnded {
				oneLine(t, "events", r.stderr, tt.says)
			}
		})
	}
}

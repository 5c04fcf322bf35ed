package daemon_test

// End-to-end tests of what an operator sees of the built daemon (SPEC §6
// /metrics, §8 logging): the log lines on its stderr and /metrics over its
// socket.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/access"
)

// scrape returns the daemon's /metrics.
func scrape(t *testing.T, d *daemontest.Daemon) string {
	t.Helper()
	status, body := d.Do(t, "GET", "/metrics", "")
	if status != 200 {
		t.Fatalf("GET /metrics = %d %s", status, body)
	}
	return string(body)
}

// servedFamilies returns the metric families of a scrape, from its # TYPE
// lines.
func servedFamilies(metrics string) []string {
	var fams []string
	for line := range strings.Lines(metrics) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			fams = append(fams, f[2])
		}
	}
	return fams
}

// readmeFamilies returns the first column of the README's metrics table:
// exact family names, and prefixes written as `go_*`.
func readmeFamilies(t *testing.T) (exact, prefixes []string) {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Logs and metrics\n")
	if !ok {
		t.Fatal("README.md has no section ## Logs and metrics")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("^\\| `([a-z_:*]+)` \\|")
	for line := range strings.Lines(section) {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if p, ok := strings.CutSuffix(m[1], "*"); ok {
			prefixes = append(prefixes, p)
		} else {
			exact = append(exact, m[1])
		}
	}
	if len(exact) == 0 {
		t.Fatal("README.md's metrics table lists no family")
	}
	return exact, prefixes
}

// sample returns the sum of the samples of family whose labels contain
// every one of labels ("reason=\"x\"").
func sample(metrics, family string, labels ...string) float64 {
	var sum float64
	for line := range strings.Lines(metrics) {
		line = strings.TrimSpace(line)
		i := strings.LastIndexByte(line, ' ') // label values may hold spaces
		if i < 0 {
			continue
		}
		name, rest := line[:i], line[i+1:]
		if strings.HasPrefix(name, "#") || (name != family && !strings.HasPrefix(name, family+"{")) {
			continue
		}
		if !allIn(name, labels) {
			continue
		}
		v, err := strconv.ParseFloat(rest, 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

func allIn(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestMetricsAreValidAndTheREADMEListsExactlyThoseServed scrapes a durable
// daemon after some traffic: every family the README's table names is
// served, every family served is in the table (the standard process_ and
// go_ collectors as prefixes), and promtool check metrics (Debian's
// prometheus package) finds no problem in the text.
func TestMetricsAreValidAndTheREADMEListsExactlyThoseServed(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Durable: true})
	if status, body := d.Do(t, "POST", "/api/v1/sessions/s/events", `{"type":"a:b","data":1}`); status != 200 {
		t.Fatalf("publish = %d %s", status, body)
	}
	d.Do(t, "POST", "/api/v1/sessions", `{"ringSize":0}`) // a refusal
	d.Do(t, "POST", "/api/v1/reload", "")
	metrics := scrape(t, d)

	served := servedFamilies(metrics)
	exact, prefixes := readmeFamilies(t)
	for _, f := range exact {
		// The bridge's families need a NATS server; the upstream tests
		// scrape them.
		if strings.HasPrefix(f, "localbus_upstream_") {
			continue
		}
		if !slices.Contains(served, f) {
			t.Errorf("the README lists %s, which /metrics does not serve", f)
		}
	}
	for _, p := range prefixes {
		if !slices.ContainsFunc(served, func(f string) bool { return strings.HasPrefix(f, p) }) {
			t.Errorf("the README lists %s*, and /metrics serves no such family", p)
		}
	}
	for _, f := range served {
		if !slices.Contains(exact, f) && !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(f, p) }) {
			t.Errorf("/metrics serves %s, which the README's metrics table does not list", f)
		}
	}
	for _, want := range []struct {
		family string
		labels []string
	}{
		{"localbus_build_info", []string{`goversion="go`}},
		{"localbus_events_published_total", []string{`bus="session"`}},
		{"localbus_http_requests_total", []string{`route="POST /api/v1/sessions/{id}/events"`, `code="200"`}},
		{"localbus_refusals_total", []string{`reason="bad_input"`, `code="invalid_ringSize"`}},
		{"localbus_reloads_total", []string{`result="ok"`}},
		{"localbus_journal_fsync_duration_seconds_count", nil},
		{"localbus_journal_db_bytes", nil},
	} {
		if v := sample(metrics, want.family, want.labels...); v < 1 {
			t.Errorf("%s%v = %v, want at least 1", want.family, want.labels, v)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install Debian's prometheus package to check the metrics text with it")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(metrics)
	out, err := cmd.CombinedOutput()
	t.Logf("promtool check metrics: %v\n%s", err, out)
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics found problems (%v):\n%s", err, out)
	}
}

// lineWith returns the first line of log that contains every one of subs,
// or "".
func lineWith(log string, subs ...string) string {
	for line := range strings.Lines(log) {
		if allIn(line, subs) {
			return line
		}
	}
	return ""
}

// waitLine waits for a line of d's stderr with every one of subs.
func waitLine(t *testing.T, d *daemontest.Daemon, subs ...string) string {
	t.Helper()
	var line string
	waitFor(t, fmt.Sprintf("a log line with %q", subs), func() bool {
		line = lineWith(d.Stderr(), subs...)
		return line != ""
	})
	return line
}

// TestLogsTellTheOperatorWhatHappened drives a daemon through what SPEC §8
// says is logged and reads its stderr: the start with the config file and
// state dir, sessions created (by request and by publish) and deleted, a
// limit refusal, a slow subscriber's warning (debug) and eviction with its
// session, reason and peer, what a reload changed, and a last line.
func TestLogsTellTheOperatorWhatHappened(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Durable: true,
		Config: "log_level = \"debug\"\nmax_sessions = 2\nmax_queued_bytes = 65536\n"})
	waitLine(t, d, "msg=starting", "config="+d.Config, "config_found=true", "state_dir=")

	d.Do(t, "POST", "/api/v1/sessions", `{"id":"a"}`)
	waitLine(t, d, `msg="session created"`, "session=a")
	d.Do(t, "POST", "/api/v1/sessions/b/events", `{"type":"x:y"}`)
	waitLine(t, d, `msg="session created"`, "session=b", "by=publish")
	if status, _ := d.Do(t, "POST", "/api/v1/sessions", `{"id":"c"}`); status != 429 {
		t.Fatalf("third session = %d, want 429", status)
	}
	waitLine(t, d, "level=WARN", "msg=refused", "reason=limit", "code=session_limit", "peer_uid=")
	d.Do(t, "DELETE", "/api/v1/sessions/a", "")
	waitLine(t, d, `msg="session deleted"`, "session=a")

	// A reader that stops reading, until the daemon evicts it.
	conn, err := net.Dial("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /api/v1/sessions/b/events?maxQueued=16 HTTP/1.1\r\nHost: localbus\r\n\r\n")
	data, _ := json.Marshal(strings.Repeat("x", 2000))
	batch := "[" + strings.Repeat(`{"type":"x:y","data":`+string(data)+`},`, 49) + `{"type":"x:y"}]`
	waitFor(t, "the slow reader's eviction", func() bool {
		if status, body := d.Do(t, "POST", "/api/v1/sessions/b/events", batch); status != 200 {
			t.Fatalf("publish = %d %s", status, body)
		}
		return sample(scrape(t, d), "localbus_subscribers_evicted_total", `bus="session"`) > 0
	})
	conn.Close()
	evicted := waitLine(t, d, `msg="subscriber evicted"`, "session=b", "peer_uid=")
	if !strings.Contains(evicted, "reason=queue_overflow") && !strings.Contains(evicted, "reason=queue_bytes_overflow") {
		t.Errorf("eviction line %q names no reason", evicted)
	}
	waitLine(t, d, "level=DEBUG", `msg="slow subscriber warned"`, "session=b")

	keysFile := filepath.Join(d.Dir, "keys.json")
	keys, err := access.Load(keysFile)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := keys.Add("ci", []access.Scope{"read"})
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Save(keysFile); err != nil {
		t.Fatal(err)
	}
	d.WriteConfig(t, "log_level = \"debug\"\nmax_sessions = 3\nmax_queued_bytes = 65536\nidle_timeout = \"1m\"\n")
	if status, body := d.Do(t, "POST", "/api/v1/reload", ""); status != 200 || string(body) != `{"reloaded":true,"restartNeeded":["idle_timeout"]}`+"\n" {
		t.Fatalf("reload = %d %q, want 200 naming idle_timeout as waiting for a restart", status, body)
	}
	waitLine(t, d, "msg=reloaded", "changed=[max_sessions]", "kept_until_restart=[idle_timeout]", "keys_added=[ci]")
	if strings.Contains(d.Stderr(), secret) {
		t.Errorf("the log holds the new key")
	}

	d.Signal(t, syscall.SIGTERM)
	d.Wait(t, patience)
	lines := strings.Split(strings.TrimSpace(d.Stderr()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "msg=stopped") {
		t.Errorf("last line %q, want msg=stopped", last)
	}
}

// TestLogFormatJSONWithoutTimestampsUnderJournald starts the daemon with
// log_format json as systemd would run it (JOURNAL_STREAM set): every line
// is one JSON object with a message and a level, and none has a time of
// its own, since the journal stamps each line.
func TestLogFormatJSONWithoutTimestampsUnderJournald(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--log-format", "json"}, Env: []string{"JOURNAL_STREAM=8:12345"}})
	d.Do(t, "POST", "/api/v1/sessions", `{"id":"a"}`)
	waitLine(t, d, `"msg":"session created"`)
	d.Stop(t)
	lines := strings.Split(strings.TrimSpace(d.Stderr()), "\n")
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("line %q is not JSON: %v", line, err)
			continue
		}
		if _, ok := m["time"]; ok {
			t.Errorf("line %q has a time under journald", line)
		}
		if m["msg"] == nil || m["level"] == nil {
			t.Errorf("line %q lacks msg or level", line)
		}
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, `"msg":"stopped"`) {
		t.Errorf("last line %q, want stopped", last)
	}
	text := daemontest.Start(t, daemontest.Options{})
	if line := lineWith(text.Stderr(), "msg=starting"); !strings.HasPrefix(line, "time=") {
		t.Errorf("without JOURNAL_STREAM, text start line %q, want a time= first", line)
	}
}

// TestRefusedRequestsCannotFloodTheLog sends hundreds of refused requests
// as fast as it can: the log keeps at most one line per error code per
// second, and a later line says how many were left out.
func TestRefusedRequestsCannotFloodTheLog(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Config: "unix_auth = \"key\"\n"})
	const n = 300
	start := time.Now()
	for range n {
		if status, _ := d.Do(t, "GET", "/api/v1/sessions", ""); status != 401 {
			t.Fatalf("status %d, want 401", status)
		}
	}
	// One line per second of the flood, and one more for a second that
	// had only just begun.
	limit := int(time.Since(start)/time.Second) + 2
	if got := strings.Count(d.Stderr(), "code=unauthorized"); got > limit {
		t.Errorf("%d refused requests in %v logged %d lines, want at most %d", n, time.Since(start), got, limit)
	}
	waitFor(t, "a line that counts the suppressed refusals", func() bool {
		d.Do(t, "GET", "/api/v1/sessions", "")
		return lineWith(d.Stderr(), "msg=refused", "code=unauthorized", "suppressed=") != ""
	})
}

package daemon_test

// End-to-end tests of the daemon's lifecycle (SPEC §8, §10) against the
// built binary: start-up refusals, reload under load, shutdown.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/daemon/daemontest"

	"github.com/localbus/localbus/bus/bustest"
)

// patience bounds every wait on the daemon, which is built with -race and
// runs on loaded CI machines.
const patience = 30 * time.Second

// waitFor polls cond until it holds, failing the test with what after
// patience.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	bustest.Eventually(t, patience, what, cond)
}

// waitExit waits for the daemon to exit and returns its exit code and how
// long it took from since.
func waitExit(t testing.TB, d *daemontest.Daemon, since time.Time) (int, time.Duration) {
	t.Helper()
	d.Wait(t, patience)
	return d.ExitCode(), time.Since(since)
}

func createSession(t testing.TB, d *daemontest.Daemon, id string) {
	t.Helper()
	if status, body := d.Do(t, http.MethodPost, "/api/v1/sessions", `{"id":"`+id+`"}`); status != http.StatusCreated {
		t.Fatalf("POST /api/v1/sessions %s = %d %s, want 201", id, status, body)
	}
}

// publish publishes one event of type typ and data to session and returns
// its id; any status but 200 fails the test.
func publish(t testing.TB, d *daemontest.Daemon, session, typ, data string) uint64 {
	t.Helper()
	status, body := d.Do(t, http.MethodPost, "/api/v1/sessions/"+session+"/events", `{"type":"`+typ+`","data":`+data+`}`)
	if status != http.StatusOK {
		t.Fatalf("publish to %s = %d %s, want 200", session, status, body)
	}
	var r struct {
		LastID uint64 `json:"lastId"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("publish answer %q: %v", body, err)
	}
	return r.LastID
}

// upTo returns 1..n.
func upTo(n uint64) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	return ids
}

// A publisher publishes to one session in a loop, one REST request at a
// time, until stopped; it is the session's only publisher, so each answer
// must carry the id after the previous one.
type publisher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex // guards the fields below
	last     uint64
	problems []string
}

func startPublisher(t testing.TB, d *daemontest.Daemon, session string) *publisher {
	ctx, cancel := context.WithCancel(context.Background())
	p := &publisher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for n := 1; ctx.Err() == nil; n++ {
			status, body, err := d.TryDo(http.MethodPost, "/api/v1/sessions/"+session+"/events",
				fmt.Sprintf(`{"type":"load:tick","data":{"n":%d}}`, n))
			var r struct {
				IDs []uint64 `json:"ids"`
			}
			if err == nil && status == http.StatusOK {
				err = json.Unmarshal(body, &r)
			}
			p.mu.Lock()
			switch {
			case err != nil:
				p.problems = append(p.problems, fmt.Sprintf("publish %d: %v", n, err))
			case status != http.StatusOK:
				p.problems = append(p.problems, fmt.Sprintf("publish %d = %d %s", n, status, body))
			case len(r.IDs) != 1 || r.IDs[0] != p.last+1:
				p.problems = append(p.problems, fmt.Sprintf("publish %d got ids %v after %d", n, r.IDs, p.last))
			default:
				p.last = r.IDs[0]
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.stop)
	return p
}

// Last returns the last id acknowledged so far.
func (p *publisher) Last() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// stop stops the loop after the request in flight and waits for it.
func (p *publisher) stop() {
	p.cancel()
	<-p.done
}

func (p *publisher) Problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.problems)
}

// followers starts two SSE and two WebSocket followers of session from its
// beginning.
func followers(t testing.TB, d *daemontest.Daemon, session string, opts daemontest.FollowOptions) []*daemontest.Follower {
	zero := uint64(0)
	opts.Since = &zero
	var fl []*daemontest.Follower
	for _, tr := range []daemontest.Transport{daemontest.SSE, daemontest.SSE, daemontest.WebSocket, daemontest.WebSocket} {
		opts.Transport = tr
		path := "/api/v1/sessions/" + session + "/events"
		if tr == daemontest.WebSocket {
			path = "/api/v1/sessions/" + session + "/ws"
		}
		fl = append(fl, d.Follow(t, fmt.Sprintf("%s-%d", tr, len(fl)+1), path, opts))
	}
	return fl
}

func all(fl []*daemontest.Follower, cond func(*daemontest.Follower) bool) func() bool {
	return func() bool {
		for _, f := range fl {
			if !cond(f) {
				return false
			}
		}
		return true
	}
}

// wantEnds is what a follower's streams should have ended with: reason in
// stream:closed, and on WebSocket the close code 1001 after it.
func wantEnds(f *daemontest.Follower, reason string, n int) []daemontest.End {
	code := websocket.StatusCode(-1)
	if strings.HasPrefix(f.Name, string(daemontest.WebSocket)) {
		code = websocket.StatusGoingAway
	}
	var ends []daemontest.End
	for range n {
		ends = append(ends, daemontest.End{Reason: reason, Code: code})
	}
	return ends
}

func checkEnds(t testing.TB, f *daemontest.Follower, reason string, n int) {
	t.Helper()
	got := f.Ends()
	if diff := cmp.Diff(wantEnds(f, reason, n), got, cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) })); diff != "" {
		t.Errorf("%s: streams ended %v, want %d × %s (-want +got):\n%s", f.Name, got, n, reason, diff)
	}
}

// waitDone waits for a follower that has FollowOptions.Once to see its
// stream end.
func waitDone(t testing.TB, f *daemontest.Follower) {
	t.Helper()
	select {
	case <-f.Done():
	case <-time.After(patience):
		t.Fatalf("%s: stream still open after %v", f.Name, patience)
	}
}

// reloadBy are the ways to ask for a reload (SPEC §8).
var reloadBy = []struct {
	name    string
	trigger func(t *testing.T, d *daemontest.Daemon)
}{
	{"SIGHUP", func(t *testing.T, d *daemontest.Daemon) {
		// The log says when the reload is over; SIGHUP has no answer.
		reloads := strings.Count(d.Stderr(), "msg=reloaded")
		d.Signal(t, syscall.SIGHUP)
		waitFor(t, "the daemon to log the reload", func() bool { return strings.Count(d.Stderr(), "msg=reloaded") > reloads })
	}},
	{"POST /api/v1/reload", func(t *testing.T, d *daemontest.Daemon) {
		if status, body := d.Do(t, http.MethodPost, "/api/v1/reload", ""); status != http.StatusOK {
			t.Fatalf("POST /api/v1/reload = %d %s, want 200", status, body)
		}
	}},
}

// TestReloadUnderLoadLosesAndRepeatsNothing reloads twice while a publisher
// keeps publishing to two SSE and two WebSocket followers: each stream ends
// with stream:closed (reload), WebSocket with 1001, every follower resumes
// with its last id, and each ends with every id exactly once, in order.
func TestReloadUnderLoadLosesAndRepeatsNothing(t *testing.T) {
	for _, by := range reloadBy {
		t.Run(by.name, func(t *testing.T) {
			d := daemontest.Start(t, daemontest.Options{})
			createSession(t, d, "load")
			fl := followers(t, d, "load", daemontest.FollowOptions{})
			waitFor(t, "every follower to open its stream", all(fl, func(f *daemontest.Follower) bool { return f.Streams() >= 1 }))
			p := startPublisher(t, d, "load")

			const reloads = 2
			for round := 1; round <= reloads; round++ {
				target := p.Last() + 50
				waitFor(t, fmt.Sprintf("followers to get id %d", target), all(fl, func(f *daemontest.Follower) bool { return f.Last() >= target }))
				by.trigger(t, d)
				waitFor(t, fmt.Sprintf("reload %d to end every stream and the followers to resume", round),
					all(fl, func(f *daemontest.Follower) bool { return len(f.Ends()) >= round && f.Streams() > round }))
			}
			target := p.Last() + 50
			waitFor(t, fmt.Sprintf("followers to get id %d after the reloads", target), all(fl, func(f *daemontest.Follower) bool { return f.Last() >= target }))
			p.stop()
			last := p.Last()
			waitFor(t, fmt.Sprintf("followers to get the last id %d", last), all(fl, func(f *daemontest.Follower) bool { return f.Last() >= last }))

			if probs := p.Problems(); len(probs) > 0 {
				t.Errorf("publisher: %s", strings.Join(probs, "; "))
			}
			for _, f := range fl {
				f.Stop()
				if diff := cmp.Diff(upTo(last), f.IDs()); diff != "" {
					t.Errorf("%s: ids are not 1..%d exactly once in order (-want +got):\n%s", f.Name, last, diff)
				}
				checkEnds(t, f, "reload", reloads)
				if probs := f.Problems(); len(probs) > 0 {
					t.Errorf("%s: %s", f.Name, strings.Join(probs, "; "))
				}
			}
		})
	}
}

// TestReloadRefusesInvalidConfigAndKeepsServing writes a broken
// configuration and asks for a reload both ways: POST /api/v1/reload answers
// 400 naming the key, SIGHUP logs it, and the running daemon goes on with
// its streams open and publishes accepted.
func TestReloadRefusesInvalidConfigAndKeepsServing(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	createSession(t, d, "s")
	fl := followers(t, d, "s", daemontest.FollowOptions{Once: true})
	waitFor(t, "every follower to open its stream", all(fl, func(f *daemontest.Follower) bool { return f.Streams() >= 1 }))

	tests := []struct {
		name   string
		config string
		want   string // in the error
	}{
		{"syntax error", "ring_size = \n", "config.toml"},
		{"unknown key", "ring_sise = 100\n", "ring_sise"},
		{"ring_size zero", "ring_size = 0\n", "ring_size"},
		{"ring_size over a million", "ring_size = 1000001\n", "ring_size"},
		{"wrong type", "keepalive = 15\n", "keepalive"},
		{"max_event_bytes too small", "max_event_bytes = 10\n", "max_event_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d.WriteConfig(t, tt.config)

			status, body := d.Do(t, http.MethodPost, "/api/v1/reload", "")
			if status != http.StatusBadRequest {
				t.Fatalf("POST /api/v1/reload with %q = %d %s, want 400", tt.config, status, body)
			}
			if e := daemontest.DecodeError(t, body); !strings.Contains(e.Error.Message, tt.want) {
				t.Errorf("POST /api/v1/reload with %q: error %q does not name %q", tt.config, e.Error.Message, tt.want)
			}
			id := publish(t, d, "s", "test:after-post", `{}`)
			waitFor(t, fmt.Sprintf("followers to get id %d after a refused POST reload", id), all(fl, func(f *daemontest.Follower) bool { return f.Last() >= id }))

			refusals := strings.Count(d.Stderr(), "reload refused")
			d.Signal(t, syscall.SIGHUP)
			waitFor(t, "the daemon to log the refused reload", func() bool { return strings.Count(d.Stderr(), "reload refused") > refusals })
			if line := lastLine(d.Stderr(), "reload refused"); !strings.Contains(line, tt.want) {
				t.Errorf("SIGHUP with %q logged %q, which does not name %q", tt.config, line, tt.want)
			}
			id = publish(t, d, "s", "test:after-hup", `{}`)
			waitFor(t, fmt.Sprintf("followers to get id %d after a refused SIGHUP", id), all(fl, func(f *daemontest.Follower) bool { return f.Last() >= id }))
		})
	}
	for _, f := range fl {
		if ends := f.Ends(); len(ends) > 0 {
			t.Errorf("%s: stream ended %v by a refused reload", f.Name, ends)
		}
		if probs := f.Problems(); len(probs) > 0 {
			t.Errorf("%s: %s", f.Name, strings.Join(probs, "; "))
		}
	}
}

// TestReloadKeepsARemoteListenerBehindAllowRemote serves listen_tcp on
// 0.0.0.0 with allow_remote, then reloads files that turn allow_remote off:
// listen_tcp changes only on restart, so the running address would go on
// being served without allow_remote. Each such reload is refused (SPEC §7),
// whether the file still names the address, names a loopback one or none;
// one that keeps allow_remote is applied.
func TestReloadKeepsARemoteListenerBehindAllowRemote(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Config: "listen_tcp = \"0.0.0.0:0\"\nallow_remote = true\n"})
	for _, config := range []string{
		"allow_remote = false\n",
		"listen_tcp = \"127.0.0.1:0\"\n",
		"listen_tcp = \"0.0.0.0:0\"\n",
	} {
		d.WriteConfig(t, config)
		status, body := d.Do(t, http.MethodPost, "/api/v1/reload", "")
		if status != http.StatusBadRequest {
			t.Fatalf("POST /api/v1/reload with %q = %d %s, want 400", config, status, body)
		}
		if e := daemontest.DecodeError(t, body); !strings.Contains(e.Error.Message, "allow_remote") {
			t.Errorf("POST /api/v1/reload with %q: error %q does not name allow_remote", config, e.Error.Message)
		}
	}
	d.WriteConfig(t, "listen_tcp = \"0.0.0.0:0\"\nallow_remote = true\nring_size = 100\n")
	if status, body := d.Do(t, http.MethodPost, "/api/v1/reload", ""); status != http.StatusOK {
		t.Errorf("POST /api/v1/reload keeping allow_remote = %d %s, want 200", status, body)
	}
}

// lastLine returns the last line of log that contains s.
func lastLine(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

// TestReloadAppliesNewLimits lowers max_event_bytes in the file: after the
// reload an event that passed before is a 413, caps report the new limit,
// and the global bus carries localbus:reloaded. No stream is open during the
// reload, so nothing orders the reload before the requests that follow it
// but the daemon's own synchronisation, which the race detector checks.
func TestReloadAppliesNewLimits(t *testing.T) {
	for _, by := range reloadBy {
		t.Run(by.name, func(t *testing.T) {
			d := daemontest.Start(t, daemontest.Options{})
			createSession(t, d, "s")
			big := `"` + strings.Repeat("x", 2000) + `"`
			publish(t, d, "s", "test:big", big)

			// With settings the HTTP server reads on every connection.
			d.WriteConfig(t, "max_event_bytes = 1024\nidle_timeout = \"60s\"\nread_header_timeout = \"5s\"\nmax_header_bytes = 8192\n")
			by.trigger(t, d)

			status, body := d.Do(t, http.MethodPost, "/api/v1/sessions/s/events", `{"type":"test:big","data":`+big+`}`)
			if status != http.StatusRequestEntityTooLarge {
				t.Errorf("publish of 2000 bytes after lowering max_event_bytes to 1024 = %d %s, want 413", status, body)
			}
			publish(t, d, "s", "test:small", `"small"`)
			if line := lastLine(d.Stderr(), "only on restart"); !strings.Contains(line, "idle_timeout") || !strings.Contains(line, "read_header_timeout") {
				t.Errorf("reload logged %q, want the settings that need a restart named", line)
			}
			var caps struct {
				Limits struct {
					MaxEventBytes int64 `json:"maxEventBytes"`
				} `json:"limits"`
			}
			_, body = d.Do(t, http.MethodGet, "/api/v1/caps", "")
			if err := json.Unmarshal(body, &caps); err != nil || caps.Limits.MaxEventBytes != 1024 {
				t.Errorf("caps after reload = %s (%v), want limits.maxEventBytes 1024", body, err)
			}

			zero := uint64(0)
			global := d.Follow(t, "global", "/api/v1/events", daemontest.FollowOptions{Since: &zero})
			waitFor(t, "localbus:reloaded on the global bus", func() bool { return slices.Contains(global.Types(), "localbus:reloaded") })
			global.Stop()
			if probs := global.Problems(); len(probs) > 0 {
				t.Errorf("global follower: %s", strings.Join(probs, "; "))
			}
		})
	}
}

// shutdownBy are the signals that shut the daemon down (SPEC §8).
var shutdownBy = []struct {
	name string
	sig  os.Signal
}{
	{"SIGTERM", syscall.SIGTERM},
	{"SIGINT", syscall.SIGINT},
}

// TestShutdownEndsStreamsAndUnlinksSocket stops a daemon that has SSE and
// WebSocket streams open: each gets stream:closed (shutdown), WebSocket
// 1001, the daemon exits 0 within shutdown_timeout and its socket is gone.
func TestShutdownEndsStreamsAndUnlinksSocket(t *testing.T) {
	for _, by := range shutdownBy {
		t.Run(by.name, func(t *testing.T) {
			const timeout = 5 * time.Second
			d := daemontest.Start(t, daemontest.Options{Args: []string{"--shutdown-timeout", timeout.String()}})
			createSession(t, d, "s")
			fl := followers(t, d, "s", daemontest.FollowOptions{Once: true})
			fl = append(fl,
				d.Follow(t, "sse-global", "/api/v1/events", daemontest.FollowOptions{Once: true}),
				d.Follow(t, "ws-global", "/api/v1/events/ws", daemontest.FollowOptions{Once: true, Transport: daemontest.WebSocket}))
			waitFor(t, "every follower to open its stream", all(fl, func(f *daemontest.Follower) bool { return f.Streams() >= 1 }))
			id := publish(t, d, "s", "test:one", `1`)
			waitFor(t, "the session followers to get the event", all(fl[:4], func(f *daemontest.Follower) bool { return f.Last() >= id }))

			start := time.Now()
			d.Signal(t, by.sig)
			code, took := waitExit(t, d, start)
			if code != 0 {
				t.Errorf("exit code after %s = %d, want 0", by.name, code)
			}
			if took > timeout {
				t.Errorf("shutdown took %v, more than shutdown_timeout %v", took, timeout)
			}
			for _, f := range fl {
				waitDone(t, f)
				checkEnds(t, f, "shutdown", 1)
				if probs := f.Problems(); len(probs) > 0 {
					t.Errorf("%s: %s", f.Name, strings.Join(probs, "; "))
				}
			}
			if _, err := os.Lstat(d.Socket); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("socket after a clean exit: Lstat = %v, want it unlinked", err)
			}
		})
	}
}

// TestShutdownDoesNotWaitForStuckWebSocket holds a WebSocket that never
// reads, so it never answers the close frame: the daemon still exits 0 soon
// after shutdown_timeout, and the peer finds stream:closed and 1001 in its
// receive buffer.
func TestShutdownDoesNotWaitForStuckWebSocket(t *testing.T) {
	// Less than the 5 s the WebSocket library waits for a close handshake.
	const timeout = 2 * time.Second
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--shutdown-timeout", timeout.String()}})
	createSession(t, d, "s")
	stuck, br := dialRawWS(t, d.Socket, "/api/v1/sessions/s/ws")
	sse := d.Follow(t, "sse", "/api/v1/sessions/s/events", daemontest.FollowOptions{Once: true})
	waitFor(t, "two subscribers on the session", func() bool { return subscribers(t, d, "s") == 2 })

	start := time.Now()
	d.Signal(t, syscall.SIGTERM)
	code, took := waitExit(t, d, start)
	if code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	// The race-built daemon needs some slack to exit after the deadline.
	if limit := timeout + 2*time.Second; took > limit {
		t.Errorf("shutdown with a stuck WebSocket took %v, want at most shutdown_timeout %v (+2s slack)", took, timeout)
	}
	waitDone(t, sse)
	checkEnds(t, sse, "shutdown", 1)

	stuck.SetReadDeadline(time.Now().Add(patience))
	var texts []string
	var closeCode uint16
	for closeCode == 0 {
		op, payload, err := readWSFrame(br)
		if err != nil {
			t.Fatalf("stuck WebSocket: reading what the daemon sent: %v (after %q)", err, texts)
		}
		switch op {
		case 0x1:
			texts = append(texts, string(payload))
		case 0x8:
			if len(payload) < 2 {
				t.Fatalf("close frame without a code")
			}
			closeCode = binary.BigEndian.Uint16(payload)
		}
	}
	if closeCode != uint16(websocket.StatusGoingAway) {
		t.Errorf("stuck WebSocket: close code %d, want 1001", closeCode)
	}
	if len(texts) == 0 || !strings.Contains(texts[len(texts)-1], `"type":"stream:closed"`) || !strings.Contains(texts[len(texts)-1], `"reason":"shutdown"`) {
		t.Errorf("stuck WebSocket: frames before the close %q, want stream:closed (shutdown) last", texts)
	}
}

// TestShutdownDoesNotWaitForStuckSSEReader holds an SSE stream whose
// client stopped reading with megabytes still to come, so the daemon's
// write blocks: it still exits 0 soon after shutdown_timeout.
func TestShutdownDoesNotWaitForStuckSSEReader(t *testing.T) {
	const timeout = 2 * time.Second
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--shutdown-timeout", timeout.String()}})
	createSession(t, d, "s")
	c, err := net.DialTimeout("unix", d.Socket, patience)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /api/v1/sessions/s/events HTTP/1.1\r\nHost: localbus\r\nAccept: text/event-stream\r\n\r\n")
	waitFor(t, "the stream to subscribe", func() bool { return subscribers(t, d, "s") == 1 })
	// Far more than a socket buffer holds, well under max_queued_bytes.
	chunk := `"` + strings.Repeat("x", 50_000) + `"`
	for range 30 {
		publish(t, d, "s", "test:chunk", chunk)
	}

	start := time.Now()
	d.Signal(t, syscall.SIGTERM)
	code, took := waitExit(t, d, start)
	if code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	if limit := timeout + 2*time.Second; took > limit {
		t.Errorf("shutdown with a stuck SSE reader took %v, want at most shutdown_timeout %v (+2s slack)", took, timeout)
	}
}

// subscribers returns the subscriber count of session.
func subscribers(t testing.TB, d *daemontest.Daemon, session string) int {
	t.Helper()
	_, body := d.Do(t, http.MethodGet, "/api/v1/sessions/"+session, "")
	var s struct {
		Subscribers int `json:"subscribers"`
	}
	json.Unmarshal(body, &s)
	return s.Subscribers
}

// TestShutdownUnderLoadFinishesPublishes stops the daemon while publishers
// and followers are busy: every publish is answered in full (200) or refused
// whole (no connection, 503), never cut off; acknowledged ids are unique;
// each follower got an unbroken run of ids, then stream:closed (shutdown).
func TestShutdownUnderLoadFinishesPublishes(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	createSession(t, d, "s")
	fl := followers(t, d, "s", daemontest.FollowOptions{Once: true})
	waitFor(t, "every follower to open its stream", all(fl, func(f *daemontest.Follower) bool { return f.Streams() >= 1 }))

	type outcome struct {
		ids []uint64
		bad []string
	}
	const publishers = 4
	results := make(chan outcome, publishers)
	stop := make(chan struct{})
	var acked sync.WaitGroup
	acked.Add(publishers)
	for p := range publishers {
		go func() {
			var o outcome
			defer func() { results <- o }()
			for n := 0; ; n++ {
				if n == 20 {
					acked.Done()
				}
				status, body, err := d.TryDo(http.MethodPost, "/api/v1/sessions/s/events", fmt.Sprintf(`{"type":"load:p%d","data":%d}`, p, n))
				switch {
				case err != nil && n >= 20 && refused(err):
					return // the daemon is gone: stop
				case err != nil:
					o.bad = append(o.bad, fmt.Sprintf("publish %d: %v", n, err))
				case status == http.StatusOK:
					var r struct {
						IDs []uint64 `json:"ids"`
					}
					if err := json.Unmarshal(body, &r); err != nil {
						o.bad = append(o.bad, fmt.Sprintf("publish %d: %q: %v", n, body, err))
					}
					o.ids = append(o.ids, r.IDs...)
				case status == http.StatusServiceUnavailable && n >= 20:
				default:
					o.bad = append(o.bad, fmt.Sprintf("publish %d = %d %s", n, status, body))
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	acked.Wait()
	d.Signal(t, syscall.SIGTERM)
	if code, _ := waitExit(t, d, time.Now()); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	close(stop)
	seen := map[uint64]bool{}
	for range publishers {
		o := <-results
		for _, b := range o.bad {
			t.Error(b)
		}
		for _, id := range o.ids {
			if seen[id] {
				t.Errorf("id %d acknowledged twice", id)
			}
			seen[id] = true
		}
	}
	for _, f := range fl {
		waitDone(t, f)
		ids := f.IDs()
		if diff := cmp.Diff(upTo(uint64(len(ids))), ids); diff != "" {
			t.Errorf("%s: ids are not an unbroken run from 1 (-want +got):\n%s", f.Name, diff)
		}
		for _, id := range ids {
			if !seen[id] {
				t.Errorf("%s: got id %d, which no publisher saw acknowledged", f.Name, id)
			}
		}
		checkEnds(t, f, "shutdown", 1)
		if probs := f.Problems(); len(probs) > 0 {
			t.Errorf("%s: %s", f.Name, strings.Join(probs, "; "))
		}
	}
}

// refused reports whether err says that the daemon never took the request:
// nothing accepts connections on the socket any more (it closed its
// listener and unlinked the file), or the connection was still in the
// listener's backlog when it closed, which the kernel resets. Never
// accepted, such a request was never processed. (Under socket activation
// the service manager keeps the socket, and the backlog waits for the next
// start.) EPIPE and EOF are a kept-alive connection that the
// shutting-down daemon closed as idle while the next request was being
// written on it, or before it read it. (Were such a request published, a
// follower would get an id no publisher saw acknowledged, which the test
// checks.)
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)
}

// TestShutdownTimeoutZeroExitsAtOnce sets shutdown_timeout to 0, which
// closes everything at once: the daemon exits 0 without waiting for its
// streams.
func TestShutdownTimeoutZeroExitsAtOnce(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--shutdown-timeout", "0s"}})
	createSession(t, d, "s")
	f := d.Follow(t, "sse", "/api/v1/sessions/s/events", daemontest.FollowOptions{Once: true})
	waitFor(t, "the follower to open its stream", func() bool { return f.Streams() >= 1 })
	start := time.Now()
	d.Signal(t, syscall.SIGTERM)
	code, took := waitExit(t, d, start)
	if code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	if took > 2*time.Second {
		t.Errorf("shutdown with shutdown_timeout 0 took %v, want it at once", took)
	}
	if _, err := os.Lstat(d.Socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after exit: Lstat = %v, want it unlinked", err)
	}
}

// dialRawWS opens a WebSocket by hand, so that the test controls every byte
// the client sends: after the handshake it sends nothing, not even the
// answer to a close frame.
func dialRawWS(t testing.TB, sock, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("unix", sock, patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(patience))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localbus\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("WebSocket handshake on %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("WebSocket handshake on %s: %s, want 101", path, resp.Status)
	}
	c.SetDeadline(time.Time{})
	return c, br
}

// readWSFrame reads one unmasked frame, as a server sends them.
func readWSFrame(br *bufio.Reader) (opcode byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if h[1]&0x80 != 0 {
		return 0, nil, errors.New("server frame is masked")
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(br, payload)
	return h[0] & 0x0f, payload, err
}

// TestStartReplacesStaleSocket leaves a socket file that nobody listens on
// where the daemon's socket goes, as a crashed daemon would: the daemon
// replaces it and serves.
func TestStartReplacesStaleSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "lb.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("stale socket not in place: %v %v", fi, err)
	}

	d := daemontest.Start(t, daemontest.Options{Dir: dir, Socket: sock})
	createSession(t, d, "s")
	if id := publish(t, d, "s", "test:one", `1`); id != 1 {
		t.Errorf("first publish on the new daemon got id %d, want 1", id)
	}
	if !strings.Contains(d.Stderr(), "replaced a stale socket") {
		t.Errorf("the daemon did not say it replaced a stale socket")
	}
}

// TestStartRefusesLiveSocket starts a second daemon on a socket that
// something answers on: it exits 1 with a message naming the path, and the
// first keeps its socket and serves on.
func TestStartRefusesLiveSocket(t *testing.T) {
	tests := []struct {
		name  string
		first func(t *testing.T, sock string) (check func())
	}{
		{"another daemon", func(t *testing.T, sock string) func() {
			first := daemontest.Start(t, daemontest.Options{Socket: sock})
			return func() {
				if status, body := first.Do(t, http.MethodGet, "/healthz", ""); status != http.StatusOK {
					t.Errorf("first daemon after the refusal: /healthz = %d %s", status, body)
				}
			}
		}},
		{"another program", func(t *testing.T, sock string) func() {
			if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
				t.Fatal(err)
			}
			// The kernel completes connections on the backlog: no Accept
			// is needed for the socket to be live.
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return func() {}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "lb.sock")
			check := tt.first(t, sock)

			second := daemontest.Start(t, daemontest.Options{Socket: sock, NoWait: true})
			if code, _ := waitExit(t, second, time.Now()); code != 1 {
				t.Errorf("second daemon exit code = %d, want 1", code)
			}
			if log := second.Stderr(); !strings.Contains(log, sock) || !strings.Contains(log, "already serving") {
				t.Errorf("second daemon said %q, want a message that names %s and says a daemon is already serving", log, sock)
			}
			if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
				t.Errorf("live socket after the refusal: %v %v, want it in place", fi, err)
			}
			check()
		})
	}
}

// TestStartRefusesNonSocketFile finds something other than a socket at the
// socket path: the daemon exits 1 naming the path and leaves it alone.
func TestStartRefusesNonSocketFile(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		// check reports what is wrong with path afterwards, "" if nothing.
		check func(path string) string
	}{
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, func(path string) string {
			if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
				return fmt.Sprintf("content %q (%v), want %q", b, err, "precious")
			}
			return ""
		}},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, func(path string) string {
			if fi, err := os.Lstat(path); err != nil || !fi.IsDir() {
				return fmt.Sprintf("Lstat = %v %v, want the directory", fi, err)
			}
			return ""
		}},
		{"symlink", func(t *testing.T, path string) {
			if err := os.Symlink("elsewhere", path); err != nil {
				t.Fatal(err)
			}
		}, func(path string) string {
			if dst, err := os.Readlink(path); err != nil || dst != "elsewhere" {
				return fmt.Sprintf("Readlink = %q %v, want the symlink", dst, err)
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			sock := filepath.Join(dir, "lb.sock")
			tt.make(t, sock)
			d := daemontest.Start(t, daemontest.Options{Dir: dir, Socket: sock, NoWait: true})
			if code, _ := waitExit(t, d, time.Now()); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
			if log := d.Stderr(); !strings.Contains(log, sock) || !strings.Contains(log, "not a socket") {
				t.Errorf("daemon said %q, want a message that names %s and says it is not a socket", log, sock)
			}
			if problem := tt.check(sock); problem != "" {
				t.Errorf("%s at the socket path was touched: %s", tt.name, problem)
			}
		})
	}
}

// TestStartRefusesInvalidConfig starts the daemon with a bad configuration
// file or flag: it exits 1 with a message naming the key (or flag), and
// creates no socket.
func TestStartRefusesInvalidConfig(t *testing.T) {
	tests := []struct {
		name   string
		config string
		args   []string
		want   string
	}{
		{name: "unknown key", config: "ring_sise = 100\n", want: "ring_sise"},
		{name: "unknown table", config: "[server]\nring_size = 100\n", want: "server"},
		{name: "ring_size zero", config: "ring_size = 0\n", want: "ring_size"},
		{name: "ring_size over a million", config: "ring_size = 1000001\n", want: "ring_size"},
		{name: "max_queued out of range", config: "max_queued = 4\n", want: "max_queued"},
		{name: "wrong type", config: "keepalive = 15\n", want: "keepalive"},
		{name: "bad duration", config: "shutdown_timeout = \"soon\"\n", want: "shutdown_timeout"},
		{name: "syntax error", config: "ring_size = \n", want: "config.toml"},
		{name: "flag out of range", args: []string{"--ring-size", "0"}, want: "--ring-size"},
		{name: "missing config file", args: []string{"--config", "/nonexistent/localbus.toml"}, want: "/nonexistent/localbus.toml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := daemontest.Start(t, daemontest.Options{Config: tt.config, Args: tt.args, NoWait: true})
			if code, _ := waitExit(t, d, time.Now()); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
			if log := d.Stderr(); !strings.Contains(log, tt.want) {
				t.Errorf("daemon said %q, want a message naming %q", log, tt.want)
			}
			if _, err := os.Lstat(d.Socket); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("socket after a refused start: Lstat = %v, want none", err)
			}
		})
	}
}

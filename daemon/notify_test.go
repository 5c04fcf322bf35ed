package daemon_test

// End-to-end tests of what the built daemon tells a service manager over
// NOTIFY_SOCKET (SPEC §8), read from a datagram socket the test owns.

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
)

// A notifySocket is a stand-in for the service manager's notification
// socket: a unixgram socket in a temporary directory whose datagrams a
// goroutine collects until the test ends.
type notifySocket struct {
	// Path is the value for NOTIFY_SOCKET.
	Path string
	msgs chan notification
}

// A notification is one datagram and when it arrived.
type notification struct {
	msg string
	at  time.Time
}

func listenNotify(t testing.TB) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	ns := &notifySocket{Path: path, msgs: make(chan notification, 4096)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, _, err := c.ReadFromUnix(buf)
			if err != nil {
				return // closed by the cleanup
			}
			select {
			case ns.msgs <- notification{string(buf[:n]), time.Now()}:
			default:
				t.Errorf("notify socket: more than %d datagrams unread", cap(ns.msgs))
			}
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return ns
}

// next returns the next datagram that does not start with one of skip,
// failing the test after patience.
func (ns *notifySocket) next(t testing.TB, skip ...string) notification {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case n := <-ns.msgs:
			if !hasAnyPrefix(n.msg, skip) {
				return n
			}
		case <-timeout:
			t.Fatalf("no notification after %v", patience)
		}
	}
}

// pending returns the datagrams received and not yet read that do not
// start with one of skip, without waiting.
func (ns *notifySocket) pending(skip ...string) []string {
	var out []string
	for {
		select {
		case n := <-ns.msgs:
			if !hasAnyPrefix(n.msg, skip) {
				out = append(out, n.msg)
			}
		default:
			return out
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, the clock of
// MONOTONIC_USEC=.
func monotonicUsec(t testing.TB) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Sec*1_000_000 + ts.Nsec/1_000
}

// expectReload reads the notifications of one reload: RELOADING=1 with a
// MONOTONIC_USEC= taken during it, then READY=1 (STATUS= and WATCHDOG=1
// skipped). before is the monotonic time before the reload was asked for.
func expectReload(t testing.TB, ns *notifySocket, before int64) {
	t.Helper()
	n := ns.next(t, "WATCHDOG=1", "STATUS=")
	after := monotonicUsec(t)
	fields := strings.Split(n.msg, "\n")
	if len(fields) != 2 || fields[0] != "RELOADING=1" || !strings.HasPrefix(fields[1], "MONOTONIC_USEC=") {
		t.Fatalf("notification %q, want RELOADING=1 and MONOTONIC_USEC= in one datagram", n.msg)
	}
	usec, err := strconv.ParseInt(strings.TrimPrefix(fields[1], "MONOTONIC_USEC="), 10, 64)
	if err != nil || usec < before || usec > after {
		t.Errorf("MONOTONIC_USEC=%s (%v), want the monotonic clock during the reload, in [%d, %d]", strings.TrimPrefix(fields[1], "MONOTONIC_USEC="), err, before, after)
	}
	if n := ns.next(t, "WATCHDOG=1", "STATUS="); n.msg != "READY=1" {
		t.Errorf("notification after RELOADING=1 = %q, want READY=1", n.msg)
	}
}

// TestNotifyTellsEveryStateChange follows a daemon through start, a reload
// by SIGHUP, one by POST /api/v1/reload, a refused one and SIGTERM: READY=1
// and STATUS= once serving; RELOADING=1 with MONOTONIC_USEC=, then READY=1,
// for every reload, refused or not; STOPPING=1 on SIGTERM and nothing after.
func TestNotifyTellsEveryStateChange(t *testing.T) {
	ns := listenNotify(t)
	d := daemontest.Start(t, daemontest.Options{Env: []string{"NOTIFY_SOCKET=" + ns.Path}, NoWait: true})

	if n := ns.next(t); n.msg != "READY=1" {
		t.Fatalf("first notification = %q, want READY=1", n.msg)
	}
	// READY=1 means serving: the socket answers at once.
	if status, body := d.Do(t, http.MethodGet, "/healthz", ""); status != http.StatusOK {
		t.Errorf("/healthz right after READY=1 = %d %s, want 200", status, body)
	}
	if n := ns.next(t, "WATCHDOG=1"); n.msg != "STATUS=0 sessions, 0 subscribers" {
		t.Errorf("notification after READY=1 = %q, want STATUS= with sessions and subscribers", n.msg)
	}
	createSession(t, d, "s")

	before := monotonicUsec(t)
	d.Signal(t, syscall.SIGHUP)
	expectReload(t, ns, before)

	before = monotonicUsec(t)
	if status, body := d.Do(t, http.MethodPost, "/api/v1/reload", ""); status != http.StatusOK {
		t.Fatalf("POST /api/v1/reload = %d %s, want 200", status, body)
	}
	expectReload(t, ns, before)

	d.WriteConfig(t, "ring_size = 0\n")
	before = monotonicUsec(t)
	d.Signal(t, syscall.SIGHUP)
	expectReload(t, ns, before)

	d.Signal(t, syscall.SIGTERM)
	if n := ns.next(t, "WATCHDOG=1", "STATUS="); n.msg != "STOPPING=1" {
		t.Errorf("notification after SIGTERM = %q, want STOPPING=1", n.msg)
	}
	if code, _ := waitExit(t, d, time.Now()); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	if rest := ns.pending("WATCHDOG=1", "STATUS="); len(rest) > 0 {
		t.Errorf("notifications after STOPPING=1: %q, want none", rest)
	}
}

// TestNotifyWatchdog sets WATCHDOG_USEC=200000: the daemon sends WATCHDOG=1
// every 100 ms when WATCHDOG_PID is unset or names it, and never when it
// names another process.
func TestNotifyWatchdog(t *testing.T) {
	const usec = 200000
	// sh execs the daemon in its own process, so $$ is the daemon's pid.
	ownPID := []string{"sh", "-c", `WATCHDOG_PID=$$ exec "$@"`, "sh"}
	tests := []struct {
		name    string
		env     []string
		wrapper []string
		pings   bool
	}{
		{name: "WATCHDOG_PID unset", pings: true},
		{name: "WATCHDOG_PID names the daemon", wrapper: ownPID, pings: true},
		{name: "WATCHDOG_PID names another process", env: []string{"WATCHDOG_PID=" + strconv.Itoa(os.Getpid())}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := listenNotify(t)
			env := append([]string{"NOTIFY_SOCKET=" + ns.Path, "WATCHDOG_USEC=" + strconv.Itoa(usec)}, tt.env...)
			d := daemontest.Start(t, daemontest.Options{Env: env, Wrapper: tt.wrapper, NoWait: true})
			if n := ns.next(t, "WATCHDOG=1"); n.msg != "READY=1" {
				t.Fatalf("first notification = %q, want READY=1", n.msg)
			}

			if tt.pings {
				const want = 5
				var at []time.Time
				for len(at) < want {
					n := ns.next(t, "STATUS=")
					if n.msg != "WATCHDOG=1" {
						t.Fatalf("notification %q while serving, want WATCHDOG=1", n.msg)
					}
					at = append(at, n.at)
				}
				// Pings every half interval: want of them span at least
				// (want-1) × 100 ms, less some scheduling jitter.
				if span, min := at[want-1].Sub(at[0]), time.Duration(want-1)*usec*time.Microsecond/2*3/4; span < min {
					t.Errorf("%d pings in %v, want them spread over at least %v (every %v)", want, span, min, usec*time.Microsecond/2)
				}
			} else {
				// Watch for five would-be intervals.
				window := time.After(5 * usec * time.Microsecond / 2)
			watch:
				for {
					select {
					case n := <-ns.msgs:
						if n.msg == "WATCHDOG=1" {
							t.Fatalf("WATCHDOG=1 sent though WATCHDOG_PID names another process")
						}
					case <-window:
						break watch
					}
				}
			}

			d.Signal(t, syscall.SIGTERM)
			if n := ns.next(t, "WATCHDOG=1", "STATUS="); n.msg != "STOPPING=1" {
				t.Errorf("notification after SIGTERM = %q, want STOPPING=1", n.msg)
			}
			if code, _ := waitExit(t, d, time.Now()); code != 0 {
				t.Errorf("exit code = %d, want 0", code)
			}
		})
	}
}

// TestNotifyStatusFollowsSessionsAndSubscribers checks that STATUS= keeps up
// with what the daemon holds, for systemctl status to show.
func TestNotifyStatusFollowsSessionsAndSubscribers(t *testing.T) {
	ns := listenNotify(t)
	d := daemontest.Start(t, daemontest.Options{Env: []string{"NOTIFY_SOCKET=" + ns.Path}})
	createSession(t, d, "s")
	d.Follow(t, "sse", "/api/v1/sessions/s/events", daemontest.FollowOptions{})
	d.Follow(t, "ws", "/api/v1/sessions/s/ws", daemontest.FollowOptions{Transport: daemontest.WebSocket})

	const want = "STATUS=1 sessions, 2 subscribers"
	var seen []string
	bustest.Eventually(bustest.Showing(t, func() string { return fmt.Sprintf("%q", seen) }), patience, want, func() bool {
		n := ns.next(t, "WATCHDOG=1", "READY=1")
		seen = append(seen, n.msg)
		return n.msg == want
	})
}

// TestNotifyFailureIsLoggedNotFatal points NOTIFY_SOCKET at nothing: the
// daemon says it cannot notify, and serves and stops as usual.
func TestNotifyFailureIsLoggedNotFatal(t *testing.T) {
	nowhere := filepath.Join(t.TempDir(), "nobody-listens.sock")
	d := daemontest.Start(t, daemontest.Options{Env: []string{"NOTIFY_SOCKET=" + nowhere}})
	d.WaitStderr(t, "cannot notify the service manager", patience)
	createSession(t, d, "s")
	publish(t, d, "s", "test:one", "1")
	d.Signal(t, syscall.SIGTERM)
	if code, _ := waitExit(t, d, time.Now()); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}

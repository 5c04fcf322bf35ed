package daemon_test

// End-to-end tests of socket activation (SPEC §8) with the real
// systemd-socket-activate, which listens on the socket, waits for the first
// connection and then execs the daemon in its own process with LISTEN_FDS,
// LISTEN_PID and LISTEN_FDNAMES set, as systemd does for a socket unit
// without Accept=.

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/daemon/daemontest"
)

// exe returns the executable that process pid runs.
func exe(t *testing.T, pid int) string {
	t.Helper()
	path, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSocketActivationStartsOnFirstConnection runs the daemon twice under
// systemd-socket-activate on the same socket path. Each time the daemon
// starts only when the first client connects, serves that client and the
// events that follow on the inherited socket (and not on its --socket),
// sends READY=1 then, reloads without losing the socket, and on SIGTERM
// exits 0 leaving the socket file to its owner.
func TestSocketActivationStartsOnFirstConnection(t *testing.T) {
	activate := daemontest.SocketActivate(t)
	realActivate, err := filepath.EvalSymlinks(activate)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "lb.sock")
	own := filepath.Join(dir, "own", "lb.sock") // --socket, which activation overrides
	ns := listenNotify(t)

	for round := 1; round <= 2; round++ {
		d := daemontest.Start(t, daemontest.Options{
			Dir: dir, Socket: sock, NoSocket: true, NoWait: true,
			Wrapper: []string{activate, "--listen=" + sock, "--fdname=unix", "--setenv=NOTIFY_SOCKET=" + ns.Path},
			Args:    []string{"--socket", own},
		})
		d.WaitStderr(t, "Listening on "+sock, patience)

		// Nobody has connected: the daemon has not started.
		if got := exe(t, d.Cmd.Process.Pid); got != realActivate {
			t.Fatalf("round %d: before any connection the process runs %s, want %s still waiting", round, got, realActivate)
		}
		if rest := ns.pending(); len(rest) > 0 {
			t.Errorf("round %d: notifications before any connection: %q", round, rest)
		}

		// The first connection starts it, and is served.
		if status, body := d.Do(t, http.MethodGet, "/healthz", ""); status != http.StatusOK {
			t.Fatalf("round %d: first request = %d %s, want 200", round, status, body)
		}
		if got, want := exe(t, d.Cmd.Process.Pid), daemontest.Binary(t); got != want {
			t.Errorf("round %d: after the first connection the process runs %s, want the daemon %s", round, got, want)
		}
		if n := ns.next(t, "WATCHDOG=1", "STATUS="); n.msg != "READY=1" {
			t.Errorf("round %d: first notification = %q, want READY=1", round, n.msg)
		}
		if !strings.Contains(d.Stderr(), `msg="using activated socket" name=unix`) {
			t.Errorf("round %d: the daemon did not log that it uses the activated socket named unix", round)
		}

		// Events flow, on both transports; a reload keeps the socket.
		createSession(t, d, "s")
		zero := uint64(0)
		fl := []*daemontest.Follower{
			d.Follow(t, "sse", "/api/v1/sessions/s/events", daemontest.FollowOptions{Since: &zero}),
			d.Follow(t, "ws", "/api/v1/sessions/s/ws", daemontest.FollowOptions{Since: &zero, Transport: daemontest.WebSocket}),
		}
		waitFor(t, "both followers to open their stream", all(fl, func(f *daemontest.Follower) bool { return f.Streams() >= 1 }))
		for i := 1; i <= 3; i++ {
			if id := publish(t, d, "s", "test:tick", strconv.Itoa(i)); id != uint64(i) {
				t.Errorf("round %d: publish %d got id %d, want %d (a fresh daemon)", round, i, id, i)
			}
		}
		reloadBy[0].trigger(t, d)
		if n := ns.next(t, "WATCHDOG=1", "STATUS="); !strings.HasPrefix(n.msg, "RELOADING=1") {
			t.Errorf("round %d: notification on SIGHUP = %q, want RELOADING=1", round, n.msg)
		}
		if n := ns.next(t, "WATCHDOG=1", "STATUS="); n.msg != "READY=1" {
			t.Errorf("round %d: notification after RELOADING=1 = %q, want READY=1", round, n.msg)
		}
		publish(t, d, "s", "test:tick", "4")
		waitFor(t, "both followers to get every event", all(fl, func(f *daemontest.Follower) bool { return f.Last() >= 4 }))
		for _, f := range fl {
			f.Stop()
			if diff := cmp.Diff(upTo(4), f.IDs()); diff != "" {
				t.Errorf("round %d: %s ids (-want +got):\n%s", round, f.Name, diff)
			}
			checkEnds(t, f, "reload", 1)
			if probs := f.Problems(); len(probs) > 0 {
				t.Errorf("round %d: %s: %s", round, f.Name, strings.Join(probs, "; "))
			}
		}

		d.Signal(t, syscall.SIGTERM)
		if n := ns.next(t, "WATCHDOG=1", "STATUS="); n.msg != "STOPPING=1" {
			t.Errorf("round %d: notification on SIGTERM = %q, want STOPPING=1", round, n.msg)
		}
		if code, _ := waitExit(t, d, time.Now()); code != 0 {
			t.Errorf("round %d: exit code = %d, want 0", round, code)
		}
		if rest := ns.pending("WATCHDOG=1", "STATUS="); len(rest) > 0 {
			t.Errorf("round %d: notifications after STOPPING=1: %q", round, rest)
		}
		// The socket belongs to the service manager: still there, and
		// nobody listens on it until the next activation.
		if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
			t.Errorf("round %d: activated socket after exit: %v %v, want the socket file kept", round, fi, err)
		}
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			t.Errorf("round %d: something still listens on the socket after exit", round)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("round %d: dialing the socket after exit: %v, want connection refused", round, err)
		}
		if _, err := os.Lstat(own); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("round %d: the daemon created its --socket %s under activation: Lstat = %v", round, own, err)
		}
	}
}

// TestSocketActivationRefusesWrongSockets hands the daemon an activated
// socket it cannot serve: it exits 1 with a message that says what is wrong
// and leaves the socket file alone.
func TestSocketActivationRefusesWrongSockets(t *testing.T) {
	activate := daemontest.SocketActivate(t)
	tests := []struct {
		name    string
		flags   []string
		network string // how the test makes the first contact
		want    string
	}{
		{"datagram socket", []string{"--datagram", "--fdname=unix"}, "unixgram", "not a listening stream socket"},
		{"unix socket named tcp", []string{"--fdname=tcp"}, "unix", "activated socket tcp is a unix socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			sock := filepath.Join(dir, "lb.sock")
			d := daemontest.Start(t, daemontest.Options{
				Dir: dir, Socket: sock, NoSocket: true, NoWait: true,
				Wrapper: append([]string{activate, "--listen=" + sock}, tt.flags...),
			})
			d.WaitStderr(t, "Listening on "+sock, patience)
			c, err := net.Dial(tt.network, sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tt.network == "unixgram" {
				// A datagram socket starts the daemon on its first datagram.
				if _, err := c.Write([]byte("hello")); err != nil {
					t.Fatal(err)
				}
			}
			if code, _ := waitExit(t, d, time.Now()); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
			if log := d.Stderr(); !strings.Contains(log, tt.want) {
				t.Errorf("daemon said %q, want %q", log, tt.want)
			}
			if _, err := os.Lstat(sock); err != nil {
				t.Errorf("activated socket after the refusal: %v, want it left in place", err)
			}
		})
	}
}

// TestActivationVariablesForAnotherProcessAreIgnored starts the daemon with
// LISTEN_FDS meant for another process (LISTEN_PID is not the daemon's), as
// when a parent leaks them: the daemon creates its own socket and serves.
func TestActivationVariablesForAnotherProcessAreIgnored(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Env: []string{
		"LISTEN_PID=" + strconv.Itoa(os.Getpid()), "LISTEN_FDS=1", "LISTEN_FDNAMES=unix",
	}})
	if strings.Contains(d.Stderr(), "activated") {
		t.Errorf("the daemon took sockets meant for another process:\n%s", d.Stderr())
	}
	if fi, err := os.Lstat(d.Socket); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Errorf("own socket: %v %v, want the daemon to create it", fi, err)
	}
	createSession(t, d, "s")
	publish(t, d, "s", "test:one", "1")
}

// freeTCPPort returns a TCP port that nothing listened on a moment ago, for
// an activator that needs a fixed address.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestSocketActivationHoldsTCPToTheLoopbackRule hands the daemon an
// activated TCP socket bound to 0.0.0.0, as a socket unit with
// ListenStream=8001 does (SPEC §7): without allow_remote the daemon refuses
// to start, exactly as it refuses listen_tcp = "0.0.0.0:8001"; with it, it
// serves there, and a reload that turns allow_remote off is refused while
// the socket is served.
func TestSocketActivationHoldsTCPToTheLoopbackRule(t *testing.T) {
	activate := daemontest.SocketActivate(t)
	start := func(t *testing.T, config string) (*daemontest.Daemon, string) {
		t.Helper()
		dir := t.TempDir()
		sock := filepath.Join(dir, "lb.sock")
		port := freeTCPPort(t)
		d := daemontest.Start(t, daemontest.Options{
			Dir: dir, Socket: sock, NoSocket: true, NoWait: true, Config: config,
			Wrapper: []string{activate, "--listen=" + sock, "--listen=0.0.0.0:" + port, "--fdname=unix:tcp"},
		})
		d.WaitStderr(t, "Listening on "+sock, patience)
		d.WaitStderr(t, "Listening on 0.0.0.0:"+port, patience)
		return d, port
	}

	t.Run("refused without allow_remote", func(t *testing.T) {
		t.Parallel()
		d, port := start(t, "")
		// The first connection starts the daemon, which refuses the socket.
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if code, _ := waitExit(t, d, time.Now()); code != 1 {
			t.Errorf("exit code = %d, want 1", code)
		}
		log := d.Stderr()
		if !strings.Contains(log, "0.0.0.0:"+port) || !strings.Contains(log, "not on a loopback address") || !strings.Contains(log, "allow_remote") {
			t.Errorf("daemon said %q, want a message naming 0.0.0.0:%s, loopback and allow_remote", log, port)
		}
		if strings.Contains(log, "msg=ready") {
			t.Errorf("the daemon got ready on a non-loopback activated socket:\n%s", log)
		}
	})

	t.Run("served with allow_remote", func(t *testing.T) {
		t.Parallel()
		d, port := start(t, "allow_remote = true\n")
		d.WaitReady(t)
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+port+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /healthz on the activated TCP socket = %d, want 200", resp.StatusCode)
		}

		d.WriteConfig(t, "allow_remote = false\n")
		status, body := d.Do(t, http.MethodPost, "/api/v1/reload", "")
		if status != http.StatusBadRequest {
			t.Fatalf("POST /api/v1/reload turning allow_remote off = %d %s, want 400", status, body)
		}
		if e := daemontest.DecodeError(t, body); !strings.Contains(e.Error.Message, "allow_remote") || !strings.Contains(e.Error.Message, "0.0.0.0:"+port) {
			t.Errorf("reload refusal %q, want it to name allow_remote and 0.0.0.0:%s", e.Error.Message, port)
		}
		d.WriteConfig(t, "allow_remote = true\nring_size = 100\n")
		if status, body := d.Do(t, http.MethodPost, "/api/v1/reload", ""); status != http.StatusOK {
			t.Errorf("POST /api/v1/reload keeping allow_remote = %d %s, want 200", status, body)
		}
		d.Signal(t, syscall.SIGTERM)
		if code, _ := waitExit(t, d, time.Now()); code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
	})
}

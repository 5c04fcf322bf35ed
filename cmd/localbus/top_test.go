package main

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/wire"
)

func TestTopOncePrintsOnePlainFrame(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "busy", "t:n", 1, 3)
	publishData(t, c, "quiet", "t:n", 1, 1)
	startBin(t, "events", "--socket", d.Socket, "--session", "busy")
	waitSubscribers(t, c, "busy", 1)

	for _, args := range [][]string{{"top", "--once"}, {"top"}} { // stdout is a pipe: one frame either way
		r := runBin(t, "", append(args, "--socket", d.Socket)...)
		if r.code != 0 {
			t.Fatalf("localbus %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		for _, want := range []string{"localbus ", ", up ", "2 sessions, 1 stream, 0 consumers; events/s", "; RSS ",
			"sessions by events/s in", "SESSION  LAST ID  IN/S", "slow or lagging streams"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("localbus %v: stdout lacks %q:\n%s", args, want, r.stdout)
			}
		}
		if !regexp.MustCompile(`(?m)^busy +3 +`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^quiet +1 +`).MatchString(r.stdout) {
			t.Errorf("localbus %v: stdout lacks the sessions' rows:\n%s", args, r.stdout)
		}
		if strings.Contains(r.stdout, "\x1b") {
			t.Errorf("localbus %v: a plain frame has escape codes: %q", args, r.stdout)
		}
	}
	if r := runBin(t, "", "top", "--once", "--socket", filepath.Join(t.TempDir(), "none.sock")); r.code != exitUnreachable {
		t.Errorf("top without a daemon: exit %d, want %d", r.code, exitUnreachable)
	}
	if r := runBin(t, "", "top", "--interval", "1ms", "--socket", d.Socket); r.code != exitUsage {
		t.Errorf("top --interval 1ms: exit %d, want %d", r.code, exitUsage)
	}
}

// tmuxPane runs a command in a detached tmux session of its own server
// and reads its screen.
type tmuxPane struct {
	t    *testing.T
	sock string
}

func (p tmuxPane) tmux(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tmux", append([]string{"-S", p.sock}, args...)...).CombinedOutput()
	return string(out), err
}

// waitScreen polls the pane until cond holds for its text, for at most
// e2eWait, and returns the text.
func (p tmuxPane) waitScreen(what string, cond func(string) bool) string {
	p.t.Helper()
	var screen string
	bustest.Eventually(bustest.Showing(p.t, func() string { return screen }), e2eWait, what, func() bool {
		var err error
		screen, err = p.tmux("capture-pane", "-p", "-t", "top")
		return err == nil && cond(screen)
	})
	return screen
}

func TestTopInARealTerminal(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("needs tmux")
	}
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "alpha", "t:n", 1, 2)
	publishData(t, c, "beta", "t:n", 1, 1)
	startBin(t, "events", "--socket", d.Socket, "--session", "beta")
	waitSubscribers(t, c, "beta", 1)

	p := tmuxPane{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	t.Cleanup(func() { p.tmux("kill-server") })
	cmd := daemontest.Binary(t) + " top --interval 200ms --socket " + d.Socket
	if out, err := p.tmux("-f", os.DevNull, "new-session", "-d", "-s", "top", "-x", "100", "-y", "30",
		"-e", "TERM=xterm-256color", cmd); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	p.waitScreen("the first frame", func(s string) bool {
		return strings.Contains(s, "sessions by events/s in") && strings.Contains(s, "alpha") && strings.Contains(s, "beta")
	})
	// s changes the sort.
	p.tmux("send-keys", "-t", "top", "s")
	p.waitScreen("the sort by events/s out", func(s string) bool { return strings.Contains(s, "sessions by events/s out") })
	p.tmux("send-keys", "-t", "top", "s")
	p.waitScreen("the sort by subscribers", func(s string) bool {
		i, j := strings.Index(s, "\nbeta "), strings.Index(s, "\nalpha ")
		return strings.Contains(s, "sessions by subscribers") && i >= 0 && j > i // beta has the stream
	})
	// The selection stays on alpha (the first by events/s in, at start)
	// when the sort changes; up selects beta above it, and Enter shows its
	// stream with the follower's process.
	p.tmux("send-keys", "-t", "top", "Up")
	p.tmux("send-keys", "-t", "top", "Enter")
	p.waitScreen("beta's streams", func(s string) bool {
		return strings.Contains(s, "streams of session beta") && regexp.MustCompile(`st-\d+ +sse +localbus +\d+`).MatchString(s)
	})
	p.tmux("send-keys", "-t", "top", "Escape")
	p.waitScreen("the sessions again", func(s string) bool { return strings.Contains(s, "sessions by subscribers") })
	// A narrower terminal: every line fits it.
	if out, err := p.tmux("resize-window", "-t", "top", "-x", "50", "-y", "20"); err != nil {
		t.Fatalf("tmux resize-window: %v: %s", err, out)
	}
	p.waitScreen("a frame 50 columns wide", func(s string) bool {
		if !strings.Contains(s, "sessions by") {
			return false
		}
		for _, line := range strings.Split(s, "\n") {
			if len([]rune(line)) > 50 {
				return false
			}
		}
		return strings.Contains(s, "SESSION")
	})
	p.tmux("send-keys", "-t", "top", "q")
	bustest.Eventually(t, e2eWait, "q to end top, and its tmux session with it", func() bool {
		_, err := p.tmux("has-session", "-t", "top")
		return err != nil
	})
}

// openStalledStream opens a stream on session over network/addr (with key,
// when not "") from the test's own process and never reads it; it is
// closed at the end of the test.
func openStalledStream(t *testing.T, network, addr, key, session string) {
	t.Helper()
	conn, err := net.DialTimeout(network, addr, e2eWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := "GET " + wire.SessionEventsPath(session) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	if key != "" {
		req += "Authorization: Bearer " + key + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
}

// stallStream publishes 16 KiB events to session, one at a time, until its
// one stream, which never reads, is slow: its socket's buffers are full
// and its queue past 75%. The daemon's max_queued_bytes is 256 KiB, so
// the stream is slow a dozen events after its buffers fill, and is not
// evicted, since nothing is published after.
func stallStream(t *testing.T, c *client.Client, session string) client.Subscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	pad := strings.Repeat("x", 16<<10)
	var subs []client.Subscriber
	bustest.Eventually(t, e2eWait, "a slow stream on "+session, func() bool {
		if _, err := c.Publish(ctx, session, "t:big", map[string]string{"pad": pad}); err != nil {
			t.Fatalf("publish to %s: %v", session, err)
		}
		var err error
		subs, err = c.Subscribers(ctx, session)
		if err != nil {
			t.Fatalf("subscribers of %s: %v", session, err)
		}
		return len(subs) == 1 && subs[0].Slow
	})
	return subs[0]
}

// stalledQueueBytes keeps the daemon's queues small, so that a stream
// that never reads is slow after a few events.
var stalledQueueBytes = []string{"--max-queued-bytes", "262144"}

func TestTopShowsASlowStreamWithItsProcess(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{Args: stalledQueueBytes})
	c := apiClient(t, d)
	publishData(t, c, "calm", "t:n", 1, 1)
	publishData(t, c, "stuck", "t:n", 1, 1)
	openStalledStream(t, "unix", d.Socket, "", "stuck")
	waitSubscribers(t, c, "stuck", 1)
	slow := stallStream(t, c, "stuck")
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	comm := strings.TrimSpace(string(b))

	r := runBin(t, "", "top", "--once", "--socket", d.Socket)
	if r.code != 0 {
		t.Fatalf("top --once: exit %d, stderr %q", r.code, r.stderr)
	}
	_, section, ok := strings.Cut(r.stdout, "slow or lagging streams\n")
	if !ok {
		t.Fatalf("top --once: no slow streams' section:\n%s", r.stdout)
	}
	// The slow stream's row names the test's process (the one that opened
	// it and does not read) and its pid, under aligned headers.
	row := regexp.MustCompile(`(?m)^stuck +` + regexp.QuoteMeta(slow.ID) + ` +` + regexp.QuoteMeta(comm) +
		` +` + strconv.Itoa(os.Getpid()) + ` +\d+ +\d+\.\d KiB +yes +\d+$`)
	if !strings.HasPrefix(section, "BUS    STREAM") || !row.MatchString(section) {
		t.Errorf("top --once: the slow streams lack stuck's, %s of process %s:\n%s", slow.ID, comm, section)
	}
	if strings.Contains(section, "\ncalm ") {
		t.Errorf("top --once: calm, which has no stream, is in the slow streams:\n%s", section)
	}
	// The sessions table has the stream's lag on its session's row.
	if !regexp.MustCompile(`(?m)^stuck +\d+ +\S+ +\S+ +1 +0 +[1-9]\d* +\d+%$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^calm +1 +\S+ +\S+ +0 +0 +- +\d+%$`).MatchString(r.stdout) {
		t.Errorf("top --once: the sessions' rows lack stuck's lag:\n%s", r.stdout)
	}
}

func TestTopForACallerThatIsNotAdmin(t *testing.T) {
	t.Parallel()
	d, url, _, read := startTCP(t, stalledQueueBytes...)
	c := apiClient(t, d)
	publishData(t, c, "mine", "t:n", 1, 1)
	publishData(t, c, "theirs", "t:n", 1, 1)
	// Both streams never read and are slow: the reader's own, over TCP with
	// its key, and root's, on the socket.
	openStalledStream(t, "tcp", strings.TrimPrefix(url, "http://"), read, "mine")
	openStalledStream(t, "unix", d.Socket, "", "theirs")
	waitSubscribers(t, c, "mine", 1)
	waitSubscribers(t, c, "theirs", 1)
	mine := stallStream(t, c, "mine")
	stallStream(t, c, "theirs")

	r := runBin(t, "", "top", "--once", "--url", url, "--key", read)
	if r.code != 0 {
		t.Fatalf("top --once as a reader: exit %d, stderr %q", r.code, r.stderr)
	}
	// The counts are the daemon's; memory and journal are for admin.
	if !strings.Contains(r.stdout, "2 sessions, 2 streams, 0 consumers; events/s") || strings.Contains(r.stdout, "; RSS ") {
		t.Errorf("top --once as a reader: the header is not the reader's:\n%s", r.stdout)
	}
	head, section, ok := strings.Cut(r.stdout, "slow or lagging streams (your own; admin sees every stream)\n")
	if !ok {
		t.Fatalf("top --once as a reader: no slow streams' section of its own:\n%s", r.stdout)
	}
	// Its own stream, with its key's name; not root's, whose peer it may
	// not see.
	row := regexp.MustCompile(`(?m)^mine +` + regexp.QuoteMeta(mine.ID) + ` +tcp 127\.0\.0\.1:\d+ \(reader\) +- +\d+ +\d+\.\d KiB +yes +\d+$`)
	if !row.MatchString(section) || strings.Contains(section, "theirs") {
		t.Errorf("top --once as a reader: the slow streams are not its own alone:\n%s", section)
	}
	// Both sessions are listed with their streams; the lag is shown for its
	// own stream only.
	if !regexp.MustCompile(`(?m)^mine +\d+ +\S+ +\S+ +1 +0 +[1-9]\d* +\d+%$`).MatchString(head) ||
		!regexp.MustCompile(`(?m)^theirs +\d+ +\S+ +\S+ +1 +0 +- +\d+%$`).MatchString(head) {
		t.Errorf("top --once as a reader: the sessions' rows:\n%s", head)
	}
	// The admin's view of the same daemon lists both.
	r = runBin(t, "", "top", "--once", "--socket", d.Socket)
	if !regexp.MustCompile(`(?m)^theirs +st-\d+ +\S+ +\d+ .* yes +\d+$`).MatchString(r.stdout) {
		t.Errorf("top --once as admin lacks root's slow stream:\n%s", r.stdout)
	}
}

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
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
	deadline := time.Now().Add(e2eWait)
	var screen string
	for time.Now().Before(deadline) {
		var err error
		screen, err = p.tmux("capture-pane", "-p", "-t", "top")
		if err == nil && cond(screen) {
			return screen
		}
		time.Sleep(50 * time.Millisecond) // polling a screen: nothing to wait on
	}
	p.t.Fatalf("waiting for %s; the screen:\n%s", what, screen)
	return ""
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
	deadline := time.Now().Add(e2eWait)
	for {
		if _, err := p.tmux("has-session", "-t", "top"); err != nil {
			break // q ended top, and its session with it
		}
		if time.Now().After(deadline) {
			t.Fatal("q did not end top")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

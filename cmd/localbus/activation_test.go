package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/localbus/localbus/daemon/daemontest"
)

// TestEventsFollowsARestartUnderSocketActivationWithoutLoss restarts a
// durable daemon under systemd-socket-activate while "localbus events"
// follows a session: the socket stays, the command reconnects to it when the
// next daemon starts, resumes with its last id and epoch, and prints every
// id exactly once, with no gap reported.
func TestEventsFollowsARestartUnderSocketActivationWithoutLoss(t *testing.T) {
	t.Parallel()
	daemontest.SocketActivate(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "lb.sock")
	start := func() *daemontest.Daemon { return daemontest.StartActivated(t, dir, sock, e2eWait) }
	for _, tr := range []string{"sse", "ws"} {
		t.Run(tr, func(t *testing.T) {
			d := start()
			c := apiClient(t, d)
			session := "act-" + tr
			publishData(t, c, session, "t:n", 1, 5)
			p := startBin(t, "events", "--socket", sock, "--session", session, "--since", "0", "--raw", "--transport", tr)
			got := numbers(t, p, 5)

			d.Signal(t, syscall.SIGTERM)
			if err := d.Wait(t, e2eWait); err != nil {
				t.Fatalf("daemon exit: %v", err)
			}
			p.waitStderr(t, "localbus: the daemon is shutting down; reconnecting when it is back")

			d2 := start()
			publishData(t, apiClient(t, d2), session, "t:n", 6, 10)
			got = append(got, numbers(t, p, 5)...)
			checkSequence(t, got, 1, 10)
			if strings.Contains(p.Stderr(), "gap") {
				t.Errorf("stderr reports a gap across a durable restart:\n%s", p.Stderr())
			}
			d2.Stop(t)
		})
	}
}

package daemontest

import (
	"os/exec"
	"testing"
	"time"
)

// SocketActivate returns the path of systemd-socket-activate; the test is
// skipped when it is not installed (it ships with systemd).
func SocketActivate(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate is not in PATH (Debian package systemd); skipping the socket activation test")
	}
	return path
}

// StartActivated starts a durable daemon with state in dir under
// systemd-socket-activate, which listens on sock and hands it over as
// "unix". It returns once the activator listens and a first connection
// has started the daemon, waiting for each up to wait. Call it again on
// the same dir and sock to restart: the socket path stays.
func StartActivated(t testing.TB, dir, sock string, wait time.Duration) *Daemon {
	t.Helper()
	d := Start(t, Options{
		Dir: dir, Socket: sock, NoSocket: true, NoWait: true, Durable: true,
		Wrapper: []string{SocketActivate(t), "--listen=" + sock, "--fdname=unix"},
	})
	d.WaitStderr(t, "Listening on "+sock, wait)
	d.WaitReady(t) // the first connection starts the daemon
	return d
}

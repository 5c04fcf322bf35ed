package daemon_test

import (
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
)

// TestReloadOfAFIFOConfigIsRefusedAndSIGTERMStillStops replaces a running
// daemon's configuration file with a FIFO: SIGHUP and POST /api/v1/reload
// are refused naming it, the daemon goes on serving, and SIGTERM stops it.
func TestReloadOfAFIFOConfigIsRefusedAndSIGTERMStillStops(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	if err := os.Remove(d.Config); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(d.Config, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	d.Signal(t, syscall.SIGHUP)
	waitFor(t, "the daemon to refuse the reload", func() bool { return strings.Contains(d.Stderr(), "reload refused") })
	if line := lastLine(d.Stderr(), "reload refused"); !strings.Contains(line, "FIFO") {
		t.Errorf("SIGHUP logged %q, which does not say the config is a FIFO", line)
	}
	status, body := d.Do(t, http.MethodPost, "/api/v1/reload", "")
	if status != http.StatusBadRequest || !strings.Contains(string(body), "FIFO") {
		t.Errorf("POST /api/v1/reload = %d %s, want 400 naming the FIFO", status, body)
	}
	createSession(t, d, "s")
	publish(t, d, "s", "test:after", `{}`)
	d.Signal(t, syscall.SIGTERM)
	if err := d.Wait(t, 15*time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
}

package systemd

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// watchdogRun is RunWatchdog running in a goroutine of the test's.
type watchdogRun struct {
	cancel context.CancelFunc
	done   chan error
	ended  bool
	err    error
}

// startWatchdog runs RunWatchdog in a goroutine; the test's cleanup cancels
// it and waits for it.
func startWatchdog(t *testing.T, healthy func() bool) *watchdogRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &watchdogRun{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- RunWatchdog(ctx, NewNotifier(), healthy) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// wait returns RunWatchdog's result, failing the test if it has not returned
// within timeout.
func (r *watchdogRun) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	if r.ended {
		return r.err
	}
	select {
	case r.err = <-r.done:
		r.ended = true
		return r.err
	case <-time.After(timeout):
		r.cancel()
		r.ended = true
		select {
		case <-r.done:
			t.Fatalf("RunWatchdog did not return within %v, only once cancelled", timeout)
		case <-time.After(5 * time.Second):
			t.Fatalf("RunWatchdog did not return within %v, nor once cancelled", timeout)
		}
		return nil
	}
}

// stop cancels RunWatchdog and returns its result.
func (r *watchdogRun) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	return r.wait(t, 5*time.Second)
}

func TestRunWatchdogPingsAtHalfTheInterval(t *testing.T) {
	c := listenNotify(t)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))

	start := time.Now()
	r := startWatchdog(t, nil)
	for i := range 2 {
		if got := readNotify(t, c); got != "WATCHDOG=1" {
			t.Fatalf("ping %d = %q, want WATCHDOG=1", i+1, got)
		}
		// A ticker never fires early: n pings take at least n half-intervals.
		if min := time.Duration(i+1) * 50 * time.Millisecond; time.Since(start) < min {
			t.Errorf("ping %d after %v, want at least %v", i+1, time.Since(start), min)
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("RunWatchdog after cancel = %v, want nil", err)
	}
}

func TestRunWatchdogSkipsUnhealthyTicks(t *testing.T) {
	c := listenNotify(t)
	t.Setenv("WATCHDOG_USEC", "100000")
	os.Unsetenv("WATCHDOG_PID") // absent PID means this process

	var calls atomic.Int32
	r := startWatchdog(t, func() bool { return calls.Add(1) > 2 })
	if got := readNotify(t, c); got != "WATCHDOG=1" {
		t.Fatalf("ping = %q, want WATCHDOG=1", got)
	}
	if n := calls.Load(); n < 3 {
		t.Errorf("first ping after %d health checks, want it after the third (two unhealthy ticks skipped)", n)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("RunWatchdog after cancel = %v, want nil", err)
	}
}

func TestRunWatchdogReturnsAtOnceWithoutWatchdog(t *testing.T) {
	tests := []struct {
		name    string
		usec    string // "" unsets WATCHDOG_USEC
		pid     string // "" unsets WATCHDOG_PID
		wantErr string
	}{
		{name: "unset"},
		{name: "usec unset, pid is this process", pid: strconv.Itoa(os.Getpid())},
		{name: "another process", usec: "100000", pid: strconv.Itoa(os.Getpid() + 1)},
		{name: "malformed usec", usec: "soon", wantErr: "systemd: watchdog: "},
		{name: "zero usec", usec: "0", wantErr: "systemd: watchdog: "},
		{name: "malformed pid", usec: "100000", pid: "me", wantErr: "systemd: watchdog: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listenNotify(t)
			setOrUnset(t, "WATCHDOG_USEC", tt.usec)
			setOrUnset(t, "WATCHDOG_PID", tt.pid)

			// The context stays live: RunWatchdog must return on its own.
			err := startWatchdog(t, nil).wait(t, 5*time.Second)
			if tt.wantErr == "" && err != nil {
				t.Errorf("RunWatchdog = %v, want nil", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)) {
				t.Errorf("RunWatchdog = %v, want an error starting %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunWatchdogStopsWhenPingFails(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone.sock"))
	t.Setenv("WATCHDOG_USEC", "100000")
	setOrUnset(t, "WATCHDOG_PID", "")

	err := startWatchdog(t, nil).wait(t, 5*time.Second)
	if err == nil || !strings.HasPrefix(err.Error(), "systemd: notify WATCHDOG: ") {
		t.Errorf("RunWatchdog = %v, want a systemd: notify WATCHDOG error", err)
	}
}

// setOrUnset sets key to v for the test, or unsets it when v is empty; either
// way the old value comes back afterwards.
func setOrUnset(t *testing.T, key, v string) {
	t.Helper()
	t.Setenv(key, v)
	if v == "" {
		os.Unsetenv(key)
	}
}

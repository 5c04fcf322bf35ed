package systemd

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listenNotify stands in for the service manager: it binds a datagram socket
// in a temporary directory and points NOTIFY_SOCKET at it.
func listenNotify(t *testing.T) *net.UnixConn {
	t.Helper()
	p := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", p)
	return c
}

// readNotify returns the next datagram, failing the test if none comes
// within a few seconds.
func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("reading notification: %v", err)
	}
	return string(buf[:n])
}

func monotonicUsec(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Sec*1_000_000 + ts.Nsec/1_000
}

func TestNotifierSendsOneDatagramPerState(t *testing.T) {
	tests := []struct {
		name string
		send func(*Notifier) error
		want string
	}{
		{"ready", (*Notifier).Ready, "READY=1"},
		{"stopping", (*Notifier).Stopping, "STOPPING=1"},
		{"watchdog", (*Notifier).Watchdog, "WATCHDOG=1"},
		{"status", func(n *Notifier) error { return n.Status("3 sessions, 7 subscribers") }, "STATUS=3 sessions, 7 subscribers"},
		{"status on one line", func(n *Notifier) error { return n.Status("a\nb\r\nc\rd") }, "STATUS=a b c d"},
		{"empty status", func(n *Notifier) error { return n.Status("") }, "STATUS="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := listenNotify(t)
			if err := tt.send(NewNotifier()); err != nil {
				t.Fatalf("send = %v, want nil", err)
			}
			if got := readNotify(t, c); got != tt.want {
				t.Errorf("datagram = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNotifierReloadingCarriesMonotonicTime(t *testing.T) {
	c := listenNotify(t)
	before := monotonicUsec(t)
	if err := NewNotifier().Reloading(); err != nil {
		t.Fatalf("Reloading = %v, want nil", err)
	}
	after := monotonicUsec(t)

	got := readNotify(t, c)
	lines := strings.Split(got, "\n")
	if len(lines) != 2 || lines[0] != "RELOADING=1" || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") {
		t.Fatalf("datagram = %q, want RELOADING=1 and MONOTONIC_USEC= in one datagram", got)
	}
	usec, err := strconv.ParseInt(strings.TrimPrefix(lines[1], "MONOTONIC_USEC="), 10, 64)
	if err != nil {
		t.Fatalf("MONOTONIC_USEC in %q: %v", got, err)
	}
	if usec < before || usec > after {
		t.Errorf("MONOTONIC_USEC = %d, want within [%d, %d]", usec, before, after)
	}
}

func TestNotifierZeroAndNilValuesWork(t *testing.T) {
	c := listenNotify(t)
	var zero Notifier
	if err := zero.Ready(); err != nil {
		t.Fatalf("zero Notifier: Ready = %v, want nil", err)
	}
	if got := readNotify(t, c); got != "READY=1" {
		t.Errorf("zero Notifier: datagram = %q, want READY=1", got)
	}
	var nilN *Notifier
	if err := nilN.Stopping(); err != nil {
		t.Fatalf("nil Notifier: Stopping = %v, want nil", err)
	}
	if got := readNotify(t, c); got != "STOPPING=1" {
		t.Errorf("nil Notifier: datagram = %q, want STOPPING=1", got)
	}
	if !zero.Enabled() {
		t.Error("Enabled() = false with NOTIFY_SOCKET set, want true")
	}
}

func TestNotifierIsSilentWithoutNotifySocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "") // restored after the test
	os.Unsetenv("NOTIFY_SOCKET")
	n := NewNotifier()
	if n.Enabled() {
		t.Error("Enabled() = true without NOTIFY_SOCKET, want false")
	}
	for name, send := range map[string]func() error{
		"Ready":     n.Ready,
		"Status":    func() error { return n.Status("x") },
		"Reloading": n.Reloading,
		"Stopping":  n.Stopping,
		"Watchdog":  n.Watchdog,
	} {
		if err := send(); err != nil {
			t.Errorf("%s() = %v, want nil", name, err)
		}
	}
}

func TestNotifierReportsUnreachableSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone.sock"))
	err := NewNotifier().Ready()
	if err == nil || !strings.HasPrefix(err.Error(), "systemd: notify READY: ") {
		t.Errorf("Ready() = %v, want a systemd: notify READY error", err)
	}
}

package systemd

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// A Notifier tells the service manager about the daemon's state with
// sd_notify messages sent to the datagram socket named by NOTIFY_SOCKET.
//
// The zero value and a nil *Notifier are ready to use. NOTIFY_SOCKET is read
// at every call and left set. When it is unset the process is not running
// under systemd (or not as Type=notify), and every method does nothing and
// returns nil: callers need not check. A non-nil error means the variable is
// set but the message could not be sent.
//
// A Notifier is safe for concurrent use; each message is one datagram.
type Notifier struct{}

// NewNotifier returns a Notifier for the socket in NOTIFY_SOCKET.
func NewNotifier() *Notifier { return &Notifier{} }

// Enabled reports whether NOTIFY_SOCKET is set, that is whether messages go
// anywhere.
func (n *Notifier) Enabled() bool { return os.Getenv("NOTIFY_SOCKET") != "" }

// Ready sends READY=1: startup, or a reload, is complete and the daemon is
// serving.
func (n *Notifier) Ready() error { return n.send(daemon.SdNotifyReady) }

// Status sends STATUS=s, a one-line summary shown by systemctl status.
// Line breaks in s are replaced by spaces, since a newline would end the
// field.
func (n *Notifier) Status(s string) error {
	s = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
	return n.send("STATUS=" + s)
}

// Reloading sends RELOADING=1 with MONOTONIC_USEC= set to the current
// CLOCK_MONOTONIC time in microseconds, in one datagram. Send Ready once the
// reload is done, whether it succeeded or not.
func (n *Notifier) Reloading() error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("systemd: read monotonic clock: %w", err)
	}
	usec := ts.Sec*1_000_000 + ts.Nsec/1_000
	return n.send(daemon.SdNotifyReloading + "\nMONOTONIC_USEC=" + strconv.FormatInt(usec, 10))
}

// Stopping sends STOPPING=1: the daemon has begun to shut down.
func (n *Notifier) Stopping() error { return n.send(daemon.SdNotifyStopping) }

// Watchdog sends WATCHDOG=1, resetting the service's watchdog timer. See
// [RunWatchdog] for the loop that sends it.
func (n *Notifier) Watchdog() error { return n.send(daemon.SdNotifyWatchdog) }

func (n *Notifier) send(state string) error {
	// SdNotify reports (false, nil) when NOTIFY_SOCKET is unset: not under
	// systemd, nothing to do.
	if _, err := daemon.SdNotify(false, state); err != nil {
		field, _, _ := strings.Cut(state, "=")
		return fmt.Errorf("systemd: notify %s: %w", field, err)
	}
	return nil
}

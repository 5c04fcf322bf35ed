package systemd

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// RunWatchdog keeps the service manager's watchdog fed: while ctx is not
// done it sends WATCHDOG=1 through n every half of the interval in
// WATCHDOG_USEC, on every tick at which healthy (when not nil) returns true.
// A tick at which healthy returns false sends nothing, so a daemon that stays
// unhealthy for the whole interval is restarted by the service manager.
//
// RunWatchdog blocks until ctx is done and then returns nil: the caller runs
// it in a goroutine of its own and waits for it after cancelling ctx. It
// returns nil at once when no watchdog applies to this process (WATCHDOG_USEC
// unset, or WATCHDOG_PID naming another process). It returns an error at once
// when WATCHDOG_USEC or WATCHDOG_PID is malformed, and as soon as a
// notification cannot be sent; the service manager then acts on the missed
// pings as configured. A nil n is the zero [Notifier]. WATCHDOG_USEC and
// WATCHDOG_PID are left set.
//
// healthy is called from RunWatchdog's goroutine and must not block for long.
func RunWatchdog(ctx context.Context, n *Notifier, healthy func() bool) error {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return fmt.Errorf("systemd: watchdog: %w", err)
	}
	if interval <= 0 {
		return nil
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Shutdown is not an error.
			return nil
		case <-t.C:
			if healthy != nil && !healthy() {
				continue
			}
			if err := n.Watchdog(); err != nil {
				return err
			}
		}
	}
}

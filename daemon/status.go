package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// statusInterval is how often the daemon checks whether its STATUS= line
// changed (sessions, subscribers) and tells the service manager if so.
const statusInterval = 2 * time.Second

// notifyStatus tells the service manager what the daemon holds, if that
// changed since it last did.
func (d *Daemon) notifyStatus() {
	status := fmt.Sprintf("%d sessions, %d subscribers", d.hub.Len(), d.hub.Subscribers())
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	if status == d.lastStatus {
		return
	}
	d.lastStatus = status
	d.notify("STATUS", d.notifier.Status(status))
}

// reportStatus keeps STATUS= current until ctx is done.
func (d *Daemon) reportStatus(ctx context.Context) {
	t := time.NewTicker(statusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.notifyStatus()
		}
	}
}

// notify logs err, the failure of a notification to the service manager.
// The daemon goes on serving: the manager acts on what it did not hear (a
// start or reload timeout, a missed watchdog). Only the first failure is
// logged as a warning; NOTIFY_SOCKET does not change, so the rest would say
// the same.
func (d *Daemon) notify(what string, err error) {
	if err == nil {
		return
	}
	level := slog.LevelDebug
	if d.notifyFailed.CompareAndSwap(false, true) {
		level = slog.LevelWarn
	}
	d.log.Log(context.Background(), level, "cannot notify the service manager", "state", what, "err", err)
}

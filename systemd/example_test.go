package systemd_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/localbus/localbus/systemd"
)

// A daemon's lifetime under systemd: take the activated sockets (or make its
// own), say READY=1 once serving, feed the watchdog from a goroutine it waits
// for, and say STOPPING=1 on the way out. Outside systemd every call is a
// no-op.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	ls, activated, err := systemd.Listeners()
	if err != nil {
		slog.Error("socket activation", "err", err)
		os.Exit(1)
	}
	// systemd owns these sockets' files: never unlink them. Without
	// activation, create the socket, set its mode and unlink it on exit.
	unixLns := ls[systemd.NameUnix]
	_, _ = unixLns, activated // serve on them

	n := systemd.NewNotifier()
	if err := n.Ready(); err != nil {
		slog.Warn("sd_notify", "err", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := systemd.RunWatchdog(ctx, n, func() bool { return true }); err != nil {
			slog.Error("watchdog", "err", err)
		}
	})

	<-ctx.Done()
	_ = n.Stopping()
	wg.Wait()
}

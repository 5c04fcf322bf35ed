package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/localbus/localbus/systemd"
)

// listen returns the listeners to serve: inherited ones under socket
// activation, else the daemon's own socket (and TCP address, if set).
// cleanup closes them; an own socket file is unlinked then, an inherited one
// never.
func (d *Daemon) listen() (ls []net.Listener, cleanup func(), err error) {
	inherited, activated, err := systemd.Listeners()
	if err != nil {
		return nil, nil, err
	}
	cleanup = func() {
		for _, l := range ls {
			l.Close()
		}
	}
	if activated {
		for name, group := range inherited {
			for _, l := range group {
				d.log.Info("using activated socket", "name", name, "addr", l.Addr().String())
				ls = append(ls, l)
			}
		}
		// An inherited TCP socket is held to the rule of listen_tcp
		// (SPEC §7): loopback only, unless allow_remote is set.
		d.remote = nonLoopback(ls)
		if len(d.remote) > 0 && !d.cfg.AllowRemote {
			cleanup()
			return nil, nil, fmt.Errorf("activated TCP socket on %s is not on a loopback address; set allow_remote to serve it, or bind it to 127.0.0.1 or ::1 in the socket unit",
				strings.Join(d.remote, ", "))
		}
		if d.cfg.ListenTCP != "" && len(inherited[systemd.NameTCP]) == 0 {
			d.log.Warn("listen_tcp is ignored under socket activation; add a ListenStream= with FileDescriptorName=tcp to the socket unit",
				"listen_tcp", d.cfg.ListenTCP)
		}
		return ls, cleanup, nil
	}
	u, stale, err := listenUnix(d.cfg.Socket, d.cfg.SocketMode, d.cfg.SocketGroup)
	if err != nil {
		return nil, nil, err
	}
	if stale {
		d.log.Info("replaced a stale socket that nothing listened on", "socket", d.cfg.Socket)
	}
	ls = append(ls, u)
	d.log.Info("listening", "socket", d.cfg.Socket, "mode", fmt.Sprintf("%04o", d.cfg.SocketMode))
	if d.cfg.ListenTCP != "" {
		t, err := net.Listen("tcp", d.cfg.ListenTCP)
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("listen_tcp: %w", err)
		}
		ls = append(ls, t)
		d.log.Info("listening", "tcp", t.Addr().String())
	}
	d.remote = nonLoopback(ls)
	return ls, cleanup, nil
}

// serve runs the HTTP server on every listener until ctx is done, handling
// SIGHUP as reload, then shuts down.
func (d *Daemon) serve(ctx context.Context, listeners []net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Requests do not get ctx: the signal that ends it must not cut streams
	// off before shutdown has told them why (stream:closed). Their context
	// ends when shutdown is over, or when its time is up.
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	d.server.BaseContext = func(net.Listener) context.Context { return base }

	var wg sync.WaitGroup
	serveErr := make(chan error, len(listeners))
	for _, l := range listeners {
		wg.Go(func() {
			// Shutdown closes the listeners itself, before it calls
			// http.Server.Shutdown.
			err := d.server.Serve(l)
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				serveErr <- err
			}
		})
	}
	wg.Go(func() {
		if err := systemd.RunWatchdog(ctx, d.notifier, nil); err != nil {
			d.log.Warn("watchdog", "err", err)
		}
	})
	wg.Go(func() { d.expireSessions(ctx) })
	wg.Go(func() { d.sampleRates(ctx) })
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	d.notify("READY", d.notifier.Ready())
	d.notifyStatus()
	d.log.Info("ready", "version", d.opts.Version)
	if d.notifier.Enabled() {
		wg.Go(func() { d.reportStatus(ctx) })
	}

	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-serveErr:
			d.log.Error("serve", "err", err)
			break loop
		case <-hup:
			_, _ = d.reload() // logged by reload
		}
	}
	d.shutdown(listeners, cancelRequests)
	cancel()
	wg.Wait()
	return err
}

// expireSessions deletes idle sessions a publish created (auto_session_ttl,
// SPEC §2) and forgets consumers that had no stream for consumer_ttl
// (§2.4), every expiryInterval of the shorter ttl in force, until ctx is
// done. The hub logs each one and announces the sessions on the global
// bus.
func (d *Daemon) expireSessions(ctx context.Context) {
	for {
		t := time.NewTimer(min(expiryInterval(d.hub.AutoSessionTTL()), expiryInterval(d.hub.ConsumerTTL())))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case now := <-t.C:
			d.hub.ExpireConsumers(now)
			d.hub.ExpireIdle(now)
		}
	}
}

// expiryInterval is how often sessions are checked for expiry under ttl:
// a tenth of it, at most a minute (also when expiry is off, so that a
// reload turning it on takes effect within a minute).
func expiryInterval(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return time.Minute
	}
	return min(ttl/10, time.Minute)
}

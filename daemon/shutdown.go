package daemon

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/localbus/localbus/bus"
)

// shutdown stops accepting, ends every stream with stream:closed (shutdown)
// and WebSocket 1001, lets in-flight requests finish and waits for streams,
// all within shutdown_timeout. Past it, it calls cancelRequests and closes
// what is left.
func (d *Daemon) shutdown(listeners []net.Listener, cancelRequests context.CancelFunc) {
	// Under reloadMu, so that a reload in progress finishes first (its
	// READY=1 must not follow STOPPING=1) and none starts after.
	d.reloadMu.Lock()
	d.stopping = true
	timeout := d.cfg.ShutdownTimeout
	d.reloadMu.Unlock()
	d.notify("STOPPING", d.notifier.Stopping())
	d.log.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	d.handler.Drain()
	if d.upstream != nil {
		// Stops exporting and importing, and writes the cursors, while
		// the buses are still open.
		d.upstream.Close()
	}
	// Stop accepting, and close each connection after its answer.
	// Connections still in a listener's backlog are refused (reset); under
	// socket activation they wait for the next start.
	d.server.SetKeepAlivesEnabled(false)
	for _, l := range listeners {
		l.Close()
	}
	done := make(chan error, 1)
	go func() {
		// http.Server.Shutdown closes a connection whose request it reads
		// after it began without answering it, so let every request that
		// reached the daemon arrive and be answered first.
		err := d.conns.quiet(ctx, newConnGrace)
		if err == nil {
			// The listeners are closed already.
			if err = d.server.Shutdown(ctx); errors.Is(err, net.ErrClosed) {
				err = nil
			}
		}
		if err == nil {
			err = d.handler.Wait(ctx)
		}
		done <- err
	}()
	// A stream that got past the handler's drain check just before Drain
	// subscribes after the first EndStreams; end such latecomers as well,
	// until every stream is gone.
	d.hub.EndStreams(bus.EndShutdown)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			d.hub.EndStreams(bus.EndShutdown)
		}
	}
	if err != nil {
		d.log.Warn("shutdown timed out; closing what is left", "timeout", timeout)
		cancelRequests()
		d.server.Close()
	}
	d.hub.Close()
	d.closeJournal()
}

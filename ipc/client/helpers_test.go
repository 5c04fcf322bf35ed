package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/ipctest"
)

// wait bounds every wait of these tests.
const wait = 10 * time.Second

// shortDir returns a temporary directory short enough for a socket path
// (sun_path holds 108 bytes).
func shortDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if len(dir) > 80 {
		d, err := os.MkdirTemp("", "lbc")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	return dir
}

// A daemon is the router on a Unix socket, stoppable and restartable on the
// same socket like the real daemon with durability "memory": a restart
// brings a new hub, so buses start again at id 1 on new epochs.
type daemon struct {
	t      testing.TB
	sock   string
	limits bus.Limits
	hub    *hub.Hub
	h      *ipc.Handler
	srv    *http.Server
	served chan error
}

func startDaemon(t testing.TB, sock string, limits bus.Limits) *daemon {
	t.Helper()
	d := &daemon{t: t, sock: sock, limits: limits}
	d.start()
	t.Cleanup(d.stop)
	return d
}

func (d *daemon) start() {
	d.t.Helper()
	h, err := hub.New(hub.Options{Limits: d.limits, AutoCreate: true})
	if err != nil {
		d.t.Fatalf("hub.New: %v", err)
	}
	d.hub = h
	d.h = ipc.New(ipc.Options{
		Hub:    h,
		Logger: slog.New(slog.DiscardHandler),
		Reload: func(context.Context) ([]string, error) {
			h.EndStreams(bus.EndReload)
			return nil, nil
		},
		Settings: ipc.Settings{
			Authenticate: ipctest.AllowAll,
		},
	})
	ln, err := net.Listen("unix", d.sock)
	if err != nil {
		d.t.Fatalf("listen: %v", err)
	}
	d.srv = &http.Server{Handler: d.h}
	d.served = make(chan error, 1)
	go func() { d.served <- d.srv.Serve(ln) }()
}

// stop shuts down like the daemon: stream:closed (shutdown) to every
// stream, then the server. It is idempotent.
func (d *daemon) stop() {
	if d.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	d.h.Drain()
	d.hub.EndStreams(bus.EndShutdown)
	if err := d.srv.Shutdown(ctx); err != nil {
		d.t.Errorf("Shutdown: %v", err)
	}
	if err := d.h.Wait(ctx); err != nil {
		d.t.Errorf("streams still open after shutdown: %v", err)
	}
	if err := <-d.served; !errors.Is(err, http.ErrServerClosed) {
		d.t.Errorf("Serve = %v", err)
	}
	d.hub.Close()
	d.srv = nil
}

func (d *daemon) restart() {
	d.t.Helper()
	d.stop()
	d.start()
}

// startDaemonClient starts a daemon with limits on a socket of its own and
// returns it with a client of it.
func startDaemonClient(t testing.TB, limits bus.Limits) (*daemon, *client.Client) {
	t.Helper()
	sock := filepath.Join(shortDir(t), "lb.sock")
	d := startDaemon(t, sock, limits)
	return d, newClient(t, sock)
}

// newClient returns a client of the socket whose idle connections are
// closed when the test ends.
func newClient(t testing.TB, sock string) *client.Client {
	c := &client.Client{Socket: sock}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// openStream opens a stream that is closed when the test ends. The
// context given to Stream bounds the stream's whole life, so it is not
// a timeout.
func openStream(t testing.TB, c *client.Client, opts client.StreamOptions) *client.Stream {
	t.Helper()
	st, err := c.Stream(context.Background(), opts)
	if err != nil {
		t.Fatalf("Stream(%+v): %v", opts, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// next returns the next frame, failing the test after wait.
func next(t testing.TB, st *client.Stream) client.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	f, err := st.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return f
}

// nextOf skips frames until one of type typ, failing after wait.
func nextOf(t testing.TB, st *client.Stream, typ string) client.Frame {
	t.Helper()
	for {
		if f := next(t, st); f.Type == typ {
			return f
		}
	}
}

// publishN publishes n events of type typ to session and returns their ids.
func publishN(t testing.TB, c *client.Client, session, typ string, n int) []uint64 {
	t.Helper()
	events := make([]client.Event, n)
	for i := range events {
		events[i] = client.Event{Type: typ, Data: i}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := c.PublishBatch(ctx, session, events)
	if err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	return r.IDs
}

func ptr[T any](v T) *T { return &v }

// fakeServer serves handler on a Unix socket in a temporary directory
// until the test ends.
func fakeServer(t testing.TB, handler http.Handler) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "fake.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return sock
}

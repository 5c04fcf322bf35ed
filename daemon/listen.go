package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// listenUnix creates the daemon's own Unix socket at path (SPEC §8): the
// directory is made 0750 when missing; a live daemon answering on path is an
// error that says so; a stale socket file is replaced, and stale reports
// it; the socket gets mode and group. The listener unlinks the file when
// closed.
func listenUnix(path string, mode os.FileMode, group string) (ln *net.UnixListener, stale bool, err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, false, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, false, fmt.Errorf("%s exists and is not a socket; not touching it", path)
		}
		if live(path) {
			return nil, false, fmt.Errorf("another localbus daemon is already serving on %s; stop it first or choose another --socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, false, fmt.Errorf("removing stale socket: %w", err)
		}
		stale = true
	}
	ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, false, err
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, false, fmt.Errorf("socket mode: %w", err)
	}
	if group != "" {
		gid, err := lookupGroup(group)
		if err == nil {
			err = os.Chown(path, -1, gid)
		}
		if err != nil {
			ln.Close()
			return nil, false, fmt.Errorf("socket group %q: %w", group, err)
		}
	}
	return ln, stale, nil
}

// nonLoopback returns the addresses of the TCP listeners in ls that are
// not bound to a loopback address: a wildcard (0.0.0.0, ::) or any other
// interface's address.
func nonLoopback(ls []net.Listener) []string {
	var out []string
	for _, l := range ls {
		if a, ok := l.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
			out = append(out, a.String())
		}
	}
	return out
}

// live reports whether something accepts connections on the socket at path.
func live(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		// ECONNREFUSED: a file nobody listens on; anything else (EACCES)
		// we treat as live rather than delete what we do not understand.
		return !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT)
	}
	c.Close()
	return true
}

func lookupGroup(group string) (int, error) {
	if gid, err := strconv.Atoi(group); err == nil {
		return gid, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}

// newConnGrace is how long shutdown waits for a connection that was
// accepted before the listeners closed to send its request.
const newConnGrace = time.Second

// A connTracker follows the HTTP server's connections through its
// ConnState hook, so that shutdown can wait for every request that reached
// the daemon before it calls http.Server.Shutdown, which closes without an
// answer a connection whose request it reads after it began.
type connTracker struct {
	mu    sync.Mutex
	conns map[net.Conn]connEntry // the new and active connections
	// changed has a value when a connection changed state since the last
	// receive.
	changed chan struct{}
}

// A connEntry is a connection's state and when it entered it.
type connEntry struct {
	state http.ConnState
	since time.Time
}

func newConnTracker() *connTracker {
	return &connTracker{conns: make(map[net.Conn]connEntry), changed: make(chan struct{}, 1)}
}

// hook is the http.Server ConnState hook. Idle, hijacked and closed
// connections are no longer the tracker's business: the server closes idle
// ones at shutdown, and the router waits for hijacked ones (WebSocket).
func (t *connTracker) hook(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	switch s {
	case http.StateNew, http.StateActive:
		t.conns[c] = connEntry{state: s, since: time.Now()}
	default:
		delete(t.conns, c)
	}
	t.mu.Unlock()
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// quiet waits until no connection is serving a request and none that was
// accepted less than grace ago is yet to send one, or until ctx is done.
// Stop accepting and disable keep-alives first, or it may never return
// before ctx does.
func (t *connTracker) quiet(ctx context.Context, grace time.Duration) error {
	for {
		busy, wake := t.busy(time.Now(), grace)
		if !busy {
			return nil
		}
		var timeout <-chan time.Time
		if wake > 0 {
			timeout = time.After(wake)
		}
		select {
		case <-t.changed:
		case <-timeout:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// busy reports whether a connection is serving a request or is new and
// younger than grace at now; wake is when the youngest new one's grace
// ends, 0 if no new connection holds it.
func (t *connTracker) busy(now time.Time, grace time.Duration) (busy bool, wake time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.conns {
		if e.state == http.StateActive {
			return true, 0
		}
		if left := grace - now.Sub(e.since); left > 0 {
			busy = true
			wake = max(wake, left)
		}
	}
	return busy, wake
}

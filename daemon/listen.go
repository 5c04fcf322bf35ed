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

	"golang.org/x/sys/unix"
)

// listenUnix creates the daemon's own Unix socket at path (SPEC §7, §8): a
// missing directory is made 0750 with group (makeSocketDir); a live daemon
// answering on path is an error that says so; a stale socket file is
// replaced, and stale reports it. The socket is created with mode (bindUnix)
// and then given group (chownSocket). The listener unlinks the file when
// closed.
func listenUnix(path string, mode os.FileMode, group string) (ln *net.UnixListener, stale bool, err error) {
	gid := -1
	if group != "" {
		if gid, err = lookupGroup(group); err != nil {
			return nil, false, fmt.Errorf("socket group %q: %w", group, err)
		}
	}
	dir := filepath.Dir(path)
	if err := makeSocketDir(dir, gid); err != nil {
		return nil, false, fmt.Errorf("socket directory %s: %w", dir, err)
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
	ln, err = bindUnix(path, mode)
	if err != nil {
		return nil, false, err
	}
	ln.SetUnlinkOnClose(true)
	if gid >= 0 {
		if err := chownSocket(path, gid); err != nil {
			ln.Close()
			return nil, false, fmt.Errorf("socket group %q: %w", group, err)
		}
	}
	return ln, stale, nil
}

// umaskMu serializes the daemon's changes of the process umask. The umask
// is process-wide: a file another goroutine creates while bindUnix holds a
// narrow one gets fewer permissions. The daemon binds before it starts
// anything else (the journal, the server), so nothing of its own creates
// files meanwhile; the lock keeps two binds (tests) from mixing their masks.
var umaskMu sync.Mutex

// bindUnix creates the listening socket at path with mode: the kernel gives
// a socket file 0777 less the umask, so the umask is set to the complement
// of mode around bind. The socket never exists with another mode, and
// nothing changes it by path afterwards (no window, and no symbolic link
// swapped in at path can redirect a chmod).
func bindUnix(path string, mode os.FileMode) (*net.UnixListener, error) {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := unix.Umask(int(^mode.Perm() & 0o777))
	defer unix.Umask(old)
	return net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
}

// chownSocket gives the socket just bound at path the group gid. A Unix
// socket cannot be given a group through its descriptor before bind (fchown
// on a socket changes the socket inode, not the file bind creates), so it is
// done by name, and made safe so:
//   - the name is resolved relative to a descriptor of the directory,
//     opened and checked first, and without following a symbolic link
//     (fchownat with AT_SYMLINK_NOFOLLOW): a link swapped in at path is
//     changed itself, never its target;
//   - the directory must be owned by the daemon's uid or root and writable
//     by nobody else, so no other user can replace the socket between bind
//     and the chown with a file of theirs (a hard link to a file they want
//     in the group, say). A directory the daemon made is such a directory.
//
// The file chowned is then the socket bind made, with the mode it was made
// with; anything else is an error.
func chownSocket(path string, gid int) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if me := uint32(os.Geteuid()); st.Uid != me && st.Uid != 0 {
		return fmt.Errorf("the socket directory %s is owned by uid %d, who could swap the socket before it gets its group; use a directory owned by uid %d or root", dir, st.Uid, me)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("the socket directory %s has mode %04o: others could swap the socket before it gets its group; use a directory only its owner can write", dir, st.Mode&0o7777)
	}
	if err := unix.Fchownat(dfd, name, -1, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "chown", Path: path, Err: err}
	}
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s is no longer the socket just made", path)
	}
	return nil
}

// makeSocketDir makes the socket directory dir when it is missing, with its
// missing parents: each directory made is 0750 with group gid (-1: the
// daemon's), so members of socket_group can reach the socket (SPEC §7). It
// is made 0700 and changed through its descriptor, so it is never open to
// others, whatever the umask. An existing directory is left as it is.
func makeSocketDir(dir string, gid int) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("not a directory")
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := makeSocketDir(parent, gid); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return makeSocketDir(dir, gid) // made meanwhile: check it
		}
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if gid >= 0 {
		if err := unix.Fchown(fd, -1, gid); err != nil {
			return &os.PathError{Op: "chown", Path: dir, Err: err}
		}
	}
	if err := unix.Fchmod(fd, 0o750); err != nil {
		return &os.PathError{Op: "chmod", Path: dir, Err: err}
	}
	return nil
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

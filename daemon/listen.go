package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
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

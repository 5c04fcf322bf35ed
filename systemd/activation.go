package systemd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
	"golang.org/x/sys/unix"
)

// Names of the activated sockets the daemon serves, as set by
// FileDescriptorName= in the socket unit.
const (
	// NameUnix names the Unix domain socket.
	NameUnix = "unix"
	// NameTCP names the loopback TCP socket.
	NameTCP = "tcp"
)

// listenFDsStart is SD_LISTEN_FDS_START: the first inherited descriptor.
const listenFDsStart = 3

// Listeners returns the listening sockets that the service manager passed to
// this process (socket activation), keyed by their FileDescriptorName=, and
// reports whether activation was in effect.
//
// Activation is in effect when LISTEN_PID names this process and LISTEN_FDS
// is at least 1; then activated is true and the map holds every inherited
// socket. Otherwise Listeners returns (nil, false, nil) and the caller
// creates its own sockets.
//
// A socket with no name of its own (LISTEN_FDNAMES unset or empty for it, or
// the defaults "unknown" and "<unit>.socket") is keyed [NameUnix] when it is a
// Unix stream socket and [NameTCP] when it is a TCP socket. A socket named
// [NameUnix] or [NameTCP] must be of that kind. Other names are returned as
// they are; several sockets may share a name.
//
// Every inherited descriptor must be a listening Unix or TCP stream socket.
// A datagram socket, a connected socket, a pipe, a descriptor that is not
// open (LISTEN_FDS too large), a LISTEN_FDNAMES with the wrong number of
// names or a name of the wrong kind is an error; Listeners then closes the
// listeners it made and returns none, and the daemon should exit.
//
// Listeners unsets LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES in every case,
// so a second call, or a child process, never takes the sockets again; call it
// once, early.
//
// The caller owns the returned listeners and closes them on shutdown. The
// service manager owns the socket files: the caller must never unlink an
// inherited Unix socket, neither with os.Remove nor with
// (*net.UnixListener).SetUnlinkOnClose(true). Closing the listeners leaves
// the files in place, as the service manager expects.
func Listeners() (ls map[string][]net.Listener, activated bool, err error) {
	pid, fds, names := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_FDNAMES")
	defer unsetListenEnv()

	if p, err := strconv.Atoi(pid); err != nil || p != os.Getpid() || fds == "" {
		// Not for us: the variables were meant for another process (or
		// leaked from a parent), and must not leak further.
		return nil, false, nil
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 0 {
		return nil, false, fmt.Errorf("systemd: invalid LISTEN_FDS %q", fds)
	}
	if n == 0 {
		return nil, false, nil
	}
	if names != "" {
		if got := len(strings.Split(names, ":")); got != n {
			return nil, false, fmt.Errorf("systemd: LISTEN_FDNAMES has %d names for %d sockets", got, n)
		}
	}
	// Check every descriptor before wrapping any of them: a bad LISTEN_FDS
	// would otherwise hand descriptors this process uses for something else
	// to os.NewFile, whose finalizer closes them.
	for fd := listenFDsStart; fd < listenFDsStart+n; fd++ {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, false, fmt.Errorf("systemd: LISTEN_FDS=%d but descriptor %d is not open: %w", n, fd, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return nil, false, fmt.Errorf("systemd: LISTEN_FDS=%d but descriptor %d is not a socket", n, fd)
		}
		// net.FileListener would wrap a datagram or an unlistening socket
		// too, and the daemon would only find out at Accept.
		typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
		if err != nil {
			return nil, false, fmt.Errorf("systemd: activated socket %d: %w", fd, err)
		}
		listening, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
		if err != nil {
			return nil, false, fmt.Errorf("systemd: activated socket %d: %w", fd, err)
		}
		if typ != unix.SOCK_STREAM || listening != 1 {
			return nil, false, fmt.Errorf("systemd: LISTEN_FDS=%d but descriptor %d is not a listening stream socket", n, fd)
		}
	}

	// The environment is still set, so that go-systemd sees it; it unsets
	// it in turn. It leaves out descriptors that net.FileListener refuses
	// (sockets of other families), which the count check below catches.
	named, err := activation.ListenersWithNames()
	if err != nil {
		return nil, false, fmt.Errorf("systemd: activated sockets: %w", err)
	}
	ls, err = sortListeners(named, n)
	if err != nil {
		for _, l := range named {
			closeAll(l)
		}
		return nil, false, err
	}
	return ls, true, nil
}

// sortListeners keys the listeners from go-systemd by the names the daemon
// looks for and checks that there are want of them.
func sortListeners(named map[string][]net.Listener, want int) (map[string][]net.Listener, error) {
	ls := make(map[string][]net.Listener)
	got := 0
	for name, list := range named {
		for _, l := range list {
			got++
			if l == nil {
				return nil, errors.New("systemd: activated socket " + name + " has no listener")
			}
			network := l.Addr().Network()
			key := name
			if unnamed(name) {
				switch network {
				case "unix":
					key = NameUnix
				case "tcp":
					key = NameTCP
				}
			}
			if (key == NameUnix && network != "unix") || (key == NameTCP && network != "tcp") {
				return nil, fmt.Errorf("systemd: activated socket %s is a %s socket", key, network)
			}
			ls[key] = append(ls[key], l)
		}
	}
	if got != want {
		return nil, fmt.Errorf("systemd: %d of %d activated sockets are neither Unix nor TCP sockets", want-got, want)
	}
	return ls, nil
}

// unnamed reports whether name is one that a socket gets when its unit sets
// no FileDescriptorName=: go-systemd's LISTEN_FD_<n> (LISTEN_FDNAMES absent
// or empty), libsystemd's "unknown", or systemd's default, the socket unit's
// name.
func unnamed(name string) bool {
	return strings.HasPrefix(name, "LISTEN_FD_") || name == "unknown" || strings.HasSuffix(name, ".socket")
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		if l != nil {
			l.Close()
		}
	}
}

func unsetListenEnv() {
	// Unsetenv never fails on Unix.
	_ = os.Unsetenv("LISTEN_PID")
	_ = os.Unsetenv("LISTEN_FDS")
	_ = os.Unsetenv("LISTEN_FDNAMES")
}

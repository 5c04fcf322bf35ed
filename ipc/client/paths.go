package client

import (
	"os"

	"github.com/localbus/localbus/ipc/wire"
)

// DefaultSocketPath returns the socket a zero Client dials: for root
// /run/localbus/localbus.sock (wire.SystemSocketPath), for anyone else
// $XDG_RUNTIME_DIR/localbus/localbus.sock, falling back to
// /run/user/UID/localbus/localbus.sock when XDG_RUNTIME_DIR is unset or not
// an absolute path. It is the path the daemon listens on when neither its
// configuration nor a flag names one (wire.SocketPathFor, the one place the
// rule is written), so a client finds the daemon of the same user without
// flags. It reads the environment on every call.
func DefaultSocketPath() string {
	return wire.SocketPathFor(os.Geteuid(), os.Getenv)
}

// SocketPath returns the socket the localbus command dials when given no
// --socket, the one "localbus socket" prints: $LOCALBUS_SOCKET when set,
// else DefaultSocketPath(), except that a user other than root whose own
// socket does not exist gets the system socket (wire.SystemSocketPath) when
// that exists, since the system service serves the members of its socket's
// group. Set it as Client.Socket to find the daemon as the command does. It
// reads the environment and the file system on every call.
func SocketPath() string {
	if s := os.Getenv("LOCALBUS_SOCKET"); s != "" {
		return s
	}
	return socketFor(os.Geteuid(), os.Getenv, exists)
}

// socketFor is the rule of SocketPath without $LOCALBUS_SOCKET, for the
// user euid with the environment getenv; exists reports whether a path
// exists.
func socketFor(euid int, getenv func(string) string, exists func(string) bool) string {
	own := wire.SocketPathFor(euid, getenv)
	if euid == 0 {
		return wire.SystemSocketPath
	}
	if !exists(own) && exists(wire.SystemSocketPath) {
		return wire.SystemSocketPath
	}
	return own
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

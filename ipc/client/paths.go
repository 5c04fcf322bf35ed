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

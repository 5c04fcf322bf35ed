package wire

import (
	"path/filepath"
	"strconv"
)

// SystemSocketPath is the daemon's socket for root and system services. It
// is a variable only so that a test build can place the system socket in
// its temporary directory (go build -ldflags
// "-X github.com/localbus/localbus/ipc/wire.SystemSocketPath=…"), and
// never reach a daemon it did not start; nothing else assigns it.
var SystemSocketPath = "/run/localbus/localbus.sock"

// SocketPathFor returns the socket the daemon of the user euid listens on
// when neither its configuration nor a flag names one, with the
// environment getenv: for root SystemSocketPath, for anyone else
// $XDG_RUNTIME_DIR/localbus/localbus.sock, falling back to
// /run/user/UID/localbus/localbus.sock when XDG_RUNTIME_DIR is unset or not
// an absolute path. It is the one place the rule is written, for the
// daemon, the Go client and the CLI.
func SocketPathFor(euid int, getenv func(string) string) string {
	if euid == 0 {
		return SystemSocketPath
	}
	dir := getenv("XDG_RUNTIME_DIR")
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("/run/user", strconv.Itoa(euid))
	}
	return filepath.Join(filepath.Clean(dir), "localbus", "localbus.sock")
}

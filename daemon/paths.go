package daemon

import (
	"github.com/localbus/localbus/ipc/wire"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// Default locations. Root gets the system paths; every other user gets the
// XDG base directories of its own session, so an unprivileged daemon never
// needs write access outside them.
//
// Every function here reads the environment afresh on each call. A relative
// XDG_* or systemd *_DIRECTORY value is ignored, as the XDG Base Directory
// specification requires.

// DefaultSocketPath returns the Unix socket path used when neither the
// configuration nor a flag names one: /run/localbus/localbus.sock for root,
// else $XDG_RUNTIME_DIR/localbus/localbus.sock.
//
// Without XDG_RUNTIME_DIR it falls back to /run/user/UID/localbus/localbus.sock,
// the directory systemd-logind would have created. That fallback is deliberate:
// a path in a shared temporary directory could be created first by another
// user, so when /run/user/UID is missing the daemon fails to create the socket
// and says so, rather than listening somewhere others control.
//
// The CLI uses the same function, so a client finds the daemon of the same
// user without flags.
func DefaultSocketPath() string { return hostPaths().socketPath() }

// DefaultConfigPath returns the configuration file read when --config is not
// given: /etc/localbus/config.toml for root, else
// $XDG_CONFIG_HOME/localbus/config.toml, falling back to
// ~/.config/localbus/config.toml. When no home directory can be found it
// returns the system path.
func DefaultConfigPath() string { return hostPaths().configPath() }

// DefaultStateDir returns the directory for the journal (state_dir) when the
// configuration does not name one: the first entry of $STATE_DIRECTORY (set
// by systemd's StateDirectory=), else /var/lib/localbus for root, else
// $XDG_STATE_HOME/localbus, falling back to ~/.local/state/localbus. When no
// home directory can be found it returns the system path.
func DefaultStateDir() string { return hostPaths().stateDir() }

// pathEnv is what the default paths depend on, so tests can supply their own.
type pathEnv struct {
	getenv func(string) string
	euid   int
	// home returns the user's home directory, or "" if it is unknown.
	home func() string
}

// hostPaths returns the pathEnv of the running process.
func hostPaths() pathEnv {
	euid := os.Geteuid()
	return pathEnv{
		getenv: os.Getenv,
		euid:   euid,
		home:   func() string { return homeDir(euid) },
	}
}

// homeDir returns $HOME, else the home directory of uid in the user
// database, else "".
func homeDir(uid int) string {
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		return h
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && filepath.IsAbs(u.HomeDir) {
		return u.HomeDir
	}
	return ""
}

const (
	systemConfigPath = "/etc/localbus/config.toml"
	systemStateDir   = "/var/lib/localbus"
)

func (e pathEnv) root() bool { return e.euid == 0 }

// absEnv returns the value of the environment variable name if it is an
// absolute path, else "".
func (e pathEnv) absEnv(name string) string {
	if v := e.getenv(name); filepath.IsAbs(v) {
		return filepath.Clean(v)
	}
	return ""
}

func (e pathEnv) socketPath() string { return wire.SocketPathFor(e.euid, e.getenv) }

func (e pathEnv) configPath() string {
	if e.root() {
		return systemConfigPath
	}
	if dir := e.absEnv("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "localbus", "config.toml")
	}
	if home := e.home(); home != "" {
		return filepath.Join(home, ".config", "localbus", "config.toml")
	}
	return systemConfigPath
}

func (e pathEnv) stateDir() string {
	// systemd passes one absolute path per StateDirectory= entry, joined
	// with ':'; ours is the first.
	first, _, _ := strings.Cut(e.getenv("STATE_DIRECTORY"), ":")
	if filepath.IsAbs(first) {
		return filepath.Clean(first)
	}
	if e.root() {
		return systemStateDir
	}
	if dir := e.absEnv("XDG_STATE_HOME"); dir != "" {
		return filepath.Join(dir, "localbus")
	}
	if home := e.home(); home != "" {
		return filepath.Join(home, ".local", "state", "localbus")
	}
	return systemStateDir
}

// keysFileBeside returns the default keys file for the configuration file at
// configPath: keys.json in the same directory.
func keysFileBeside(configPath string) string {
	return filepath.Join(filepath.Dir(configPath), "keys.json")
}

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/wire"
)

// socketPath returns the socket the CLI dials: --socket (or
// $LOCALBUS_SOCKET) when set, else client.SocketPath: the default for this
// user, or the system socket for a non-root user whose own socket does not
// exist when that exists (the system service serves users in its socket
// group).
func socketPath(c *cli.Context) string {
	if s := c.String("socket"); s != "" {
		return s
	}
	return client.SocketPath()
}

// socketsTried lists, in the order socketPath considers them, the sockets
// a failed dial of path stands for: path itself with its error and, when
// path is one of the two defaults of a non-root user, the other one, with
// what the file system says of it (it is never dialled here).
func socketsTried(path string, dialErr error) []socketTry {
	tried := []socketTry{{path, dialErr}}
	if os.Geteuid() == 0 {
		return tried
	}
	own, sys := wire.SocketPathFor(os.Geteuid(), os.Getenv), wire.SystemSocketPath
	switch path {
	case own:
		_, err := os.Lstat(sys)
		if err == nil {
			return tried // it exists, so this was not the default's choice: --socket named own
		}
		return append(tried, socketTry{sys, err})
	case sys:
		_, err := os.Lstat(own)
		if err == nil {
			return tried
		}
		return append([]socketTry{{own, err}}, tried...)
	}
	return tried
}

// A socketTry is a socket the CLI looked for and why it could not use it.
type socketTry struct {
	path string
	err  error
}

// missing reports whether the try found no socket at all.
func (s socketTry) missing() bool { return errors.Is(s.err, fs.ErrNotExist) }

// problem says in plain words why the socket cannot be used: missing, no
// one listening, or permission denied, naming the directory or file in the
// way, its group, and what to do about it.
func (s socketTry) problem() string {
	switch {
	case s.missing():
		return "no socket at " + s.path
	case errors.Is(s.err, syscall.ECONNREFUSED):
		return "nothing is listening on " + s.path + " (a socket left behind by a daemon that stopped)"
	case errors.Is(s.err, fs.ErrPermission):
		return "permission denied on " + s.path + ": " + permissionProblem(s.path)
	}
	return fmt.Sprintf("%s: %v", s.path, rootCause(s.err))
}

// permissionProblem names what denies this user path: the first directory
// on the way it may not search, else the socket itself, with its mode and
// group, and says how to get in.
func permissionProblem(path string) string {
	blocker, what := path, "the socket"
	for _, d := range ancestors(filepath.Dir(path)) {
		if unix.Access(d, unix.X_OK) != nil {
			blocker, what = d, "its directory "+d
			break
		}
	}
	st, err := os.Stat(blocker)
	if err != nil {
		return fmt.Sprintf("%s cannot be read (%v)", what, rootCause(err))
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return what + " does not let you in"
	}
	mode := fmt.Sprintf("mode %04o", st.Mode().Perm())
	group := groupName(sys.Gid)
	if sys.Gid == 0 {
		return fmt.Sprintf("%s is %s, group %s: the daemon's socket_group is unset, so only root and the daemon's user can connect "+
			"(set socket_group in its configuration, or SocketGroup= in localbus.socket, to a group you are in)", what, mode, group)
	}
	return fmt.Sprintf("%s is %s, group %s, and you are not in group %s (sudo usermod -aG %s $USER, then log in again)", what, mode, group, group, group)
}

// ancestors returns dir and the directories above it, from the top down.
func ancestors(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		out = append([]string{d}, out...)
		if d == "/" || d == "." {
			return out
		}
	}
}

// groupName returns the name of group gid, or the number when it has none.
func groupName(gid uint32) string {
	id := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name
	}
	return id
}

// unreachableText says why the daemon was not reached on the socket path
// (dialErr the dial's error), naming every socket the CLI looked for.
func unreachableText(path string, dialErr error) string {
	tried := socketsTried(path, dialErr)
	var parts []string
	allMissing := true
	for _, t := range tried {
		parts = append(parts, t.problem())
		allMissing = allMissing && t.missing()
	}
	text := strings.Join(parts, "; ")
	if len(tried) > 1 {
		text = "tried " + strconv.Itoa(len(tried)) + " sockets: " + text
	}
	switch {
	case allMissing || errors.Is(dialErr, syscall.ECONNREFUSED):
		text += "; is it running? (start it with 'localbus serve', or point --socket or --url at it)"
	case len(tried) > 1 && tried[0].missing():
		// A user with no daemon of their own, kept out of the system's.
		text += "; or run a daemon of your own: 'localbus serve'"
	}
	return text
}

func socketCommand() *cli.Command {
	return &cli.Command{
		Name:  "socket",
		Usage: "print the socket path the other commands use",
		Description: "Prints the Unix socket the client commands dial: --socket or $LOCALBUS_SOCKET when set,\n" +
			"else " + wire.SystemSocketPath + " for root, else $XDG_RUNTIME_DIR/localbus/localbus.sock;\n" +
			"a user without a socket of their own gets the system socket when it exists.\n" +
			"In scripts: S=$(localbus socket); curl --unix-socket \"$S\" http://localbus/api/v1/caps",
		Flags: []cli.Flag{&cli.StringFlag{
			Name: "socket", Usage: "print this `PATH`", EnvVars: []string{"LOCALBUS_SOCKET"}, TakesFile: true,
		}},
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, socketPath(c))
			return nil
		},
	}
}

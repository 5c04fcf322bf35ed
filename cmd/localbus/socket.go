package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/ipc/client"
)

// socketPath returns the socket the CLI dials: --socket (or
// $LOCALBUS_SOCKET) when set, else the default for this user
// (client.DefaultSocketPath). A non-root user whose own socket does not
// exist gets the system socket when that exists: the system service
// serves users in its socket group.
func socketPath(c *cli.Context) string {
	if s := c.String("socket"); s != "" {
		return s
	}
	return defaultSocket(os.Geteuid(), os.Getenv, exists)
}

// defaultSocket is the rule of socketPath without a flag, for the user
// euid with the environment getenv; exists reports whether a path exists.
func defaultSocket(euid int, getenv func(string) string, exists func(string) bool) string {
	own := client.SocketPathFor(euid, getenv)
	if euid == 0 {
		return client.SystemSocketPath
	}
	if !exists(own) && exists(client.SystemSocketPath) {
		return client.SystemSocketPath
	}
	return own
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func socketCommand() *cli.Command {
	return &cli.Command{
		Name:  "socket",
		Usage: "print the socket path the other commands use",
		Description: "Prints the Unix socket the client commands dial: --socket or $LOCALBUS_SOCKET when set,\n" +
			"else " + client.SystemSocketPath + " for root, else $XDG_RUNTIME_DIR/localbus/localbus.sock;\n" +
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

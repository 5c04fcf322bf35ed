package main

import (
	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/daemon"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the daemon in the foreground",
		Description: "Serves the event buses on the Unix socket (and on TCP when listen_tcp is set).\n" +
			"Under systemd socket activation it uses the sockets it is given. SIGHUP reloads the\n" +
			"configuration; SIGTERM and SIGINT shut down, closing every stream with WebSocket 1001.",
		Flags: serveFlags(),
		Action: func(c *cli.Context) error {
			return daemon.Run(c.Context, serveSource(c), daemon.Options{Version: buildVersion().Version})
		},
	}
}

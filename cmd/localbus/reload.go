package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/ipc/client"
)

func reloadCommand() *cli.Command {
	return clientCommand(&cli.Command{
		Name:  "reload",
		Usage: "make the daemon re-read its configuration and keys",
		Description: "Like SIGHUP or systemctl reload. Streams are closed and their clients reconnect\n" +
			"and resume without losing events. A configuration the daemon refuses is reported\n" +
			"(exit 1) and the daemon keeps running the old one. Changed settings the running\n" +
			"daemon cannot take (listen_tcp, socket, state_dir, upstream.url, …) keep their old\n" +
			"values until it restarts: reload names them on stderr and still exits 0. Needs admin.",
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
				return err
			}
			var reply client.ReloadReply
			err := callDaemon(c, func(ctx context.Context, cl *client.Client) error {
				var err error
				reply, err = cl.Reload(ctx)
				if ae, ok := err.(*client.APIError); ok && ae.Status == http.StatusBadRequest {
					return exitError{exitUsage, fmt.Errorf("the daemon refused the new configuration and keeps the old one: %s", ae.Message)}
				}
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, "reloaded")
			if len(reply.RestartNeeded) > 0 {
				fmt.Fprintf(c.App.ErrWriter, "these changed settings keep their running values until the daemon restarts: %s\n",
					strings.Join(reply.RestartNeeded, ", "))
			}
			return nil
		},
	})
}

package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/ipc/client"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the daemon's version, limits, sessions and subscribers",
		Description: "Asks the daemon what it speaks (version, features, limits) and lists its sessions\n" +
			"with their subscribers. Exits 2 when the daemon cannot be reached, so scripts can\n" +
			"use it as a health check.",
		Flags:           append([]cli.Flag{jsonFlag(`print {"address", "caps", "sessions"} as JSON`)}, connFlags()...),
		HideHelpCommand: true,
		OnUsageError:    onUsageError,
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
				return err
			}
			cl := newClient(c)
			defer cl.CloseIdleConnections()
			ctx, cancel := requestContext(c)
			defer cancel()
			caps, err := cl.Caps(ctx)
			if err != nil {
				return clientError(err)
			}
			sessions, err := cl.Sessions(ctx)
			if err != nil {
				return clientError(err)
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"address": cl.Addr(), "caps": caps, "sessions": sessions})
			}
			printStatus(c, cl, caps, sessions)
			return nil
		},
	}
}

func printStatus(c *cli.Context, cl *client.Client, caps client.Caps, sessions []client.SessionInfo) {
	w := c.App.Writer
	l := caps.Limits
	subscribers := 0
	for _, s := range sessions {
		subscribers += s.Subscribers
	}
	fmt.Fprintf(w, "localbus %s (schema %d) at %s\n", caps.Version, caps.SchemaVersion, cl.Addr())
	fmt.Fprintf(w, "features: %s\n", strings.Join(caps.Features, ", "))
	fmt.Fprintf(w, "limits: ring %d events / %s per bus, queue %d events / %s per reader, %d readers per bus, %d sessions, %s per event\n",
		l.RingSize, bytesText(l.RingMaxBytes), l.MaxQueued, bytesText(l.MaxQueuedBytes), l.MaxSubscribers, l.MaxSessions, bytesText(l.MaxEventBytes))
	fmt.Fprintf(w, "%s, %s on sessions\n", plural(len(sessions), "session"), plural(subscribers, "subscriber"))
	var onDisk int64
	journaled := 0
	for _, s := range sessions {
		if s.Durability != nil {
			onDisk += s.Durability.BytesOnDisk
			journaled++
		}
	}
	if journaled > 0 {
		fmt.Fprintf(w, "journal: %s on disk for %s\n", bytesText(onDisk), plural(journaled, "session"))
	}
	if len(sessions) > 0 {
		fmt.Fprintln(w)
		sessionTable(w, sessions)
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/ipc/client"
)

func statusCommand() *cli.Command {
	return clientCommand(&cli.Command{
		Name:  "status",
		Usage: "show the daemon's version, limits, sessions and subscribers",
		Description: "Asks the daemon what it speaks (version, features, limits) and lists its sessions\n" +
			"with their subscribers. Exits 2 when the daemon cannot be reached, so scripts can\n" +
			"use it as a health check.",
		Flags: []cli.Flag{jsonFlag(`print {"address", "caps", "sessions"} as JSON`)},
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
				return err
			}
			var addr string
			var caps client.Caps
			var sessions []client.SessionInfo
			err := callDaemon(c, func(ctx context.Context, cl *client.Client) (err error) {
				addr = cl.Addr()
				if caps, err = cl.Caps(ctx); err != nil {
					return err
				}
				sessions, err = cl.Sessions(ctx)
				return err
			})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"address": addr, "caps": caps, "sessions": sessions})
			}
			printStatus(c.App.Writer, addr, caps, sessions)
			return nil
		},
	})
}

// printStatus writes the status of the daemon at addr for people.
func printStatus(w io.Writer, addr string, caps client.Caps, sessions []client.SessionInfo) {
	l := caps.Limits
	subscribers := 0
	for _, s := range sessions {
		subscribers += s.Subscribers
	}
	fmt.Fprintf(w, "localbus %s (schema %d) at %s\n", caps.Version, caps.SchemaVersion, addr)
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

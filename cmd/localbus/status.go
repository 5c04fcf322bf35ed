package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

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
		Flags: []cli.Flag{jsonFlag(`print {"address", "caps", "sessions", "upstream"} as JSON`)},
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
				return err
			}
			var addr string
			var caps client.Caps
			var sessions []client.SessionInfo
			var up *client.UpstreamStatus
			err := callDaemon(c, func(ctx context.Context, cl *client.Client) (err error) {
				addr = cl.Addr()
				if caps, err = cl.Caps(ctx); err != nil {
					return err
				}
				if sessions, err = cl.Sessions(ctx); err != nil {
					return err
				}
				st, ok, err := cl.Upstream(ctx)
				if ok {
					up = &st
				}
				return err
			})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				out := map[string]any{"address": addr, "caps": caps, "sessions": sessions}
				if up != nil {
					out["upstream"] = up
				}
				return printJSON(c.App.Writer, out)
			}
			printStatus(c.App.Writer, addr, caps, sessions)
			if up != nil {
				printUpstream(c.App.Writer, up)
			}
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

// printUpstream writes the state of the NATS bridge for people.
func printUpstream(w io.Writer, up *client.UpstreamStatus) {
	fmt.Fprintln(w)
	state := "disconnected"
	if up.Connected {
		state = "connected to " + up.Server
	}
	fmt.Fprintf(w, "upstream: node %s, stream %s, %s\n", up.Node, up.Stream, state)
	if up.LastError != "" {
		fmt.Fprintf(w, "  last error: %s\n", up.LastError)
	}
	fmt.Fprintf(w, "  exported %d, imported %d, lag %d", up.Exported, up.Imported, up.Lag)
	if up.Lost > 0 {
		fmt.Fprintf(w, ", lost %d", up.Lost)
	}
	fmt.Fprintln(w)
	if len(up.Sessions) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  EXPORT\tLAST ID\tEXPORTED\tLAG")
		for _, s := range up.Sessions {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\n", s.Session, s.LastID, s.ExportedID, s.Lag)
		}
		tw.Flush()
	}
	if len(up.Mirrors) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  MIRROR\tSOURCE\tLAST ID\tSOURCE ID\tIMPORTED")
		for _, m := range up.Mirrors {
			fmt.Fprintf(tw, "  %s\t%s/%s\t%d\t%d\t%d\n", m.Session, m.Node, m.Source, m.LastID, m.ID, m.Imported)
		}
		tw.Flush()
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/wire"
)

func statusCommand() *cli.Command {
	return clientCommand(&cli.Command{
		Name:  "status",
		Usage: "show the daemon's version, uptime, limits, sessions and who listens",
		Description: "Asks the daemon what it speaks (version, features, limits), how long it has run and\n" +
			"its rates, and lists its sessions and their streams with the processes that opened\n" +
			"them (a caller that is not admin sees only its own streams' processes). Exits 2 when\n" +
			"the daemon cannot be reached, so scripts can use it as a health check.",
		Flags: []cli.Flag{jsonFlag(`print {"address", "status", "caps", "sessions", "streams", "upstream"} as JSON`)},
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
				return err
			}
			var addr string
			var caps client.Caps
			var sessions []client.SessionInfo
			var up *client.UpstreamStatus
			var status client.Status
			var streams []client.Subscriber
			err := callDaemon(c, func(ctx context.Context, cl *client.Client) (err error) {
				addr = cl.Addr()
				if caps, err = cl.Caps(ctx); err != nil {
					return err
				}
				if status, err = cl.Status(ctx); err != nil {
					return err
				}
				if sessions, err = cl.Sessions(ctx); err != nil {
					return err
				}
				if streams, err = statusStreams(ctx, cl, sessions); err != nil {
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
				out := map[string]any{"address": addr, "status": status, "caps": caps, "sessions": sessions, "streams": streams}
				if up != nil {
					out["upstream"] = up
				}
				return printJSON(c.App.Writer, out)
			}
			printStatus(c.App.Writer, addr, status, caps, sessions)
			if len(streams) > 0 {
				fmt.Fprintln(c.App.Writer)
				subscriberTable(c.App.Writer, streams, true, time.Now())
			}
			if up != nil {
				printUpstream(c.App.Writer, up)
			}
			return nil
		},
	})
}

// statusSessionStreams bounds the sessions whose streams status asks for
// one by one, for a caller that may not list every stream at once.
const statusSessionStreams = 100

// statusStreams lists the streams of every bus for an admin caller; for
// another, those of the sessions with subscribers (at most
// statusSessionStreams of them), each marked with its session.
func statusStreams(ctx context.Context, cl *client.Client, sessions []client.SessionInfo) ([]client.Subscriber, error) {
	all, err := cl.AllSubscribers(ctx)
	if !errors.Is(err, client.ErrForbidden) {
		return all, err
	}
	asked := 0
	for _, s := range sessions {
		if s.Subscribers == 0 || asked == statusSessionStreams {
			continue
		}
		asked++
		subs, err := cl.Subscribers(ctx, s.ID)
		if errors.Is(err, client.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		for i := range subs {
			subs[i].Bus = &wire.SubscriberBus{Session: s.ID}
		}
		all = append(all, subs...)
	}
	return all, nil
}

// printStatus writes the status of the daemon at addr for people.
func printStatus(w io.Writer, addr string, st client.Status, caps client.Caps, sessions []client.SessionInfo) {
	l := caps.Limits
	subscribers := 0
	for _, s := range sessions {
		subscribers += s.Subscribers
	}
	fmt.Fprintf(w, "localbus %s (schema %d) at %s\n", caps.Version, caps.SchemaVersion, addr)
	fmt.Fprintf(w, "up %s, since %s\n", durationText(time.Since(st.StartedAt)), st.StartedAt.Local().Format(time.DateTime))
	fmt.Fprintf(w, "%s, %s, %s; events/s %s in, %s out (last 10 s)\n", plural(st.Sessions, "session"), plural(st.Streams, "stream"),
		plural(st.Consumers, "consumer"), rateText(st.PublishRate), rateText(st.DeliverRate))
	if st.RSSBytes != nil {
		fmt.Fprintf(w, "memory: %s resident\n", bytesText(*st.RSSBytes))
	}
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
	fmt.Fprintf(w, "  exported %d, imported %d, lag %d, backlog %s", up.Exported, up.Imported, up.Lag, bytesText(up.BacklogBytes))
	if up.Lost > 0 {
		fmt.Fprintf(w, ", lost %d", up.Lost)
	}
	if up.ImportLost > 0 {
		fmt.Fprintf(w, ", mirrors lost %d origin events in %s", up.ImportLost, plural(int(up.ImportGaps), "gap"))
	}
	fmt.Fprintln(w)
	if len(up.Sessions) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  EXPORT\tLAST ID\tEXPORTED\tLAG\tBACKLOG\tLOST")
		for _, s := range up.Sessions {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\t%d\n", s.Session, s.LastID, s.ExportedID, s.Lag, bytesText(s.BacklogBytes), s.Lost)
		}
		tw.Flush()
	}
	if len(up.Mirrors) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  MIRROR\tSOURCE\tLAST ID\tSOURCE ID\tIMPORTED\tLOST")
		for _, m := range up.Mirrors {
			fmt.Fprintf(tw, "  %s\t%s/%s\t%d\t%d\t%d\t%d\n", m.Session, m.Node, m.Source, m.LastID, m.ID, m.Imported, m.Lost)
		}
		tw.Flush()
	}
}

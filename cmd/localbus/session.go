package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/wire"
)

func sessionCommand() *cli.Command {
	return &cli.Command{
		Name:      "session",
		Usage:     "create, list, show and delete sessions",
		UsageText: "localbus session create|list|show|delete [options] [ID]",
		Description: "A session is a named event bus with its own ids and replay ring. Publishing to a\n" +
			"missing session creates it (unless the daemon's auto_create_sessions is off);\n" +
			"create one explicitly to choose its ring size. Creating and deleting need admin.",
		Subcommands: []*cli.Command{
			sessionCreateCommand(),
			sessionListCommand(),
			sessionShowCommand(),
			sessionDeleteCommand(),
		},
		Action:          groupAction,
		HideHelpCommand: true,
		OnUsageError:    onUsageError,
	}
}

func sessionCreateCommand() *cli.Command {
	return clientCommand(&cli.Command{
		Name:      "create",
		Usage:     "create a session",
		ArgsUsage: "[ID]",
		Description: "Creates the session ID, or one with a generated id when ID is absent, and prints\n" +
			"it. Exits 1 if the session exists.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "ring-size", Usage: "keep the last `N` events for replay", DefaultText: "the daemon's ring_size"},
			jsonFlag("print the session as JSON"),
		},
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 1, "[ID]"); err != nil {
				return err
			}
			if c.Int("ring-size") < 0 {
				return usagef(c, "--ring-size must be positive")
			}
			var s client.SessionInfo
			err := callDaemon(c, func(ctx context.Context, cl *client.Client) (err error) {
				s, err = cl.CreateSession(ctx, c.Args().First(), c.Int("ring-size"))
				return err
			})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, s)
			}
			fmt.Fprintf(c.App.Writer, "created session %s\n", s.ID)
			return nil
		},
	})
}

func sessionListCommand() *cli.Command {
	return clientCommand(&cli.Command{
		Name:    "list",
		Aliases: []string{"ls"},
		Usage:   "list the sessions",
		Flags: []cli.Flag{
			jsonFlag(`print {"sessions": [...]} as JSON`),
		},
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
				return err
			}
			var list []client.SessionInfo
			err := callDaemon(c, func(ctx context.Context, cl *client.Client) (err error) {
				list, err = cl.Sessions(ctx)
				return err
			})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"sessions": list})
			}
			if len(list) == 0 {
				fmt.Fprintln(c.App.Writer, "no sessions")
				return nil
			}
			sessionTable(c.App.Writer, list)
			return nil
		},
	})
}

func sessionShowCommand() *cli.Command {
	cmd := clientCommand(&cli.Command{
		Name:      "show",
		Usage:     "describe a session, its consumers and its streams",
		ArgsUsage: "ID",
		Flags:     []cli.Flag{jsonFlag("print the session as JSON")},
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 1, 1, "one session ID"); err != nil {
				return err
			}
			var s client.SessionInfo
			var subs []client.Subscriber
			var consumers []client.Consumer
			err := callDaemon(c, func(ctx context.Context, cl *client.Client) (err error) {
				if s, err = cl.Session(ctx, c.Args().First()); err != nil {
					return err
				}
				if subs, err = cl.Subscribers(ctx, s.ID); err != nil {
					return err
				}
				consumers, err = cl.Consumers(ctx, s.ID)
				return err
			})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				// "consumers" is the session's count, as the daemon
				// reports it; the list is beside it.
				return printJSON(c.App.Writer, struct {
					client.SessionInfo
					Streams      []client.Subscriber `json:"streams"`
					ConsumerList []client.Consumer   `json:"consumerList"`
				}{s, subs, consumers})
			}
			w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "session\t%s\n", s.ID)
			fmt.Fprintf(w, "epoch\t%s\n", s.Epoch)
			fmt.Fprintf(w, "last id\t%d\n", s.LastID)
			fmt.Fprintf(w, "earliest id\t%s\n", optID(s.EarliestID))
			fmt.Fprintf(w, "ring\t%d of %d events, %s of %s\n", s.Ring.Count, s.Ring.MaxCount, bytesText(s.Ring.Bytes), bytesText(s.Ring.MaxBytes))
			fmt.Fprintf(w, "subscribers\t%d\n", s.Subscribers)
			fmt.Fprintf(w, "consumers\t%d\n", s.Consumers)
			fmt.Fprintf(w, "events/s\t%s in, %s out (last 10 s)\n", rateText(s.PublishRate), rateText(s.DeliverRate))
			fmt.Fprintf(w, "durability\t%s\n", durabilityText(s.Durability))
			if err := w.Flush(); err != nil {
				return err
			}
			if len(consumers) > 0 {
				fmt.Fprintln(c.App.Writer)
				consumerTable(c.App.Writer, consumers, time.Now())
			}
			if len(subs) > 0 {
				fmt.Fprintln(c.App.Writer)
				subscriberTable(c.App.Writer, subs, false, time.Now())
			}
			return nil
		},
	})
	cmd.BashComplete = completeWithSessions(cmd, true)
	return cmd
}

func sessionDeleteCommand() *cli.Command {
	cmd := clientCommand(&cli.Command{
		Name:      "delete",
		Aliases:   []string{"rm"},
		Usage:     "delete a session",
		ArgsUsage: "ID",
		Description: "Deletes the session and its events. Its followers get stream:closed and stop\n" +
			"(localbus events exits 4).",
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 1, 1, "one session ID"); err != nil {
				return err
			}
			err := callDaemon(c, func(ctx context.Context, cl *client.Client) error {
				return cl.DeleteSession(ctx, c.Args().First())
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "deleted session %s\n", c.Args().First())
			return nil
		},
	})
	cmd.BashComplete = completeWithSessions(cmd, true)
	return cmd
}

// sessionTable prints sessions as a table.
func sessionTable(out io.Writer, list []client.SessionInfo) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SESSION\tLAST ID\tEARLIEST\tEVENTS\tBYTES\tSUBSCRIBERS\tCONSUMERS\tIN/S\tOUT/S\tEPOCH")
	for _, s := range list {
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", s.ID, s.LastID, optID(s.EarliestID), s.Ring.Count, s.Ring.Bytes,
			s.Subscribers, s.Consumers, rateText(s.PublishRate), rateText(s.DeliverRate), s.Epoch)
	}
	w.Flush()
}

// durabilityText describes what a session keeps on disk.
func durabilityText(d *wire.DurabilityInfo) string {
	if d == nil {
		return "memory only: its events do not survive a restart"
	}
	return fmt.Sprintf("%s on disk, synced through id %d", bytesText(d.BytesOnDisk), d.LastSyncedID)
}

func optID(id *uint64) string {
	if id == nil {
		return "-"
	}
	return strconv.FormatUint(*id, 10)
}

// printJSON prints v as one line of JSON.
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/client"
)

func eventsCommand() *cli.Command {
	cmd := clientCommand(&cli.Command{
		Name:      "events",
		Usage:     "follow a stream of events",
		UsageText: "localbus events [--session ID | --family F] [--types T,T] [--since N|10m|TIME] [--transport sse|ws] [--raw | --format TEMPLATE] [--count N] [--timeout D]",
		Description: "Prints the events of a session (--session), of one family across all sessions\n" +
			"(--family), or of the whole daemon (neither; needs admin), as they are published.\n" +
			"Each line is TIME  SESSION  ID  TYPE  DATA, the time local, in aligned columns; --raw\n" +
			"prints each event's JSON envelope on one line instead, and --format a Go template\n" +
			"over the envelope: {{.ID}} {{.Type}} {{.Session}} {{.Seq}} {{.Data}} (JSON text)\n" +
			"{{.Timestamp}} (as sent, UTC) {{.Time}} (local, a time.Time: {{.Time.Format \"15:04\"}})\n" +
			"{{.Originator}}; {{json .}} prints the envelope, {{json .Data}} the data.\n" +
			"\n" +
			"--since takes an event id (0 replays everything the daemon still holds), a duration\n" +
			"(10m: what was published in the last ten minutes) or an RFC 3339 time\n" +
			"(2026-12-01T20:00:00+01:00); a time the daemon's ring no longer reaches back to is\n" +
			"reported as a gap.\n" +
			"\n" +
			"It follows the stream until interrupted: when the daemon reloads, restarts or drops\n" +
			"a reader that fell behind, it reconnects and resumes after the last event it\n" +
			"printed, so no event is printed twice or skipped. Events it could not recover (the\n" +
			"daemon no longer holds them, or the daemon restarted without durability) are\n" +
			"reported on stderr in plain words, as are reconnections.\n" +
			"\n" +
			"--count N exits 0 after N events (scripts: wait for something to happen). --timeout D\n" +
			"stops after D: exit 0 without --count, exit 1 if fewer than N events came.\n" +
			"Exits 4 when the session is deleted or does not exist (--wait waits for it to be\n" +
			"created), 2 when the daemon cannot be reached at start, 3 when it refuses the\n" +
			"credentials.\n" +
			"\n" +
			"Examples:\n" +
			"  localbus events --session build-17\n" +
			"  localbus events --session build-17 --types 'build:*' --since 0 --raw\n" +
			"  localbus events --family build --since 1h --format '{{.Time.Format \"15:04:05\"}} {{.Type}}'\n" +
			"  localbus events --session build-17 --types build:done --count 1 --timeout 10m --wait",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "session", Aliases: []string{"s"}, Usage: "follow the session `ID`"},
			&cli.StringFlag{Name: "family", Aliases: []string{"f"}, Usage: "follow family `F` of every session (e.g. build)"},
			&cli.StringSliceFlag{Name: "types", Aliases: []string{"t"}, Usage: "only these event types; `T` is exact (build:done) or a whole family (build:*); comma-separated or repeated"},
			&cli.StringFlag{Name: "since", Usage: "start after event id `N` (0: everything the daemon still holds), or at what was published since a duration ago (10m) or an RFC 3339 time; default: only new events"},
			&cli.StringFlag{Name: "epoch", Usage: "the `EPOCH` --since belongs to (from an earlier stream), so a restarted id sequence is reported"},
			&cli.StringFlag{Name: "transport", Value: "sse", Usage: "`NAME`: sse (Server-Sent Events) or ws (WebSocket)"},
			&cli.BoolFlag{Name: "raw", Aliases: []string{"json"}, Usage: "print each event's JSON envelope on one line"},
			&cli.StringFlag{Name: "format", Usage: "print each event with the Go `TEMPLATE` (see above)"},
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Usage: "exit after `N` events", DefaultText: "follow until interrupted"},
			&cli.DurationFlag{Name: "timeout", Usage: "stop after `D` (e.g. 30s, 5m)", DefaultText: "none"},
			&cli.BoolFlag{Name: "wait", Usage: "wait for the --session to be created instead of exiting 4 when it does not exist"},
			&cli.IntFlag{Name: "max-queued", Usage: "ask the daemon to queue at most `N` unread events (16–2048) before dropping this reader", DefaultText: "the daemon's max_queued"},
		},
		Action: runEvents,
	})
	cmd.BashComplete = completeWithSessions(cmd, false)
	return cmd
}

func runEvents(c *cli.Context) error {
	if err := checkArgs(c, 0, 0, "no arguments (follow a session with --session ID)"); err != nil {
		return err
	}
	opts := client.StreamOptions{
		Session:   c.String("session"),
		Family:    c.String("family"),
		Types:     c.StringSlice("types"),
		Epoch:     c.String("epoch"),
		Transport: client.Transport(c.String("transport")),
		MaxQueued: c.Int("max-queued"),

		WaitForSession: c.Bool("wait"),
	}
	if opts.Session != "" && opts.Family != "" {
		return usagef(c, "give --session or --family, not both")
	}
	if opts.Transport != client.SSE && opts.Transport != client.WebSocket {
		return usagef(c, "--transport must be sse or ws, not %q", opts.Transport)
	}
	if c.IsSet("since") {
		since := c.String("since")
		if n, err := bus.ParseCursor(since); err == nil {
			opts.Since = &n
		} else if t, err := bus.ParseSinceTime(since, time.Now()); err == nil {
			opts.SinceTime = t
		} else {
			return usagef(c, "--since must be an event id (0 or more), a duration (10m) or an RFC 3339 time (2026-12-01T20:00:00Z), not %q", since)
		}
	}
	var tmpl *template.Template
	if c.IsSet("format") {
		if c.Bool("raw") {
			return usagef(c, "give --raw or --format, not both")
		}
		var err error
		if tmpl, err = parseFormat(c.String("format")); err != nil {
			return usagef(c, "--format: %v", err)
		}
	}
	count := c.Int("count")
	if count < 0 {
		return usagef(c, "--count must be at least 1")
	}
	timeout := c.Duration("timeout")
	if c.IsSet("timeout") && timeout <= 0 {
		return usagef(c, "--timeout must be positive")
	}

	ctx := c.Context
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	f := &follower{
		out: c.App.Writer, errw: c.App.ErrWriter,
		raw: c.Bool("raw"), format: tmpl,
		session: opts.Session,
	}
	opts.OnRetry = f.retrying
	cl := newClient(c)
	defer cl.CloseIdleConnections()

	st, err := cl.Stream(ctx, opts)
	if err == nil {
		defer st.Close()
		err = f.follow(ctx, st, count)
	}
	switch {
	case err == nil:
		return nil
	case c.Context.Err() != nil:
		return nil // interrupted: not an error
	case errors.Is(err, errOutput), errors.As(err, new(exitError)):
		return err
	case ctx.Err() != nil:
		if count > 0 {
			return fmt.Errorf("timed out after %v with %d of %d events", timeout, f.events, count)
		}
		return nil
	}
	return clientError(err)
}

// A follower prints a stream: events on out, what happens to the stream
// on errw.
type follower struct {
	out, errw io.Writer
	raw       bool
	format    *template.Template // nil: columns
	cols      columns
	session   string
	events    int
	readies   int
}

// follow prints frames until count events (0: forever) or an error.
func (f *follower) follow(ctx context.Context, st *client.Stream, count int) error {
	for count == 0 || f.events < count {
		fr, err := st.Next(ctx)
		if err != nil {
			return err
		}
		if fr.Reserved() {
			f.notice(fr)
			continue
		}
		if err := f.print(fr); err != nil {
			return err
		}
		f.events++
	}
	return nil
}

// idWidth is the least width of the id column, right-aligned, so that the
// columns after it stay put as ids grow.
const idWidth = 6

// errOutput marks a failure to write the output (a closed pipe): the
// reader went away, so the command ends quietly with exit 1.
var errOutput = errors.New("cannot write the output")

func (f *follower) print(fr client.Frame) error {
	var err error
	switch {
	case f.raw:
		_, err = fmt.Fprintf(f.out, "%s\n", fr.Raw)
	case f.format != nil:
		var b bytes.Buffer
		if err := f.format.Execute(&b, newTemplateEvent(fr)); err != nil {
			return exitError{exitUsage, fmt.Errorf("--format: %v", err)}
		}
		if b.Len() == 0 || b.Bytes()[b.Len()-1] != '\n' {
			b.WriteByte('\n')
		}
		_, err = f.out.Write(b.Bytes())
	default:
		session := fr.Session
		if session == "" {
			session = "-" // the daemon's own localbus:* events
		}
		id := strconv.FormatUint(fr.ID, 10)
		if len(id) < idWidth {
			id = strings.Repeat(" ", idWidth-len(id)) + id
		}
		_, err = io.WriteString(f.out, f.cols.line(localTime(fr.Timestamp), session, id, fr.Type, string(fr.Data)))
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errOutput, err)
	}
	return nil
}

// notice reports a reserved frame on errw in plain words; frames that
// are routine (the first stream:ready, stream:replayed) say nothing.
func (f *follower) notice(fr client.Frame) {
	if fr.Type == bus.TypeReady {
		f.readies++
	}
	if msg := describe(fr, f.readies); msg != "" {
		fmt.Fprintf(f.errw, "localbus: %s\n", msg)
	}
}

// retrying reports a failed or lost connection and the wait before the
// next attempt.
func (f *follower) retrying(err error, wait time.Duration) {
	var why string
	var ue *client.UnreachableError
	var ae *client.APIError
	switch {
	case errors.As(err, &ue):
		why = "cannot reach the daemon (" + dialProblem(ue) + ")"
	case errors.As(err, &ae) && errors.Is(err, client.ErrNotFound):
		why = fmt.Sprintf("session %q does not exist (yet)", f.session)
	case errors.As(err, &ae):
		why = fmt.Sprintf("the daemon answered %d %s: %s", ae.Status, ae.Code, ae.Message)
	default:
		why = fmt.Sprintf("lost the connection to the daemon (%v)", rootCause(err))
	}
	fmt.Fprintf(f.errw, "localbus: %s; retrying in %v\n", why, wait.Round(time.Millisecond))
}

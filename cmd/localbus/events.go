package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
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
		Name:  "events",
		Usage: "follow a stream of events",
		UsageText: "localbus events [--session ID | --family F] [--types T,T] [--since WHEN | --tail N] [--until WHEN] [--transport sse|ws] [--raw | --format TEMPLATE|json] [--count N] [--timeout D]\n" +
			"localbus events --session ID --consumer NAME [--ack auto|explicit] [--exec CMD]",
		Description: "Prints the events of a session (--session), of one family across all sessions\n" +
			"(--family), or of the whole daemon (neither; needs admin), as they are published.\n" +
			"Each line is TIME  SESSION  ID  TYPE  DATA, the time local, in aligned columns; on a\n" +
			"family or the whole daemon the id is the global bus's, shown as global:N (the id in\n" +
			"its session is {{.Seq}}). --raw (or --format json) prints each event's JSON envelope\n" +
			"on one line instead, and --format a Go template over the envelope: {{.ID}} {{.Type}}\n" +
			"{{.Session}} {{.Seq}} {{.Data}} (JSON text) {{.Timestamp}} (as sent, UTC) {{.Time}}\n" +
			"(local, a time.Time: {{.Time.Format \"15:04\"}}) {{.Originator}}; {{json .}} prints\n" +
			"the envelope, {{json .Data}} the data.\n" +
			"\n" +
			"--since and --until take a WHEN: an event id (0: everything the daemon still holds),\n" +
			"a duration (10m: ten minutes ago), an RFC 3339 time (2026-12-01T20:00:00+01:00) or\n" +
			"Unix seconds (@1764643500). A time is served from what the daemon still holds; one\n" +
			"its ring no longer reaches back to is reported as a gap. A plain number is always an\n" +
			"event id: one above the bus's last id is refused. --until is inclusive: once the\n" +
			"stream passes it (an event after it, or the clock past its time) the command exits 0.\n" +
			"--tail N (-n N, -nN) prints the last N events, then follows, as journalctl -n -f does.\n" +
			"\n" +
			"It follows the stream until interrupted: when the daemon reloads, restarts or drops\n" +
			"a reader that fell behind, it reconnects and resumes after the last event it\n" +
			"printed, so no event is printed twice or skipped. Events it could not recover (the\n" +
			"daemon no longer holds them, or the daemon restarted without durability) are\n" +
			"reported on stderr in plain words, as are reconnections.\n" +
			"\n" +
			"--consumer NAME follows the session through a consumer: a cursor the daemon keeps\n" +
			"for this reader, so the next run, after a restart of this command or of the\n" +
			"daemon, resumes where this one stopped, without keeping ids. The first run creates\n" +
			"it, at --since if given, else at the first event the daemon holds; on an existing\n" +
			"consumer --since is refused. Its ack mode is fixed then: with --ack explicit the\n" +
			"command acknowledges each event once its line is written to stdout, so an event\n" +
			"is lost only if it sat in a pipe whose reader died; with auto (the default for a\n" +
			"new consumer) the daemon moves the position as it sends, so what was sent but not\n" +
			"yet printed when the command stops (--count included) is not sent again. One\n" +
			"stream reads a consumer at a time: another one taking it over ends this one with\n" +
			"exit 4.\n" +
			"\n" +
			"--exec CMD hands each event to CMD instead of printing it: CMD runs with /bin/sh -c,\n" +
			"once per event, in order, with the event's JSON envelope on its stdin and\n" +
			"LOCALBUS_SESSION, LOCALBUS_EVENT_ID, LOCALBUS_EVENT_TYPE, LOCALBUS_CONSUMER and\n" +
			"LOCALBUS_ATTEMPT (1, then 2, ... for the same event) in its environment; its stdout\n" +
			"and stderr are this command's. With --consumer (explicit: --exec asks for it) an\n" +
			"event is acknowledged only once CMD exits 0. A CMD that exits non-zero or is\n" +
			"killed runs again for the same event, after 0.5 s doubling up to 30 s, and the\n" +
			"next event waits: every event is handled at least once, in order (with --consumer\n" +
			"across restarts of either side), so CMD must cope with seeing an event twice. On SIGTERM\n" +
			"or SIGINT the processes of a running CMD get SIGTERM, and SIGKILL 10 s later; its\n" +
			"event counts as handled only if CMD still exits 0.\n" +
			"\n" +
			"--count N exits 0 after N events, the --tail ones included (scripts: wait for\n" +
			"something to happen). --timeout D stops after D: exit 0 without --count, exit 1 if\n" +
			"fewer than N events came. Exits 4 when the session is deleted or does not exist\n" +
			"(--wait waits for it to be created) or another stream took the consumer over, 2\n" +
			"when the daemon cannot be reached at start, 3 when it refuses the credentials.\n" +
			"\n" +
			"Examples:\n" +
			"  localbus events --session build-17\n" +
			"  localbus events --session build-17 -n 20\n" +
			"  localbus events --session build-17 --types 'build:*' --since 0 --raw\n" +
			"  localbus events --session build-17 --since @1764643500 --until 10m\n" +
			"  localbus events --family build --since 1h --format '{{.Time.Format \"15:04:05\"}} {{.Type}}'\n" +
			"  localbus events --session build-17 --types build:done --count 1 --timeout 10m --wait\n" +
			"  localbus events --session build-17 --consumer backup --ack explicit --raw >> backup.ndjson\n" +
			"  localbus events --session build-17 --consumer deploy --exec 'jq -r .data.url | xargs deploy'",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "session", Aliases: []string{"s"}, Usage: "follow the session `ID`"},
			&cli.StringFlag{Name: "family", Aliases: []string{"f"}, Usage: "follow family `F` of every session (e.g. build)"},
			&cli.StringSliceFlag{Name: "types", Aliases: []string{"t"}, Usage: "only these event types; `T` is exact (build:done) or a whole family (build:*); comma-separated or repeated"},
			&cli.StringFlag{Name: "since", Usage: "start after `WHEN`: an event id (0: everything the daemon still holds), a duration (10m), an RFC 3339 time or @UNIX seconds", DefaultText: "only new events"},
			&cli.StringFlag{Name: "until", Usage: "exit 0 once the stream passes `WHEN` (inclusive; the forms of --since)", DefaultText: "follow"},
			&cli.IntFlag{Name: "tail", Aliases: []string{"n"}, Usage: "print the last `N` events, then follow", DefaultText: "none"},
			&cli.StringFlag{Name: "epoch", Usage: "the `EPOCH` --since belongs to (from an earlier stream), so a restarted id sequence is reported"},
			&cli.StringFlag{Name: "transport", Value: "sse", Usage: "`NAME`: sse (Server-Sent Events) or ws (WebSocket)"},
			&cli.BoolFlag{Name: "raw", Aliases: []string{"json"}, Usage: "print each event's JSON envelope on one line"},
			&cli.StringFlag{Name: "format", Usage: "print each event with the Go `TEMPLATE` (see above); json: the envelope, one per line"},
			&cli.IntFlag{Name: "count", Usage: "exit after `N` events", DefaultText: "follow until interrupted"},
			&cli.DurationFlag{Name: "timeout", Usage: "stop after `D` (e.g. 30s, 5m)", DefaultText: "none"},
			&cli.BoolFlag{Name: "wait", Usage: "wait for the --session to be created instead of exiting 4 when it does not exist"},
			&cli.IntFlag{Name: "max-queued", Usage: "ask the daemon to queue at most `N` unread events (16–2048) before dropping this reader", DefaultText: "the daemon's max_queued"},
			&cli.StringFlag{Name: "consumer", Usage: "follow the --session through the consumer `NAME`, a cursor the daemon keeps: the next run resumes where this one stopped"},
			&cli.StringFlag{Name: "ack", Usage: "a new consumer's ack `MODE`: auto (the daemon moves it as it sends) or explicit (this command acknowledges each event once printed, or once --exec's CMD exits 0)", DefaultText: "the consumer's own; auto for a new one, explicit with --exec"},
			&cli.StringFlag{Name: "exec", Usage: "run `CMD` (with /bin/sh -c) once per event, the envelope on its stdin, again until it exits 0", DefaultText: "print"},
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
	f := &follower{
		out: c.App.Writer, errw: c.App.ErrWriter,
		raw: c.Bool("raw"), global: opts.Session == "",
		session: opts.Session, family: opts.Family, epoch: opts.Epoch,
	}
	if err := f.consumerFlags(c, &opts); err != nil {
		return err
	}
	if f.consumer != "" || f.exec != "" {
		// The acker and --exec's CMD write too.
		f.out, f.errw = shareWriter(f.out), shareWriter(f.errw)
	}
	now := time.Now()
	if c.IsSet("since") {
		p, err := parsePoint(c.String("since"), now)
		if err != nil {
			return usagef(c, "--since %v", err)
		}
		f.since = &p
		if p.isID {
			opts.Since = &p.id
		} else {
			opts.SinceTime = p.t
		}
	}
	if c.IsSet("until") {
		p, err := parsePoint(c.String("until"), now)
		if err != nil {
			return usagef(c, "--until %v", err)
		}
		f.until = &p
	}
	if c.IsSet("tail") {
		if c.IsSet("since") {
			return usagef(c, "give --tail or --since, not both")
		}
		if f.tail = c.Int("tail"); f.tail < 0 {
			return usagef(c, "--tail must be 0 or more")
		}
	}
	if c.IsSet("format") {
		if c.Bool("raw") {
			return usagef(c, "give --raw or --format, not both")
		}
		if c.String("format") == "json" {
			f.raw = true
		} else {
			tmpl, err := parseFormat(c.String("format"))
			if err != nil {
				return usagef(c, "--format: %v", err)
			}
			f.format = tmpl
		}
	}
	if f.count = c.Int("count"); f.count < 0 {
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
	opts.OnRetry = f.retrying
	cl := newClient(c)
	defer cl.CloseIdleConnections()
	if f.tail > 0 {
		opts.Since = f.tailStart(ctx, cl, opts)
		f.tailing = true
	}
	if f.consumer != "" {
		if err := f.checkNewConsumer(ctx, cl); err != nil {
			return err
		}
		f.acks = newAcker(cl, f.session, f.consumer, f.errw)
		defer f.acks.Close()
	}

	st, err := cl.Stream(ctx, opts)
	if err == nil {
		defer st.Close()
		err = f.follow(ctx, st)
	}
	var ue usageError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ue):
		return usagef(c, "%v", ue.err)
	case c.Context.Err() != nil:
		return nil // interrupted: not an error
	case errors.Is(err, errOutput), errors.As(err, new(exitError)):
		return err
	case ctx.Err() != nil:
		if f.count > 0 {
			return fmt.Errorf("timed out after %v with %d of %d events", timeout, f.events, f.count)
		}
		return nil
	}
	if err := f.consumerError(c.Context, cl, err); err != nil {
		return err
	}
	return clientError(err)
}

// tailStart returns the cursor of a --tail stream: on a session stream
// without --types, N before the session's last id, since its ids are
// contiguous; otherwise 0, and the follower keeps the last N of what the
// daemon replays.
func (f *follower) tailStart(ctx context.Context, cl *client.Client, opts client.StreamOptions) *uint64 {
	from := uint64(0)
	if opts.Session == "" || len(opts.Types) > 0 {
		return &from
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if info, err := cl.Session(ctx, opts.Session); err == nil && info.LastID > uint64(f.tail) {
		from = info.LastID - uint64(f.tail)
	}
	return &from
}

// A follower prints a stream: events on out, what happens to the stream
// on errw. It is used by one goroutine.
type follower struct {
	out, errw io.Writer
	raw       bool
	format    *template.Template // nil: columns
	cols      columns
	global    bool // the stream is the global bus or a family: ids are global
	session   string
	family    string
	epoch     string // --epoch, "" if not given
	since     *point // --since, nil if not given
	until     *point // --until, nil if not given
	tail      int    // --tail N, 0 if not given
	count     int    // --count N, 0 if not given

	consumer string // --consumer, "" if not given
	exec     string // --exec's CMD, "" to print
	acks     *acker // acknowledges what was handled; nil without a consumer

	events   int        // events printed
	readies  int        // stream:ready frames seen
	live     bool       // the stream has replayed what it was asked to (or asked for none)
	tailing  bool       // --tail: events are kept in buf until the replay ends
	epochNow string     // the epoch of the connection's bus, from its stream:ready
	explicit bool       // the consumer acknowledges explicitly (its stream:ready says so)
	handled  eventPoint // the last event handled (printed or run) by this command
	buf      []client.Frame
	arm      func(time.Time) // ends the stream once the clock passes --until's time
}

// errUntil ends a stream whose --until time has passed.
var errUntil = errors.New("the --until time has passed")

// follow prints frames until the stream ends, --count events were printed
// or the stream passed --until.
func (f *follower) follow(ctx context.Context, st *client.Stream) error {
	run := ctx // --exec's CMD runs until the command is stopped, not --until
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	f.arm = func(t time.Time) {
		timer = time.AfterFunc(time.Until(t), func() { cancel(errUntil) })
	}
	for {
		fr, err := st.Next(ctx)
		if err != nil {
			if context.Cause(ctx) == errUntil {
				return nil
			}
			return err
		}
		var done bool
		switch {
		case fr.Reserved():
			done, err = f.reserved(run, fr)
		case f.tailing:
			f.buf = append(f.buf, fr)
			if len(f.buf) > f.tail {
				f.buf = slices.Delete(f.buf, 0, 1)
			}
		default:
			done, err = f.emit(run, fr)
		}
		if done || err != nil {
			return err
		}
	}
}

// emit handles an event (prints it, or runs --exec's CMD for it) unless
// it lies after --until or this command handled it already, and reports
// whether the command is done: --count reached or --until passed.
func (f *follower) emit(ctx context.Context, fr client.Frame) (bool, error) {
	if f.until != nil && f.until.after(fr.ID, fr.Timestamp) {
		return true, nil
	}
	at := eventPoint{id: fr.ID, epoch: f.epochNow}
	if f.seen(at) {
		return false, nil
	}
	if err := f.handle(ctx, fr); err != nil {
		return true, err
	}
	f.handledNow(at)
	f.events++
	if f.count > 0 && f.events >= f.count {
		return true, nil
	}
	return f.until != nil && f.until.isID && fr.ID == f.until.id, nil
}

// reserved handles a stream:* frame and reports whether the command is
// done.
func (f *follower) reserved(ctx context.Context, fr client.Frame) (bool, error) {
	switch fr.Type {
	case bus.TypeReady:
		f.readies++
		d := frameData[bus.ReadyData](fr)
		f.epochNow = d.Epoch
		if d.Consumer != nil {
			f.explicit = d.Consumer.Ack == string(client.AckExplicit)
		}
		if f.readies == 1 {
			if err := f.checkIDs(d); err != nil {
				return true, err
			}
			f.consumerNotice(d)
			// A consumer's stream replays what follows its position.
			if f.since == nil && f.tail == 0 && f.consumer == "" {
				f.notice(fr)
				return f.goLive(), nil
			}
		}
	case bus.TypeReplayed:
		if !f.live {
			f.tailing = false
			for i, ev := range f.buf {
				if done, err := f.emit(ctx, ev); done || err != nil {
					f.buf = f.buf[i+1:]
					return true, err
				}
			}
			f.buf = nil
			return f.goLive(), nil
		}
	case bus.TypeGap:
		if f.tailing && frameData[bus.GapData](fr).Reason == bus.GapRingEvicted {
			return false, nil // the tail is shorter than asked: nothing was lost
		}
	}
	f.notice(fr)
	return false, nil
}

// goLive marks the end of the replay and reports whether the command is
// done: --until's id was reached (the replay delivered every event up to
// the bus's last id, which --until is not above), or its time has passed.
func (f *follower) goLive() bool {
	f.live = true
	switch {
	case f.until == nil:
		return false
	case f.until.isID || !time.Now().Before(f.until.t):
		return true
	}
	f.arm(f.until.t)
	return false
}

// checkIDs refuses an id of --since or --until above the bus's last id at
// the stream's start, unless --epoch names another epoch (the id then
// belongs to an old sequence): a number that large is most likely Unix
// seconds.
func (f *follower) checkIDs(d bus.ReadyData) error {
	if f.epoch != "" && f.epoch != d.Epoch {
		return nil
	}
	what := fmt.Sprintf("session %q", f.session)
	switch {
	case f.family != "":
		what = fmt.Sprintf("the global bus (which family %q streams use)", f.family)
	case f.session == "":
		what = "the global bus"
	}
	for _, p := range []struct {
		flag string
		p    *point
	}{{"--since", f.since}, {"--until", f.until}} {
		if p.p != nil && p.p.isID && p.p.id > d.LastID {
			return usageError{err: p.p.idHint(p.flag, d.LastID, what)}
		}
	}
	return nil
}

// idWidth is the least width of the id column, right-aligned, so that the
// columns after it stay put as ids grow.
const idWidth = 6

// globalLabel marks the ids of family and global streams, which are the
// global bus's and not their sessions'.
const globalLabel = "global:"

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
		id, width := strconv.FormatUint(fr.ID, 10), idWidth
		if f.global {
			// Not the id in its session (fr.Seq): the global bus's, which
			// is what --since takes on this stream.
			id, width = globalLabel+id, idWidth+len(globalLabel)
		}
		if len(id) < width {
			id = strings.Repeat(" ", width-len(id)) + id
		}
		_, err = io.WriteString(f.out, f.cols.line(localTime(fr.Timestamp), session, id, fr.Type, string(fr.Data)))
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errOutput, err)
	}
	return nil
}

// notice reports a reserved frame on errw in plain words (reserved has
// counted it if it is a stream:ready); frames that are routine (the first stream:ready, stream:replayed) say nothing.
func (f *follower) notice(fr client.Frame) {
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

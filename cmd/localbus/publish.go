package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/client"
)

func publishCommand() *cli.Command {
	cmd := clientCommand(&cli.Command{
		Name:      "publish",
		Usage:     "publish events to a session",
		UsageText: "localbus publish --session ID TYPE [JSON | -]\n   localbus publish --session ID < events.ndjson",
		Description: "With TYPE, publishes one event of that type (family:name, e.g. build:step) whose\n" +
			"data is JSON, the JSON read from stdin when it is -, or null when absent.\n" +
			"\n" +
			"Without TYPE, reads newline-delimited JSON events from stdin, one\n" +
			"{\"type\": \"family:name\", \"data\": ...} per line, and publishes them in one streaming\n" +
			"request: each line as soon as it is read, so a slow producer's events go out as they come.\n" +
			"Blank lines are skipped; while stdin is quiet the command sends one now and then, so the\n" +
			"daemon keeps the request open. Each line stands alone: a line the daemon refuses stops the\n" +
			"command there, and the lines before it stay published.\n" +
			"\n" +
			"Prints the ids the daemon assigned (--json: the daemon's answer). The session is\n" +
			"created by the first publish unless the daemon's auto_create_sessions is off.\n" +
			"Exits 1 on bad input, 2 when the daemon cannot be reached, 3 when it refuses.\n" +
			"\n" +
			"Examples:\n" +
			"  localbus publish --session build-17 build:step '{\"n\": 3}'\n" +
			"  echo '{\"n\": 4}' | localbus publish --session build-17 build:step -\n" +
			"  tail -f build.log | jq -Rc --unbuffered '{type: \"build:log\", data: .}' | localbus publish --session build-17",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "session", Aliases: []string{"s"}, Usage: "publish to the session `ID` (required)"},
			&cli.StringFlag{Name: "client-id", Usage: "name this publisher: events carry it as \"originator\""},
			jsonFlag("print the daemon's answer as JSON"),
		},
		Action: runPublish,
	})
	cmd.BashComplete = completeWithSessions(cmd, false)
	return cmd
}

func runPublish(c *cli.Context) error {
	session := c.String("session")
	if !c.IsSet("session") {
		return usagef(c, "--session is required: publish --session ID TYPE [JSON | -]")
	}
	if err := checkArgs(c, 0, 2, "TYPE [JSON | -]"); err != nil {
		return err
	}
	if c.NArg() == 2 && strings.HasPrefix(c.Args().Get(1), "--") {
		return usagef(c, "flags go before the arguments: move %s before %q", c.Args().Get(1), c.Args().First())
	}
	if _, err := bus.ParseSessionID(session); err != nil {
		return usagef(c, "--session: %s", inputText(err.(*bus.InputError)))
	}
	cl := newClient(c)
	cl.ClientID = c.String("client-id")
	defer cl.CloseIdleConnections()
	p := &publisher{c: c, cl: cl, session: session, json: c.Bool("json")}

	if c.NArg() == 0 {
		if isTerminal(c.App.Reader) {
			return usagef(c, "give an event TYPE, or pipe NDJSON events on stdin")
		}
		return p.stream(c.App.Reader)
	}
	typ := c.Args().Get(0)
	if _, err := bus.ParseType(typ); err != nil {
		var ie *bus.InputError
		if errors.As(err, &ie) {
			return exitError{exitUsage, errors.New(inputText(ie))}
		}
		return exitError{exitUsage, err}
	}
	data := []byte("null")
	if c.NArg() == 2 {
		data = []byte(c.Args().Get(1))
		if string(data) == "-" {
			var err error
			if data, err = io.ReadAll(c.App.Reader); err != nil {
				return exitError{exitUsage, fmt.Errorf("reading the data from stdin: %v", err)}
			}
		}
		if err := checkJSON(data); err != nil {
			return exitError{exitUsage, fmt.Errorf("the data is not valid JSON: %v", err)}
		}
	}
	ctx, cancel := requestContext(c)
	defer cancel()
	r, err := cl.PublishBatch(ctx, session, []client.Event{{Type: typ, Data: json.RawMessage(data)}})
	if err != nil {
		return clientError(err)
	}
	return p.report(r)
}

// checkJSON returns why data is not one JSON value, or nil.
func checkJSON(data []byte) error {
	var v any
	return json.Unmarshal(data, &v)
}

// isTerminal reports whether r is a terminal, where waiting for NDJSON
// would only puzzle the user.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// A publisher sends events and reports what the daemon assigned.
type publisher struct {
	c       *cli.Context
	cl      *client.Client
	session string
	json    bool
}

// stream publishes the newline-delimited events of r in one streaming
// request, each line as soon as it is read, and reports the daemon's
// answer.
func (p *publisher) stream(r io.Reader) error {
	// No request timeout: the request lasts as long as the input.
	reply, err := p.cl.PublishStream(p.c.Context, p.session, r)
	if err != nil {
		return streamError(err)
	}
	if reply.Count == 0 {
		return exitError{exitUsage, errors.New("no events on stdin: want one {\"type\": \"family:name\", \"data\": ...} per line")}
	}
	if p.json {
		b, _ := json.Marshal(reply)
		fmt.Fprintf(p.c.App.Writer, "%s\n", b)
		return nil
	}
	if reply.Count == 1 {
		fmt.Fprintf(p.c.App.Writer, "published event %d to session %s\n", reply.FirstID, p.session)
		return nil
	}
	fmt.Fprintf(p.c.App.Writer, "published %d events to session %s: ids %d–%d\n", reply.Count, p.session, reply.FirstID, reply.LastID)
	return nil
}

// streamError turns the error of a streaming publish into the command's:
// one line that says at which line of stdin it stopped, why, and what was
// published before.
func streamError(err error) error {
	var pe *client.PublishStreamError
	if !errors.As(err, &pe) {
		if errors.Is(err, context.Canceled) {
			return exitError{exitUsage, errors.New("interrupted before the daemon answered: the lines read so far may have been published")}
		}
		return clientError(err)
	}
	var ae *client.APIError
	switch {
	case errors.As(pe.Err, &ae):
		var ee exitError
		errors.As(clientError(ae), &ee)
		if rest, ok := aboutLine(ae.Message); ok && pe.Line > 0 {
			// The daemon counts the lines of its request, keepalive blank
			// lines included; the client knows the line of stdin.
			msg := fmt.Sprintf("line %d%s (%d %s); %s", pe.Line, rest, ae.Status, ae.Code, publishedBefore(pe.Published))
			if ae.Refused() {
				msg = "refused by the daemon: " + msg
			}
			return exitError{ee.code, errors.New(msg)}
		}
		if pe.Published.Count == 0 {
			return ee
		}
		return exitError{ee.code, fmt.Errorf("%v; %s", ee.err, publishedFirst(pe.Published))}
	case errors.Is(pe.Err, client.ErrLineTooLong):
		return exitError{exitUsage, fmt.Errorf("line %d is longer than any event may be; %s", pe.Line, publishedBefore(pe.Published))}
	}
	return exitError{exitUsage, fmt.Errorf("reading stdin at line %d: %v; %s", pe.Line, rootCause(pe.Err), publishedBefore(pe.Published))}
}

// aboutLine reports whether a message of the daemon is about one line of
// its request ("line 7: …", "line 7 is …"), and returns what follows the
// line number.
func aboutLine(msg string) (rest string, ok bool) {
	after, found := strings.CutPrefix(msg, "line ")
	if !found {
		return "", false
	}
	i := 0
	for i < len(after) && after[i] >= '0' && after[i] <= '9' {
		i++
	}
	if i == 0 || (i < len(after) && after[i] != ':' && after[i] != ' ') {
		return "", false
	}
	return after[i:], true
}

// publishedBefore says what was published before the line a publish
// stopped at.
func publishedBefore(r client.StreamReply) string {
	switch r.Count {
	case 0:
		return "nothing was published"
	case 1:
		return fmt.Sprintf("the event before it was published (id %d)", r.FirstID)
	}
	return fmt.Sprintf("the %d events before it were published (ids %d–%d)", r.Count, r.FirstID, r.LastID)
}

// publishedFirst says what was published before a publish stopped for a
// reason that is no line's.
func publishedFirst(r client.StreamReply) string {
	if r.Count == 1 {
		return fmt.Sprintf("1 event was published first (id %d)", r.FirstID)
	}
	return fmt.Sprintf("%d events were published first (ids %d–%d)", r.Count, r.FirstID, r.LastID)
}

// report prints the answer to a publish of one event.
func (p *publisher) report(r client.PublishReply) error {
	if p.json {
		b, _ := json.Marshal(r)
		fmt.Fprintf(p.c.App.Writer, "%s\n", b)
		return nil
	}
	if len(r.IDs) == 1 {
		fmt.Fprintf(p.c.App.Writer, "published event %d to session %s\n", r.IDs[0], p.session)
	}
	return nil
}

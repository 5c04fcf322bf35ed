package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/client"
)

func publishCommand() *cli.Command {
	cmd := &cli.Command{
		Name:      "publish",
		Usage:     "publish events to a session",
		UsageText: "localbus publish --session ID TYPE [JSON | -]\n   localbus publish --session ID < events.ndjson",
		Description: "With TYPE, publishes one event of that type (family:name, e.g. build:step) whose\n" +
			"data is JSON, the JSON read from stdin when it is -, or null when absent.\n" +
			"\n" +
			"Without TYPE, reads newline-delimited JSON events from stdin, one\n" +
			"{\"type\": \"family:name\", \"data\": ...} per line, and publishes them in batches as\n" +
			"they arrive (up to 1000 events per batch, each batch all or nothing). A line that is\n" +
			"not such an event stops the command with exit 1 before it is sent; the batches before\n" +
			"it stay published.\n" +
			"\n" +
			"Prints the ids the daemon assigned (--json: the daemon's answer). The session is\n" +
			"created by the first publish unless the daemon's auto_create_sessions is off.\n" +
			"Exits 1 on bad input, 2 when the daemon cannot be reached, 3 when it refuses.\n" +
			"\n" +
			"Examples:\n" +
			"  localbus publish --session build-17 build:step '{\"n\": 3}'\n" +
			"  echo '{\"n\": 4}' | localbus publish --session build-17 build:step -\n" +
			"  jq -c '{type: \"build:log\", data: .}' log.json | localbus publish --session build-17",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "session", Aliases: []string{"s"}, Usage: "publish to the session `ID` (required)"},
			&cli.StringFlag{Name: "client-id", Usage: "name this publisher: events carry it as \"originator\""},
			jsonFlag("print the daemon's answer as JSON, one line per batch"),
		}, connFlags()...),
		Action:          runPublish,
		HideHelpCommand: true,
		OnUsageError:    onUsageError,
	}
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
	if err := bus.ValidateSessionID(session); err != nil {
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
		return p.ndjson(c.App.Reader)
	}
	typ := c.Args().Get(0)
	if err := bus.ValidatePublishType(typ); err != nil {
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
	return p.report(r, 1)
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
	sent    int // events published so far
}

// maxBatch is how many events go in one request: the daemon's limit.
const maxBatch = ipc.DefaultMaxBatch

// ndjson publishes newline-delimited events from r. It sends what it has
// whenever no more input is waiting, so a slow producer's events go out as
// they come and a file goes out in full batches.
func (p *publisher) ndjson(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var batch bytes.Buffer
	n, line := 0, 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		ctx, cancel := requestContext(p.c)
		defer cancel()
		reply, err := p.cl.PublishNDJSON(ctx, p.session, bytes.NewReader(batch.Bytes()))
		if err != nil {
			if p.sent > 0 {
				return clientError(fmt.Errorf("%w (the %d events before this batch were published)", err, p.sent))
			}
			return clientError(err)
		}
		if err := p.report(reply, n); err != nil {
			return err
		}
		batch.Reset()
		n = 0
		return nil
	}
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			line++
			if ev := bytes.TrimSpace(b); len(ev) > 0 {
				if msg := checkEvent(ev); msg != "" {
					return exitError{exitUsage, fmt.Errorf("line %d: %s; nothing from this line on was published%s", line, msg, p.sentText())}
				}
				batch.Write(ev)
				batch.WriteByte('\n')
				n++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return exitError{exitUsage, fmt.Errorf("reading stdin: %v", err)}
		}
		if n == maxBatch || br.Buffered() == 0 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if p.sent == 0 {
		return exitError{exitUsage, errors.New("no events on stdin: want one {\"type\": \"family:name\", \"data\": ...} per line")}
	}
	return nil
}

func (p *publisher) sentText() string {
	if p.sent == 0 {
		return ""
	}
	return fmt.Sprintf(" (the %d events before it were)", p.sent)
}

// checkEvent returns what is wrong with one NDJSON event, or "".
func checkEvent(line []byte) string {
	var ev struct {
		Type *string         `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return fmt.Sprintf("not an event {\"type\": \"family:name\", \"data\": ...}: %v", err)
	}
	if dec.More() {
		return "more than one JSON value on the line"
	}
	if ev.Type == nil {
		return "the event has no \"type\""
	}
	if err := bus.ValidatePublishType(*ev.Type); err != nil {
		var ie *bus.InputError
		if errors.As(err, &ie) {
			return inputText(ie)
		}
		return err.Error()
	}
	return ""
}

// report prints the answer to a publish of n events.
func (p *publisher) report(r client.PublishReply, n int) error {
	p.sent += n
	w := p.c.App.Writer
	if p.json {
		b, _ := json.Marshal(r)
		fmt.Fprintf(w, "%s\n", b)
		return nil
	}
	switch {
	case len(r.IDs) == 1:
		fmt.Fprintf(w, "published event %d to session %s\n", r.IDs[0], p.session)
	case len(r.IDs) > 1:
		fmt.Fprintf(w, "published %d events to session %s: ids %d–%d\n", len(r.IDs), p.session, r.IDs[0], r.IDs[len(r.IDs)-1])
	}
	return nil
}

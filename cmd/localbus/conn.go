package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/wire"
)

// connFlags returns the flags that say how to reach the daemon. Every
// client command has them, after its name (localbus events --socket S).
// Flags keep state, so each call returns new ones.
func connFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:        "socket",
			Usage:       "the daemon's Unix socket `PATH`",
			EnvVars:     []string{"LOCALBUS_SOCKET"},
			DefaultText: "$XDG_RUNTIME_DIR/localbus/localbus.sock, else " + wire.SystemSocketPath + " (see localbus socket)",
			TakesFile:   true,
			Category:    "Connection",
		},
		&cli.StringFlag{
			Name:     "url",
			Usage:    "reach the daemon over TCP at `URL` instead of the socket, e.g. http://127.0.0.1:8001 (needs --key)",
			Category: "Connection",
		},
		&cli.StringFlag{
			Name:     "key",
			Usage:    "authenticate with the bearer `KEY` (from localbus keys add)",
			EnvVars:  []string{"LOCALBUS_KEY"},
			Category: "Connection",
		},
	}
}

// clientCommand returns cmd, a command that talks to the daemon, with the
// connection flags after its own, no help subcommand, and usage errors
// shown with its help on stderr.
func clientCommand(cmd *cli.Command) *cli.Command {
	cmd.Flags = append(cmd.Flags, connFlags()...)
	cmd.HideHelpCommand = true
	cmd.OnUsageError = onUsageError
	return cmd
}

// jsonFlag is --json (alias --raw): machine-readable output. c.Bool("json")
// reads it.
func jsonFlag(usage string) cli.Flag {
	return &cli.BoolFlag{Name: "json", Aliases: []string{"raw"}, Usage: usage}
}

// newClient returns the client the connection flags describe.
func newClient(c *cli.Context) *client.Client {
	cl := &client.Client{URL: c.String("url"), Key: c.String("key")}
	if cl.URL == "" {
		cl.Socket = socketPath(c)
	}
	return cl
}

// requestTimeout bounds one REST call of a command, so a wedged daemon
// does not hang a script forever.
const requestTimeout = 30 * time.Second

// requestContext returns the context of one REST call.
func requestContext(c *cli.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Context, requestTimeout)
}

// callDaemon makes the REST calls of call with the client the connection
// flags describe, bounded together by requestTimeout, and returns call's
// error as the command's (clientError). An error call has already made an
// exitError passes unchanged.
func callDaemon(c *cli.Context, call func(ctx context.Context, cl *client.Client) error) error {
	cl := newClient(c)
	defer cl.CloseIdleConnections()
	ctx, cancel := requestContext(c)
	defer cancel()
	err := call(ctx, cl)
	if ee := (exitError{}); errors.As(err, &ee) {
		return err
	}
	return clientError(err)
}

// onUsageError makes a command-line mistake of the command c a
// usageError: run prints it with one line pointing at the command's help,
// and exits 1. An unknown flag gets a did-you-mean: among the command's
// flags, or before any command among every command's (they may come first).
func onUsageError(c *cli.Context, err error, _ bool) error {
	ue := usageError{err: err}
	flags := slices.Concat(c.App.Flags, allFlags(c.App.Commands))
	// localbus itself runs as a command named after the app.
	if c.Command != nil && c.Command.Name != "" && c.Command.Name != c.App.Name {
		ue.cmd = c.Command.HelpName
		flags = c.Command.Flags
	}
	const undefined = "flag provided but not defined: "
	if name, ok := strings.CutPrefix(err.Error(), undefined); ok {
		dashes := "--"
		if len(strings.TrimLeft(name, "-")) == 1 {
			dashes = "-"
		}
		name = dashes + strings.TrimLeft(name, "-")
		ue.err = fmt.Errorf("unknown flag %s%s", name, didYouMean(name, flagNames(flags)))
	}
	return ue
}

// usagef is a usage error of the command c.
func usagef(c *cli.Context, format string, args ...any) error {
	return onUsageError(c, fmt.Errorf(format, args...), true)
}

// checkArgs returns a usage error unless the command has min to max
// arguments; want describes them.
func checkArgs(c *cli.Context, min, max int, want string) error {
	n := c.NArg()
	if n >= min && n <= max {
		return nil
	}
	if n < min {
		return usagef(c, "missing arguments: want %s", want)
	}
	return usagef(c, "too many arguments: want %s", want)
}

// clientError turns an error of the client package into the command's
// error: one line a user can act on, and the exit code of SPEC §9 (2 the
// daemon cannot be reached, 3 refused, 4 the stream ended for good, 1 the
// daemon found the input wrong).
func clientError(err error) error {
	var ue *client.UnreachableError
	var ee *client.EndedError
	var ae *client.APIError
	var urlErr *client.URLError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &urlErr):
		return exitError{exitUsage, fmt.Errorf("--url %q: want http://HOST:PORT", urlErr.URL)}
	case errors.As(err, &ue):
		return exitError{exitUnreachable, fmt.Errorf("cannot reach the daemon: %s", dialProblem(ue))}
	case errors.As(err, &ee):
		return exitError{exitEnded, errors.New(endedText(ee))}
	case errors.As(err, &ae):
		switch {
		case ae.Refused():
			hint := "pass a key with --key or LOCALBUS_KEY"
			if ae.Status == http.StatusForbidden {
				hint = "use a key with the needed scope"
			}
			return exitError{exitRefused, fmt.Errorf("refused by the daemon (%d %s): %s; %s", ae.Status, ae.Code, ae.Message, hint)}
		case ae.Status == http.StatusServiceUnavailable:
			return exitError{exitUnreachable, fmt.Errorf("the daemon cannot serve this now (%d %s): %s", ae.Status, ae.Code, ae.Message)}
		}
		return exitError{exitUsage, fmt.Errorf("%s (%d %s)", ae.Message, ae.Status, ae.Code)}
	case errors.Is(err, context.DeadlineExceeded):
		return exitError{exitUnreachable, fmt.Errorf("the daemon did not answer within %v", requestTimeout)}
	}
	var ie *bus.InputError
	if errors.As(err, &ie) {
		return exitError{exitUsage, errors.New(inputText(ie))}
	}
	return exitError{exitUnreachable, fmt.Errorf("talking to the daemon: %v", err)}
}

// dialProblem says in plain words why the daemon was not reached, with
// a hint when it may just not be running. On the Unix socket it names every
// socket the CLI looked for (socketsTried).
func dialProblem(ue *client.UnreachableError) string {
	if path, ok := strings.CutPrefix(ue.Addr, "unix:"); ok {
		return unreachableText(path, ue.Err)
	}
	where := strings.TrimPrefix(ue.Addr, "tcp:")
	if errors.Is(ue.Err, syscall.ECONNREFUSED) {
		return "nothing is listening on " + where + "; is it running? (start it with 'localbus serve', or point --socket or --url at it)"
	}
	return fmt.Sprintf("%s: %v", where, rootCause(ue.Err))
}

// rootCause returns the innermost error, the part worth showing of a
// chain like "dial unix /x: connect: connection refused".
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

func endedText(ee *client.EndedError) string {
	what := "the stream"
	if ee.Session != "" {
		what = fmt.Sprintf("session %q", ee.Session)
	}
	switch ee.Reason {
	case "not_found":
		return fmt.Sprintf("%s does not exist", what)
	case "session_deleted":
		return fmt.Sprintf("%s was deleted; the stream has ended", what)
	}
	return "the daemon ended the stream for good"
}

// inputText is an *bus.InputError without its package prefix.
func inputText(ie *bus.InputError) string {
	if ie.Value == "" {
		return fmt.Sprintf("invalid %s: %s", ie.Field, ie.Reason)
	}
	return fmt.Sprintf("invalid %s %q: %s", ie.Field, ie.Value, ie.Reason)
}

// sessionList fetches the session ids for shell completion, quietly.
func sessionList(c *cli.Context) []string {
	return completionNames(c, func(ctx context.Context, cl *client.Client) ([]string, error) {
		list, err := cl.Sessions(ctx)
		ids := make([]string, len(list))
		for i, s := range list {
			ids[i] = s.ID
		}
		return ids, err
	})
}

// consumerList fetches the names of the consumers of --session for shell
// completion, quietly.
func consumerList(c *cli.Context) []string {
	if c.String("session") == "" {
		return nil
	}
	return completionNames(c, func(ctx context.Context, cl *client.Client) ([]string, error) {
		list, err := cl.Consumers(ctx, c.String("session"))
		names := make([]string, len(list))
		for i, cs := range list {
			names[i] = cs.Name
		}
		return names, err
	})
}

// completionNames asks the daemon for names to complete with, within a
// second; nothing when that fails.
func completionNames(c *cli.Context, fetch func(context.Context, *client.Client) ([]string, error)) []string {
	ctx, cancel := context.WithTimeout(c.Context, time.Second)
	defer cancel()
	cl := newClient(c)
	defer cl.CloseIdleConnections()
	names, err := fetch(ctx, cl)
	if err != nil {
		return nil
	}
	return names
}

// completeWithSessions is a BashComplete that offers session ids after
// --session (and, when args is true, as the command's argument), the
// session's consumers after --consumer, and the command's flags otherwise.
func completeWithSessions(cmd *cli.Command, args bool) cli.BashCompleteFunc {
	return func(c *cli.Context) {
		last := ""
		if len(os.Args) > 2 {
			last = os.Args[len(os.Args)-2]
		}
		if last == "--consumer" {
			for _, name := range consumerList(c) {
				fmt.Fprintln(c.App.Writer, name)
			}
			return
		}
		if last == "--session" || last == "-s" || (args && !strings.HasPrefix(last, "-") && c.NArg() == 0) {
			for _, id := range sessionList(c) {
				fmt.Fprintln(c.App.Writer, id)
			}
			return
		}
		cli.DefaultCompleteWithFlags(cmd)(c)
	}
}

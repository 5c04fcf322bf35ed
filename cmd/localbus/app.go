package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes (SPEC §9).
const (
	exitOK          = 0
	exitUsage       = 1 // usage or input error
	exitUnreachable = 2 // cannot reach the daemon
	exitRefused     = 3 // refused (auth)
	exitEnded       = 4 // stream ended by the daemon for good
)

// newApp builds the command-line application writing to stdout and stderr.
func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:                 "localbus",
		Usage:                "a local event bus: run the daemon, follow and publish events",
		Version:              version,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		HideHelpCommand:      true,
		Commands: []*cli.Command{
			serveCommand(),
			eventsCommand(),
			publishCommand(),
			sessionCommand(),
			statusCommand(),
			reloadCommand(),
			keysCommand(),
			systemdCommand(),
			versionCommand(),
			benchCommand(),
			completionCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {}, // run maps errors to exit codes
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
	}
}

// usageError marks a command-line mistake: exit 1 with usage on stderr.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitError carries an exit code chosen by a command.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// run runs the application and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	unknown := false
	app.CommandNotFound = func(c *cli.Context, name string) {
		unknown = true
		fmt.Fprintf(stderr, "localbus: unknown command %q\n\n", name)
		c.App.Writer = stderr
		cli.ShowAppHelp(c)
	}
	err := app.RunContext(ctx, args)
	if unknown {
		return exitUsage
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "localbus: %v\n", err)
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitUsage
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			fmt.Fprintf(c.App.Writer, "localbus %s\n", version)
			return nil
		},
	}
}

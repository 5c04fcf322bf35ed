package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

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
	app := &cli.App{
		Name:                 "localbus",
		Usage:                "a local event bus: run the daemon, follow and publish events",
		Version:              buildVersion().Version,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		Commands: []*cli.Command{
			serveCommand(),
			eventsCommand(),
			publishCommand(),
			sessionCommand(),
			statusCommand(),
			topCommand(),
			reloadCommand(),
			keysCommand(),
			systemdCommand(),
			configCommand(),
			manCommand(),
			socketCommand(),
			versionCommand(),
			benchCommand(),
			completionCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {}, // run maps errors to exit codes
		OnUsageError:   onUsageError,
	}
	shortUsageErrors(app.Commands)
	return app
}

// shortUsageErrors makes every command in cmds, and their subcommands,
// report a usage error as onUsageError does, in one line.
func shortUsageErrors(cmds []*cli.Command) {
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = onUsageError
		}
		shortUsageErrors(c.Subcommands)
	}
}

func init() {
	// --version prints what the version command prints.
	cli.VersionPrinter = func(c *cli.Context) { printVersion(c.App.Writer) }
}

// usageError marks a command-line mistake: run prints it and one line
// pointing at the help of the command, and exits 1.
type usageError struct {
	err error
	// cmd is the command whose help to point at, "localbus session show";
	// "" means localbus itself.
	cmd string
}

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
	var notFound error
	app.CommandNotFound = func(c *cli.Context, name string) {
		ue, cmds := usageError{}, c.App.Commands
		if c.Command != nil && c.Command.Name != "" {
			ue.cmd, cmds = c.Command.HelpName, c.Command.Subcommands
		}
		ue.err = fmt.Errorf("unknown command %q%s", name, didYouMean(name, commandNames(cmds)))
		notFound = ue
	}
	err := app.RunContext(ctx, reorderArgs(app, args))
	if notFound != nil {
		err = notFound
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "localbus: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		cmd := ue.cmd
		if cmd == "" {
			cmd = "localbus"
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd)
		return exitUsage
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitUsage
}

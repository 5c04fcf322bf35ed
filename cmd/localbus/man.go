package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
)

// manCommand writes the manual pages, generated from the command
// definitions so they never drift from them: scripts/package runs it.
// urfave/cli renders one page per App, so each command is wrapped as an
// App of its own, "localbus-<command>"; its SYNOPSIS reads
// "localbus <command>".
func manCommand() *cli.Command {
	return &cli.Command{
		Name:      "man",
		Usage:     "write the manual pages (localbus.1, localbus-<command>.1) into DIR",
		ArgsUsage: "DIR",
		Hidden:    true,
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 1, 1, "one directory"); err != nil {
				return err
			}
			pages, err := manPages()
			if err != nil {
				return err
			}
			dir := c.Args().First()
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			for _, p := range pages {
				if err := os.WriteFile(filepath.Join(dir, p.name), []byte(p.text), 0o644); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// A manPage is one page: its file name and its roff text.
type manPage struct{ name, text string }

// manPages renders localbus.1 and one page per visible command.
func manPages() ([]manPage, error) {
	app := newApp(io.Discard, io.Discard)
	var see []string
	for _, cmd := range app.Commands {
		if !cmd.Hidden {
			see = append(see, fmt.Sprintf("**localbus-%s**(1)", cmd.Name))
		}
	}
	seeAlso := "\n\nSee also: " + strings.Join(see, ", ") + "."
	app.Description = "localbus runs per-session event buses and serves them as Server-Sent Events and " +
		"WebSocket streams on a Unix socket (and optionally loopback TCP). One binary is the daemon " +
		"(**localbus serve**, usually started by **localbus.socket**) and its client. " +
		"Each command has a page of its own." + seeAlso
	top, err := app.ToManWithSection(1)
	if err != nil {
		return nil, err
	}
	pages := []manPage{{"localbus.1", top}}
	for _, cmd := range app.Commands {
		if cmd.Hidden {
			continue
		}
		sub := &cli.App{
			Name:        "localbus-" + cmd.Name,
			Usage:       cmd.Usage,
			UsageText:   strings.TrimSpace("localbus " + cmd.Name + " [options] " + cmd.ArgsUsage),
			Description: cmd.Description,
			Flags:       cmd.Flags,
			Commands:    cmd.Subcommands,
		}
		if sub.Description != "" {
			sub.Description += "\n\n"
		}
		sub.Description += "See also: **localbus**(1)."
		text, err := sub.ToManWithSection(1)
		if err != nil {
			return nil, fmt.Errorf("man page of %s: %w", cmd.Name, err)
		}
		// The page keeps the App's name, localbus-<command>, as its title
		// and NAME, which man and whatis find it by; its SYNOPSIS shows the
		// command as it is typed.
		synopsis := "\n.SH SYNOPSIS\n" + sub.Name + "\n"
		if !strings.Contains(text, synopsis) {
			return nil, fmt.Errorf("man page of %s: no SYNOPSIS line %q", cmd.Name, sub.Name)
		}
		text = strings.Replace(text, synopsis, "\n.SH SYNOPSIS\nlocalbus "+cmd.Name+"\n", 1)
		pages = append(pages, manPage{"localbus-" + cmd.Name + ".1", text})
	}
	return pages, nil
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/systemd"
)

func systemdCommand() *cli.Command {
	userFlag := &cli.BoolFlag{Name: "user", Usage: "the per-user units (systemctl --user) instead of the system ones"}
	binFlag := &cli.StringFlag{Name: "binary", Usage: "the localbus executable the service runs", DefaultText: "this executable"}
	// units returns the units and what stands in the way of the service
	// running the binary ("" for nothing).
	units := func(c *cli.Context) (us []systemd.Unit, problem string, err error) {
		bin := c.String("binary")
		if bin == "" {
			exe, err := os.Executable()
			if err != nil {
				return nil, "", err
			}
			if bin, err = filepath.EvalSymlinks(exe); err != nil {
				return nil, "", err
			}
		}
		if us, err = systemd.Units(c.Bool("user"), bin); err != nil {
			return nil, "", err
		}
		if problem = systemd.BinaryProblem(us, bin); problem != "" {
			problem += "; " + binaryHint(bin, c.Command.Name, c.Bool("user"), c.String("dir"), unusableHome(us, c.Bool("user")))
		}
		return us, problem, nil
	}
	return &cli.Command{
		Name:  "systemd",
		Usage: "print or install the systemd units (localbus.socket, localbus.service)",
		Subcommands: []*cli.Command{
			{
				Name:  "print",
				Usage: "print the unit files",
				Flags: []cli.Flag{userFlag, binFlag},
				Action: func(c *cli.Context) error {
					us, problem, err := units(c)
					if err != nil {
						return err
					}
					if problem != "" {
						fmt.Fprintf(c.App.ErrWriter, "localbus: warning: %s\n", problem)
					}
					for i, u := range us {
						if i > 0 {
							fmt.Fprintln(c.App.Writer)
						}
						fmt.Fprintf(c.App.Writer, "# --- %s ---\n%s", u.Name, u.Content)
					}
					return nil
				},
			},
			{
				Name:  "install",
				Usage: "write the unit files where the service manager finds them",
				Description: "Writes localbus.socket and localbus.service to /etc/systemd/system, or with --user to\n" +
					"$XDG_CONFIG_HOME/systemd/user. Then run: systemctl [--user] daemon-reload &&\n" +
					"systemctl [--user] enable --now localbus.socket\n" +
					"\n" +
					"The system service runs as an unprivileged user of its own and cannot see home\n" +
					"directories or /tmp, so it refuses (exit 1) a --binary there, or one others cannot\n" +
					"run (install -m 0755 localbus /usr/local/bin/ first). Both refuse a binary in the Go\n" +
					"build cache or a temporary directory, where go run builds one (for --user, put it in\n" +
					"~/.local/bin first); --force installs anyway.",
				Flags: []cli.Flag{userFlag, binFlag,
					&cli.StringFlag{Name: "dir", Usage: "install into this directory instead"},
					&cli.BoolFlag{Name: "force", Usage: "install even when the service could not run the binary"},
				},
				Action: func(c *cli.Context) error {
					us, problem, err := units(c)
					if err != nil {
						return err
					}
					if problem != "" {
						if !c.Bool("force") {
							return fmt.Errorf("%s\n(or pass --force to install the units anyway)", problem)
						}
						fmt.Fprintf(c.App.ErrWriter, "localbus: warning: %s\n", problem)
					}
					dir := c.String("dir")
					if dir == "" {
						if dir, err = systemd.UnitDir(c.Bool("user")); err != nil {
							return err
						}
					}
					if err := systemd.Install(dir, us); err != nil {
						return err
					}
					scope := ""
					if c.Bool("user") {
						scope = " --user"
					}
					for _, u := range us {
						fmt.Fprintf(c.App.Writer, "wrote %s\n", filepath.Join(dir, u.Name))
					}
					fmt.Fprintf(c.App.Writer, "now run: systemctl%s daemon-reload && systemctl%s enable --now localbus.socket\n", scope, scope)
					return nil
				},
			},
		},
	}
}

// unusableHome returns the home directory when the per-user service of
// units could not run a binary in ~/.local/bin either (the home is in a
// temporary directory), else "".
func unusableHome(us []systemd.Unit, user bool) string {
	if !user {
		return ""
	}
	home, err := os.UserHomeDir()
	if err != nil || systemd.BinaryProblem(us, filepath.Join(home, ".local", "bin", "localbus")) == "" {
		return ""
	}
	return home
}

// binaryHint says how to put the binary where the service of command
// ("print" or "install") can run it, and how to name it there: a user
// directory for the per-user service, /usr/local/bin for the system one;
// or, when that user directory is in a home the service could not run a
// binary from either (home, "" when it can), to name one outside it.
// The command it suggests keeps --user and --dir as they were given.
func binaryHint(bin, command string, user bool, dir, home string) string {
	dest, install, flags := "/usr/local/bin/localbus", "install -m 0755 "+shellWord(bin)+" /usr/local/bin/", ""
	if user {
		// The shell expands ~ at the start of each word, so both lines paste as they are.
		dest = "~/.local/bin/localbus"
		install = "install -D -m 0755 " + shellWord(bin) + " " + dest
		flags = " --user"
	}
	if dir != "" {
		flags += " --dir " + shellWord(dir)
	}
	if home != "" {
		return fmt.Sprintf("your home directory, %s, is in a temporary directory too, so ~/.local/bin would not do either: "+
			"install a binary outside it, then name it:\n"+
			"  localbus systemd %s%s --binary PATH", shellWord(home), command, flags)
	}
	return fmt.Sprintf("install the binary where the service can run it, then name it:\n"+
		"  %s\n"+
		"  localbus systemd %s%s --binary %s\n"+
		"(in a checkout, go build -o %s ./cmd/localbus builds one there)", install, command, flags, dest, dest)
}

// shellWord quotes s for a POSIX shell when it holds anything but the
// characters a path usually has.
func shellWord(s string) string {
	for _, r := range s {
		if !strings.ContainsRune("/._-+,:=@%", r) && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/daemon"
	"github.com/localbus/localbus/ipc/access"
)

// reloadTimeout bounds the reload request that keys add and revoke send.
const reloadTimeout = 10 * time.Second

// keysCommand is "localbus keys add|list|revoke": it edits the keys file
// (SPEC §7) and, after a change, asks a running daemon to reload it.
func keysCommand() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "add, list and revoke the keys that grant access over TCP (and on the socket)",
		Description: "Keys are stored in the keys file (keys_file in the configuration, by default keys.json\n" +
			"beside it) only as SHA-256 hashes, with a name, scopes and a creation time. A new key is\n" +
			"printed once, by keys add, and cannot be shown again. After add and revoke the command asks\n" +
			"the daemon on --socket to reload; if none answers, the change applies when it next starts.\n" +
			"Scopes: admin, read, read:FAMILY, publish, publish:FAMILY.",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "create a key and print it, alone, on stdout",
				ArgsUsage: " ",
				Flags: append(keysFileFlags(),
					&cli.StringFlag{Name: "name", Usage: "the key's name, [A-Za-z0-9][A-Za-z0-9._-]{0,63} (required)"},
					&cli.StringSliceFlag{Name: "scope", Usage: "a scope the key grants; repeat or separate with commas (required)"},
					socketFlag(), keyFlag(),
				),
				Action: keysAdd,
			},
			{
				Name:      "list",
				Usage:     "list the keys: names, scopes and creation times, never the keys",
				ArgsUsage: " ",
				Flags: append(keysFileFlags(),
					&cli.BoolFlag{Name: "json", Usage: "print a JSON array instead of a table"},
				),
				Action: keysList,
			},
			{
				Name:      "revoke",
				Usage:     "remove the key named NAME",
				ArgsUsage: "NAME",
				Flags:     append(keysFileFlags(), socketFlag(), keyFlag()),
				Action:    keysRevoke,
			},
		},
	}
}

// keysFileFlags are the flags that find the keys file.
func keysFileFlags() []cli.Flag {
	return []cli.Flag{
		configFlag(),
		&cli.StringFlag{Name: "keys-file", Usage: "the keys file, instead of keys_file from the configuration", TakesFile: true},
	}
}

func socketFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "socket", Usage: "the daemon's Unix socket, to ask it to reload",
		EnvVars: []string{"LOCALBUS_SOCKET"}, DefaultText: "as localbus socket prints", TakesFile: true,
	}
}

func keyFlag() cli.Flag {
	return &cli.StringFlag{Name: "key", Usage: "an admin key for the reload request, when the socket requires keys", EnvVars: []string{"LOCALBUS_KEY"}}
}

// keysFile returns the keys file of a keys command: --keys-file, else
// keys_file of the configuration named by --config (or the default one).
func keysFile(c *cli.Context) (string, error) {
	if f := c.String("keys-file"); f != "" {
		return f, nil
	}
	cfg, err := daemon.LoadConfig(configSource(c))
	if err != nil {
		return "", err
	}
	return cfg.KeysFile, nil
}

// loadKeys reads the keys file of a keys command and returns its path
// with the keys.
func loadKeys(c *cli.Context) (string, *access.Keyring, error) {
	path, err := keysFile(c)
	if err != nil {
		return "", nil, err
	}
	ring, err := access.Load(path)
	return path, ring, err
}

// noArgs refuses positional arguments on a command that takes none.
func noArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef(c, "%s takes no arguments, got %q", c.Command.FullName(), c.Args().First())
	}
	return nil
}

func keysAdd(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	// Checked here rather than with Required, which prints the help on
	// stdout, where only the key belongs.
	if !c.IsSet("name") || !c.IsSet("scope") {
		return usagef(c, "keys add needs --name NAME and at least one --scope SCOPE")
	}
	var scopes []access.Scope
	for _, s := range c.StringSlice("scope") {
		for _, part := range strings.Split(s, ",") {
			sc, err := access.ParseScope(strings.TrimSpace(part))
			if err != nil {
				return err
			}
			scopes = append(scopes, sc)
		}
	}
	path, ring, err := loadKeys(c)
	if err != nil {
		return err
	}
	name := c.String("name")
	key, err := ring.Add(name, scopes)
	if err != nil {
		return err
	}
	if err := ring.Save(path); err != nil {
		return err
	}
	// The key alone on stdout, so KEY=$(localbus keys add …) works; the rest
	// goes to stderr.
	fmt.Fprintln(c.App.Writer, key)
	fmt.Fprintf(c.App.ErrWriter, "added key %q with scopes %s to %s; it is shown only this once\n",
		name, access.NewScopes(scopes...), path)
	reloadAfterChange(c)
	return nil
}

func keysList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	path, ring, err := loadKeys(c)
	if err != nil {
		return err
	}
	keys := ring.List()
	if c.Bool("json") {
		b, err := json.MarshalIndent(keys, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "%s\n", b)
		return nil
	}
	if len(keys) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "no keys in %s\n", path)
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCOPES\tCREATED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", k.Name, k.Scopes, k.Created.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

func keysRevoke(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef(c, "keys revoke takes one argument, the key's NAME")
	}
	name := c.Args().First()
	path, ring, err := loadKeys(c)
	if err != nil {
		return err
	}
	if err := ring.Revoke(name); err != nil {
		return err
	}
	if err := ring.Save(path); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "revoked key %q in %s\n", name, path)
	reloadAfterChange(c)
	return nil
}

// reloadAfterChange asks the daemon on --socket to reload, so a change of
// the keys file takes effect, and says on stderr what happened. None of the
// outcomes is an error: the keys file is already saved, and keys add has
// already printed the key, which a script must not lose to a failed exit.
func reloadAfterChange(c *cli.Context) {
	socket := socketPath(c)
	w := c.App.ErrWriter
	status, msg, err := requestReload(c.Context, socket, c.String("key"))
	switch {
	case errors.Is(err, syscall.EACCES):
		fmt.Fprintf(w, "warning: no permission to connect to %s; if a daemon runs there, the change applies at its next reload or start\n", socket)
	case err != nil:
		fmt.Fprintf(w, "no daemon answered on %s; the change applies when the daemon next starts (or reloads)\n", socket)
	case status == http.StatusOK:
		fmt.Fprintf(w, "the daemon on %s reloaded its keys; the change is in effect\n", socket)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		fmt.Fprintf(w, "warning: the daemon on %s refused to reload (%d: %s); the change applies at its next reload or start: run localbus reload as an admin, or systemctl reload localbus\n", socket, status, msg)
	default:
		fmt.Fprintf(w, "warning: the daemon on %s did not reload (%d: %s); it keeps its old keys until it reloads or restarts\n", socket, status, msg)
	}
}

// requestReload sends POST /api/v1/reload on the Unix socket and returns
// the status and the error message of the reply. err is set when no daemon
// could be reached.
func requestReload(ctx context.Context, socket, key string) (status int, msg string, err error) {
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localbus/api/v1/reload", nil)
	if err != nil {
		return 0, "", err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil {
		msg = eb.Error.Message
	}
	return resp.StatusCode, msg, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
// (SPEC §7) of the running daemon, which reports its path to admin callers,
// and after a change asks the daemon to reload it.
func keysCommand() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "add, list and revoke the keys that grant access over TCP (and on the socket)",
		Description: "Keys are stored in the keys file only as SHA-256 hashes, with a name, scopes and a\n" +
			"creation time. A new key is printed once, by keys add, and cannot be shown again.\n" +
			"\n" +
			"The commands act on the keys file of the daemon on --socket, which tells an admin caller\n" +
			"(root, its own user, or --key with an admin key) which file it reads. If --config or\n" +
			"--keys-file names another file, they refuse (exit 1) and name both. With no daemon\n" +
			"running they act on keys_file of --config (by default keys.json beside the\n" +
			"configuration) and say which file. After add and revoke the daemon reloads; keys add\n" +
			"then checks that the daemon accepts the new key, and takes it back (exit 1) if not.\n" +
			"Scopes: admin, read, read:FAMILY, publish, publish:FAMILY.",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "create a key and print it, alone, on stdout",
				ArgsUsage: " ",
				Flags: append(keysFileFlags(),
					&cli.StringFlag{Name: "name", Usage: "the key's name, [A-Za-z0-9][A-Za-z0-9._-]{0,63} (required)"},
					&cli.StringSliceFlag{Name: "scope", Usage: "a scope the key grants; repeat or separate with commas (required)"},
				),
				Action: keysAdd,
			},
			{
				Name:      "list",
				Aliases:   []string{"ls"},
				Usage:     "list the keys: names, scopes and creation times, never the keys",
				ArgsUsage: " ",
				Flags: append(keysFileFlags(),
					&cli.BoolFlag{Name: "json", Usage: "print a JSON array instead of a table"},
				),
				Action: keysList,
			},
			{
				Name:      "revoke",
				Aliases:   []string{"rm"},
				Usage:     "remove the key named NAME",
				ArgsUsage: "NAME",
				Flags:     keysFileFlags(),
				Action:    keysRevoke,
			},
		},
		Action:          groupAction,
		HideHelpCommand: true,
		OnUsageError:    onUsageError,
	}
}

// keysFileFlags are the flags that find the keys file and the daemon.
func keysFileFlags() []cli.Flag {
	return []cli.Flag{
		configFlag(),
		&cli.StringFlag{Name: "keys-file", Usage: "the keys file, instead of keys_file from the configuration", TakesFile: true},
		&cli.StringFlag{
			Name: "socket", Usage: "the daemon's Unix socket, which says which keys file it reads and reloads it",
			EnvVars: []string{"LOCALBUS_SOCKET"}, DefaultText: "as localbus socket prints", TakesFile: true,
		},
		&cli.StringFlag{Name: "key", Usage: "an admin key for the daemon, when the socket requires keys", EnvVars: []string{"LOCALBUS_KEY"}},
	}
}

// keysTarget is the keys file a keys command acts on, and the daemon that
// reads it.
type keysTarget struct {
	path   string
	socket string
	// daemon reports that a daemon answered on socket and named path as
	// its keys file; none that no daemon answered.
	daemon, none bool
}

// findKeysFile returns the keys file to act on: the running daemon's, as
// it reports it, unless --config or --keys-file names another file, which
// is an error naming both; without a daemon that tells, the file of
// --keys-file or --config (or the default configuration). It says on
// stderr which file it uses when no daemon named it.
func findKeysFile(c *cli.Context) (keysTarget, error) {
	t := keysTarget{socket: socketPath(c)}
	local, from, err := localKeysFile(c)
	if err != nil {
		return t, err
	}
	answered, daemonFile, err := askKeysFile(c.Context, t.socket, c.String("key"))
	w := c.App.ErrWriter
	switch {
	case !answered:
		fmt.Fprintf(w, "no daemon answered on %s (%v); using the keys file %s (%s)\n", t.socket, rootCause(err), local, from)
		t.path, t.none = local, true
	case daemonFile == "":
		fmt.Fprintf(w, "warning: the daemon on %s does not tell this caller which keys file it reads (it tells admin callers only: root, its own user, or --key with an admin key); using %s (%s)\n", t.socket, local, from)
		t.path = local
	case (c.IsSet("config") || c.IsSet("keys-file")) && !sameFile(local, daemonFile):
		return t, fmt.Errorf("%s names the keys file %s, but the daemon on %s reads %s; leave out %s to act on the daemon's file, or point --socket at the daemon that reads %s",
			from, local, t.socket, daemonFile, strings.Fields(from)[0], local)
	default:
		t.path, t.daemon = daemonFile, true
	}
	return t, nil
}

// localKeysFile returns the keys file of --keys-file, else keys_file of
// the configuration named by --config (or the default one), and says where
// it came from.
func localKeysFile(c *cli.Context) (path, from string, err error) {
	if f := c.String("keys-file"); f != "" {
		abs, err := filepath.Abs(f)
		if err != nil {
			return "", "", err
		}
		return abs, "--keys-file", nil
	}
	src := configSource(c)
	cfg, err := daemon.LoadConfig(src)
	if err != nil {
		return "", "", err
	}
	file := src.File
	if file == "" {
		file = daemon.DefaultConfigPath()
	}
	from = "keys_file of " + file
	if c.IsSet("config") {
		from = "--config " + file
	}
	return cfg.KeysFile, from, nil
}

// sameFile reports whether a and b name the same file: the same path, or
// the same inode.
func sameFile(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// askKeysFile asks the daemon on socket which keys file it reads (GET
// /api/v1/caps, which names it to admin callers). answered is false when
// no daemon could be reached; file is "" when it did not say.
func askKeysFile(ctx context.Context, socket, key string) (answered bool, file string, err error) {
	status, body, err := socketRequest(ctx, socket, http.MethodGet, "/api/v1/caps", key)
	if err != nil {
		return false, "", err
	}
	var caps struct {
		Admin *struct {
			KeysFile string `json:"keysFile"`
		} `json:"admin"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &caps) != nil || caps.Admin == nil {
		return true, "", nil
	}
	return true, caps.Admin.KeysFile, nil
}

// loadKeys finds the keys file of a keys command and reads it.
func loadKeys(c *cli.Context) (keysTarget, *access.Keyring, error) {
	t, err := findKeysFile(c)
	if err != nil {
		return t, nil, err
	}
	ring, err := access.LoadForEdit(t.path)
	return t, ring, err
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
	t, ring, err := loadKeys(c)
	if err != nil {
		return err
	}
	name := c.String("name")
	key, err := ring.Add(name, scopes)
	if err != nil {
		return fmt.Errorf("%w (in %s)", err, t.path)
	}
	_, statErr := os.Lstat(t.path)
	existed := statErr == nil
	if err := ring.Save(t.path); err != nil {
		return err
	}
	// undo takes the key back out of the file, or removes a file this
	// command created, and lets the daemon read it again.
	undo := func() {
		if !existed {
			os.Remove(t.path)
		} else if ring.Revoke(name) == nil {
			ring.Save(t.path)
		}
		reloadQuietly(c, t)
	}
	w := c.App.ErrWriter
	reloaded, refusal := reloadAfterChange(c, t)
	if refusal != "" {
		undo()
		return exitError{exitUsage, fmt.Errorf("the daemon on %s cannot load its keys with the new key (%s); the key was taken back out of %s", t.socket, refusal, t.path)}
	}
	if reloaded {
		// The daemon reloaded: it must now accept the key. If it does not,
		// take the key back rather than hand out one that does not work.
		if accepted, status, err := keyAccepted(c.Context, t.socket, key); err != nil || !accepted {
			why := fmt.Sprintf("answered %d", status)
			if err != nil {
				why = rootCause(err).Error()
			}
			undo()
			return exitError{exitUsage, fmt.Errorf("the daemon on %s reloaded but does not accept the new key (%s); the key was taken back out of %s", t.socket, why, t.path)}
		}
		fmt.Fprintf(w, "added key %q with scopes %s to %s; the daemon on %s accepts it; it is shown only this once\n",
			name, access.NewScopes(scopes...), t.path, t.socket)
	} else {
		fmt.Fprintf(w, "added key %q with scopes %s to %s; it is shown only this once\n", name, access.NewScopes(scopes...), t.path)
	}
	// The key alone on stdout, so KEY=$(localbus keys add …) works; the rest
	// goes to stderr.
	fmt.Fprintln(c.App.Writer, key)
	return nil
}

func keysList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	t, ring, err := loadKeys(c)
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
		fmt.Fprintf(c.App.ErrWriter, "no keys in %s\n", t.path)
		return nil
	}
	fmt.Fprintf(c.App.ErrWriter, "keys in %s:\n", t.path)
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
	t, ring, err := loadKeys(c)
	if err != nil {
		return err
	}
	if err := ring.Revoke(name); err != nil {
		if errors.Is(err, access.ErrUnknownKey) {
			return exitError{exitUsage, fmt.Errorf("no key named %q in %s", name, t.path)}
		}
		return fmt.Errorf("%w (in %s)", err, t.path)
	}
	if err := ring.Save(t.path); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "revoked key %q in %s\n", name, t.path)
	if _, refusal := reloadAfterChange(c, t); refusal != "" {
		return exitError{exitUsage, fmt.Errorf("the daemon on %s cannot load its keys file (%s); it keeps its old keys, the key %q included, until it loads the file", t.socket, refusal, name)}
	}
	return nil
}

// reloadAfterChange asks the daemon on the target's socket to reload, so a
// change of the keys file takes effect, says on stderr what happened, and
// reports whether the daemon reloaded. refusal is the daemon's message when
// it could not load the changed configuration (400), which the caller
// reports as its error. The other outcomes are warnings: the keys file is
// saved and a daemon that could not be asked, or may not be asked by this
// caller, reads it when it next reloads.
func reloadAfterChange(c *cli.Context, t keysTarget) (reloaded bool, refusal string) {
	socket := t.socket
	w := c.App.ErrWriter
	status, msg, err := requestReload(c.Context, socket, c.String("key"))
	switch {
	case errors.Is(err, syscall.EACCES):
		fmt.Fprintf(w, "warning: no permission to connect to %s; if a daemon runs there, the change applies at its next reload or start\n", socket)
	case err != nil && t.none:
		fmt.Fprintf(w, "the change applies when the daemon next starts (or reloads) with keys_file %s\n", t.path)
	case err != nil:
		fmt.Fprintf(w, "no daemon answered on %s; the change applies when the daemon next starts (or reloads) with keys_file %s\n", socket, t.path)
	case status == http.StatusOK && t.daemon:
		fmt.Fprintf(w, "the daemon on %s reloaded its keys\n", socket)
		return true, ""
	case status == http.StatusOK:
		fmt.Fprintf(w, "the daemon on %s reloaded, but did not say that it reads %s\n", socket, t.path)
		return true, ""
	case status == http.StatusBadRequest:
		return false, msg
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		fmt.Fprintf(w, "warning: the daemon on %s refused to reload (%d: %s); the change is NOT in effect until it reloads: run localbus reload as an admin, or systemctl reload localbus\n", socket, status, msg)
	default:
		fmt.Fprintf(w, "warning: the daemon on %s did not reload (%d: %s); it keeps its old keys until it reloads or restarts\n", socket, status, msg)
	}
	return false, ""
}

// reloadQuietly asks the daemon to reload, saying nothing.
func reloadQuietly(c *cli.Context, t keysTarget) {
	requestReload(c.Context, t.socket, c.String("key"))
}

// keyAccepted reports whether the daemon on socket accepts key: a request
// that needs credentials, made with the key alone, is not refused with 401
// (a 403 means the key is valid but lacks the scope).
func keyAccepted(ctx context.Context, socket, key string) (bool, int, error) {
	status, _, err := socketRequest(ctx, socket, http.MethodGet, "/api/v1/sessions", key)
	if err != nil {
		return false, 0, err
	}
	return status != http.StatusUnauthorized, status, nil
}

// requestReload sends POST /api/v1/reload on the Unix socket and returns
// the status and the error message of the reply. err is set when no daemon
// could be reached.
func requestReload(ctx context.Context, socket, key string) (status int, msg string, err error) {
	status, body, err := socketRequest(ctx, socket, http.MethodPost, "/api/v1/reload", key)
	if err != nil {
		return 0, "", err
	}
	var eb struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil {
		msg = eb.Error.Message
	}
	return status, msg, nil
}

// socketRequest makes one request without a body on the Unix socket, with
// the bearer key when not "", and returns the status and up to 64 KiB of
// the body. err is set when no daemon could be reached.
func socketRequest(ctx context.Context, socket, method, path, key string) (int, []byte, error) {
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
	req, err := http.NewRequestWithContext(ctx, method, "http://localbus"+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, body, nil
}

package daemon

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/urfave/cli/v2"
)

// runServe runs "localbus serve ARGS" in an app whose serve command has
// ServeFlags, and returns what ConfigFromCLI gave it.
//
// Tests that run an app are not parallel: urfave/cli v2 writes to its global
// HelpFlag on every run.
func runServe(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	var (
		cfg    Config
		cfgErr error
		ran    bool
		out    bytes.Buffer
	)
	app := &cli.App{
		Name:      "localbus",
		Writer:    &out,
		ErrWriter: &out,
		Commands: []*cli.Command{{
			Name:  "serve",
			Flags: ServeFlags(),
			Action: func(c *cli.Context) error {
				ran = true
				cfg, cfgErr = ConfigFromCLI(c)
				return nil
			},
		}},
	}
	if err := app.Run(append([]string{"localbus", "serve"}, args...)); err != nil {
		t.Fatalf("localbus serve %q: %v\n%s", args, err, out.String())
	}
	if !ran {
		t.Fatalf("localbus serve %q did not run its action\n%s", args, out.String())
	}
	return cfg, cfgErr
}

// emptyConfig returns the path of an empty configuration file.
func emptyConfig(t *testing.T) string { return writeConfig(t, "") }

func TestFlagsOverrideFile(t *testing.T) {
	path := writeConfig(t, `
ring_size = 100
max_queued = 64
keepalive = "20s"
socket_mode = "0600"
unix_peer_scopes = ["admin"]
auto_create_sessions = false
`)
	got, err := runServe(t, "--config", path,
		"--ring-size", "200",
		"--keepalive", "5s",
		"--socket-mode", "0640",
		"--unix-peer-scopes", "read:build,publish:build",
		"--auto-create-sessions",
		"--socket", "/tmp/x/bus.sock",
	)
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.KeysFile = filepath.Join(filepath.Dir(path), "keys.json")
	want.MaxQueued = 64 // from the file only
	want.RingSize = 200
	want.Keepalive = 5e9
	want.SocketMode = 0o640
	want.UnixPeerScopes = []string{"read:build", "publish:build"}
	want.AutoCreateSessions = true
	want.Socket = "/tmp/x/bus.sock"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ConfigFromCLI mismatch (-want +got):\n%s", diff)
	}
}

func TestUnsetFlagsKeepFileValues(t *testing.T) {
	got, err := runServe(t, "--config", filepath.Join("testdata", "full.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fullConfig(), got); diff != "" {
		t.Errorf("ConfigFromCLI(full.toml, no flags) mismatch (-want +got):\n%s", diff)
	}
}

// fullArgs are the flags that say what testdata/full.toml says.
var fullArgs = map[string][]string{
	"socket":                {"--socket", "/srv/localbus/bus.sock"},
	"socket_mode":           {"--socket-mode", "0600"},
	"socket_group":          {"--socket-group", "localbus"},
	"unix_auth":             {"--unix-auth", "key"},
	"unix_peer_scopes":      {"--unix-peer-scopes", "read:build", "--unix-peer-scopes", "publish:build"},
	"listen_tcp":            {"--listen-tcp", "0.0.0.0:8001"},
	"allow_remote":          {"--allow-remote"},
	"allowed_origins":       {"--allowed-origins", "http://localhost:3000,https://app.example.com"},
	"allowed_hosts":         {"--allowed-hosts", "bus.example.com", "--allowed-hosts", "bus.example.com:8001"},
	"keys_file":             {"--keys-file", "/srv/localbus/keys.json"},
	"ring_size":             {"--ring-size", "1000"},
	"ring_max_bytes":        {"--ring-max-bytes", "8388608"},
	"max_queued":            {"--max-queued", "512"},
	"max_queued_bytes":      {"--max-queued-bytes", "4194304"},
	"max_subscribers":       {"--max-subscribers", "8"},
	"max_subscribers_total": {"--max-subscribers-total", "100"},
	"max_sessions":          {"--max-sessions", "16"},
	"auto_create_sessions":  {"--auto-create-sessions=false"},
	"max_event_bytes":       {"--max-event-bytes", "65536"},
	"max_body_bytes":        {"--max-body-bytes", "1048576"},
	"max_header_bytes":      {"--max-header-bytes", "8192"},
	"keepalive":             {"--keepalive", "30s"},
	"shutdown_timeout":      {"--shutdown-timeout", "5s"},
	"read_header_timeout":   {"--read-header-timeout", "3s"},
	"idle_timeout":          {"--idle-timeout", "1m"},
	"log_level":             {"--log-level", "debug"},
	"state_dir":             {"--state-dir", "/srv/localbus/state"},
	"durability":            {"--durability", "memory"},
	"fsync":                 {"--fsync", "interval"},
	"fsync_interval":        {"--fsync-interval", "250ms"},
}

func TestFlagsCoverEveryKey(t *testing.T) {
	args := []string{"--config", emptyConfig(t)}
	for _, s := range settings {
		a, ok := fullArgs[s.key]
		if !ok {
			t.Fatalf("no flag arguments for %s: add them to fullArgs", s.key)
		}
		if want := "--" + strings.ReplaceAll(s.key, "_", "-"); !strings.HasPrefix(a[0], want) {
			t.Errorf("flag for %s is %s, want %s", s.key, a[0], want)
		}
		args = append(args, a...)
	}
	got, err := runServe(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fullConfig(), got); diff != "" {
		t.Errorf("ConfigFromCLI(every flag) mismatch (-want +got):\n%s", diff)
	}
}

func TestFlagValuesAreParsedAndValidatedLikeFileValues(t *testing.T) {
	tests := []struct {
		name string
		args []string
		key  string
		msg  string
	}{
		{"int not decimal", []string{"--ring-size", "0x10"}, "ring_size", `must be a decimal integer, got "0x10"`},
		{"int out of range", []string{"--ring-size", "0"}, "ring_size", "must be between 1 and 1000000, got 0"},
		{"bytes not a number", []string{"--max-event-bytes", "1MiB"}, "max_event_bytes", "must be a decimal integer"},
		{"queue out of range", []string{"--max-queued", "4096"}, "max_queued", "must be between 16 and 2048"},
		{"duration without unit", []string{"--keepalive", "5"}, "keepalive", `must be a duration like "15s"`},
		{"duration too short", []string{"--keepalive", "10ms"}, "keepalive", "must be at least 1s"},
		{"mode not octal", []string{"--socket-mode", "0668"}, "socket_mode", "octal mode"},
		{"mode too wide", []string{"--socket-mode", "4660"}, "socket_mode", `from "0600" to "0777"`},
		{"bad choice", []string{"--unix-auth", "password"}, "unix_auth", `must be one of "peer", "key"`},
		{"bad scope", []string{"--unix-peer-scopes", "read,write"}, "unix_peer_scopes", `"write" is not a scope`},
		{"remote listen", []string{"--listen-tcp", "0.0.0.0:8001"}, "listen_tcp", "not a loopback address"},
		{"empty socket", []string{"--socket", ""}, "socket", "must not be empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			flag := "--" + strings.ReplaceAll(tc.key, "_", "-")
			got, err := runServe(t, append([]string{"--config", emptyConfig(t)}, tc.args...)...)
			errs := configErrors(err)
			if len(errs) != 1 {
				t.Fatalf("serve %q: error %v, want one *ConfigError", tc.args, err)
			}
			ce := errs[0]
			if ce.Key != tc.key || ce.Flag != flag || ce.File != "" {
				t.Errorf("serve %q: Key, Flag, File = %q, %q, %q; want %q, %q, \"\"", tc.args, ce.Key, ce.Flag, ce.File, tc.key, flag)
			}
			if !strings.Contains(ce.Msg, tc.msg) {
				t.Errorf("serve %q: Msg = %q, want it to contain %q", tc.args, ce.Msg, tc.msg)
			}
			if want := "config: " + flag + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("serve %q: error %q, want prefix %q", tc.args, err, want)
			}
			if got.RingSize != 0 {
				t.Errorf("serve %q: returned a non-zero Config with its error", tc.args)
			}
		})
	}
}

func TestBoolFlagsSetBothWays(t *testing.T) {
	path := writeConfig(t, "auto_create_sessions = false\nallow_remote = true\n")
	tests := []struct {
		args             []string
		autoCreate, remo bool
	}{
		{nil, false, true},
		{[]string{"--auto-create-sessions"}, true, true},
		{[]string{"--auto-create-sessions=true", "--allow-remote=false"}, true, false},
	}
	for _, tc := range tests {
		got, err := runServe(t, append([]string{"--config", path}, tc.args...)...)
		if err != nil {
			t.Fatalf("serve %q: %v", tc.args, err)
		}
		if got.AutoCreateSessions != tc.autoCreate || got.AllowRemote != tc.remo {
			t.Errorf("serve %q: AutoCreateSessions, AllowRemote = %t, %t; want %t, %t",
				tc.args, got.AutoCreateSessions, got.AllowRemote, tc.autoCreate, tc.remo)
		}
	}
}

func TestFlagCanInvalidateFileValue(t *testing.T) {
	// The file's listen_tcp is fine with its allow_remote; the flag turns
	// allow_remote off, and the error names the key where it came from.
	path := writeConfig(t, "listen_tcp = \"0.0.0.0:8001\"\nallow_remote = true\n")
	_, err := runServe(t, "--config", path, "--allow-remote=false")
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "listen_tcp" || ce.File != path {
		t.Errorf("serve --allow-remote=false: %v, want a listen_tcp error from %s", err, path)
	}
}

func TestFileAndFlagErrorsAreReportedTogether(t *testing.T) {
	path := writeConfig(t, "ring_sise = 1\nkeepalive = \"1ms\"\n")
	_, err := runServe(t, "--config", path, "--max-queued", "1")
	var got []string
	for _, ce := range configErrors(err) {
		got = append(got, ce.Key+"@"+ce.File+ce.Flag)
	}
	want := []string{"ring_sise@" + path, "max_queued@--max-queued", "keepalive@" + path}
	if !slices.Equal(got, want) {
		t.Errorf("errors = %q, want %q", got, want)
	}
}

func TestConfigFlagNamingMissingFileIsError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.toml")
	_, err := runServe(t, "--config", path)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("serve --config missing: %v, want a not-exist error naming %s", err, path)
	}
}

func TestNoConfigFlagReadsDefaultFile(t *testing.T) {
	// Not parallel: sets the environment.
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("LOCALBUS_SOCKET", "") // empty counts as unset
	path := DefaultConfigPath()
	if _, err := os.Stat(path); err == nil {
		t.Skipf("%s exists on this machine", path)
	}
	got, err := runServe(t, "--ring-size", "7")
	if err != nil {
		t.Fatalf("serve without --config and without a default file: %v", err)
	}
	want := Defaults()
	want.RingSize = 7
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ConfigFromCLI mismatch (-want +got):\n%s", diff)
	}

	if os.Geteuid() == 0 {
		return // the default file is the system one, which a test must not write
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("ring_size = 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := runServe(t); err != nil || got.RingSize != 9 {
		t.Errorf("serve with a default file: RingSize %d, %v; want 9, nil", got.RingSize, err)
	}
}

func TestSocketFlagReadsEnvironment(t *testing.T) {
	// Not parallel: sets the environment.
	t.Setenv("LOCALBUS_SOCKET", "/tmp/env/bus.sock")
	config := emptyConfig(t)
	got, err := runServe(t, "--config", config)
	if err != nil || got.Socket != "/tmp/env/bus.sock" {
		t.Errorf("serve with $LOCALBUS_SOCKET: Socket %q, %v; want /tmp/env/bus.sock", got.Socket, err)
	}
	got, err = runServe(t, "--config", config, "--socket", "/tmp/flag/bus.sock")
	if err != nil || got.Socket != "/tmp/flag/bus.sock" {
		t.Errorf("serve with $LOCALBUS_SOCKET and --socket: Socket %q, %v; want the flag's", got.Socket, err)
	}
	t.Setenv("LOCALBUS_SOCKET", "/"+strings.Repeat("x", 200))
	_, err = runServe(t, "--config", config)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "socket" || ce.Flag != "$LOCALBUS_SOCKET" {
		t.Errorf("serve with a long $LOCALBUS_SOCKET: %v, want a socket error naming the variable", err)
	}
}

func TestServeFlagsHaveOneFlagPerKey(t *testing.T) {
	var names []string
	for _, f := range ServeFlags() {
		names = append(names, f.Names()...)
	}
	want := []string{"config"}
	for _, s := range settings {
		want = append(want, strings.ReplaceAll(s.key, "_", "-"))
	}
	if !slices.Equal(names, want) {
		t.Errorf("ServeFlags names = %q, want %q", names, want)
	}
}

func TestServeHelpShowsDefaults(t *testing.T) {
	var out bytes.Buffer
	app := &cli.App{
		Name: "localbus", Writer: &out, ErrWriter: &out,
		Commands: []*cli.Command{{Name: "serve", Flags: ServeFlags(), Action: func(*cli.Context) error { return nil }}},
	}
	if err := app.Run([]string{"localbus", "serve", "--help"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--ring-size value", "(default: 8000)",
		"--socket-mode value", "(default: 0660)",
		"--keepalive value", "(default: 15s)",
		"--unix-peer-scopes value", "(default: read,publish)",
		"--auto-create-sessions", "(default: true)",
		"--config value", "(default: " + DefaultConfigPath() + ")",
		"[$LOCALBUS_SOCKET]",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve --help lacks %q:\n%s", want, out.String())
		}
	}
}

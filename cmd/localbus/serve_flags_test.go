package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/daemon"
)

// runServe runs "localbus serve ARGS" in an app whose serve command has
// serveFlags, and returns what serveSource gave it.
//
// Tests that run an app are not parallel: urfave/cli v2 writes to its global
// HelpFlag on every run.
func runServe(t *testing.T, args ...string) daemon.Source {
	t.Helper()
	var (
		src daemon.Source
		ran bool
		out bytes.Buffer
	)
	app := &cli.App{
		Name:      "localbus",
		Writer:    &out,
		ErrWriter: &out,
		Commands: []*cli.Command{{
			Name:  "serve",
			Flags: serveFlags(),
			Action: func(c *cli.Context) error {
				ran = true
				src = serveSource(c)
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
	return src
}

// writeFile writes content to name in a new temporary directory and returns
// its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fullArgs set every setting away from its default, and fullSet is what
// they pass to the daemon.
var (
	fullArgs = map[string][]string{
		"socket":                  {"--socket", "/srv/localbus/bus.sock"},
		"socket_mode":             {"--socket-mode", "0600"},
		"socket_group":            {"--socket-group", "localbus"},
		"unix_auth":               {"--unix-auth", "key"},
		"unix_peer_scopes":        {"--unix-peer-scopes", "read:build", "--unix-peer-scopes", "publish:build"},
		"listen_tcp":              {"--listen-tcp", "0.0.0.0:8001"},
		"allow_remote":            {"--allow-remote"},
		"allowed_origins":         {"--allowed-origins", "http://localhost:3000, https://app.example.com"},
		"allowed_hosts":           {"--allowed-hosts", "bus.example.com", "--allowed-hosts", "bus.example.com:8001"},
		"keys_file":               {"--keys-file", "/srv/localbus/keys.json"},
		"ring_size":               {"--ring-size", "1000"},
		"ring_max_bytes":          {"--ring-max-bytes", "8388608"},
		"max_ring_bytes_total":    {"--max-ring-bytes-total", "268435456"},
		"max_queued":              {"--max-queued", "512"},
		"max_queued_bytes":        {"--max-queued-bytes", "4194304"},
		"max_subscribers":         {"--max-subscribers", "8"},
		"max_subscribers_total":   {"--max-subscribers-total", "100"},
		"max_sessions":            {"--max-sessions", "16"},
		"auto_create_sessions":    {"--auto-create-sessions=false"},
		"max_event_bytes":         {"--max-event-bytes", "65536"},
		"max_body_bytes":          {"--max-body-bytes", "1048576"},
		"idempotency_window":      {"--idempotency-window", "30s"},
		"idempotency_max_bytes":   {"--idempotency-max-bytes", "1048576"},
		"max_consumers":           {"--max-consumers", "4"},
		"consumer_ttl":            {"--consumer-ttl", "2h"},
		"max_auto_sessions":       {"--max-auto-sessions", "8"},
		"auto_session_ttl":        {"--auto-session-ttl", "1h"},
		"max_inflight_body_bytes": {"--max-inflight-body-bytes", "2097152"},
		"peer_share":              {"--peer-share", "0.5"},
		"max_header_bytes":        {"--max-header-bytes", "8192"},
		"keepalive":               {"--keepalive", "30s"},
		"shutdown_timeout":        {"--shutdown-timeout", "5s"},
		"read_header_timeout":     {"--read-header-timeout", "3s"},
		"idle_timeout":            {"--idle-timeout", "1m"},
		"log_level":               {"--log-level", "debug"},
		"log_format":              {"--log-format", "json"},
		"state_dir":               {"--state-dir", "/srv/localbus/state"},
		"durability":              {"--durability", "memory"},
		"fsync":                   {"--fsync", "interval"},
		"fsync_interval":          {"--fsync-interval", "250ms"},
	}
	fullSet = map[string]string{
		"socket":                  "/srv/localbus/bus.sock",
		"socket_mode":             "0600",
		"socket_group":            "localbus",
		"unix_auth":               "key",
		"unix_peer_scopes":        "read:build,publish:build",
		"listen_tcp":              "0.0.0.0:8001",
		"allow_remote":            "true",
		"allowed_origins":         "http://localhost:3000,https://app.example.com",
		"allowed_hosts":           "bus.example.com,bus.example.com:8001",
		"keys_file":               "/srv/localbus/keys.json",
		"ring_size":               "1000",
		"ring_max_bytes":          "8388608",
		"max_ring_bytes_total":    "268435456",
		"max_queued":              "512",
		"max_queued_bytes":        "4194304",
		"max_subscribers":         "8",
		"max_subscribers_total":   "100",
		"max_sessions":            "16",
		"auto_create_sessions":    "false",
		"max_event_bytes":         "65536",
		"max_body_bytes":          "1048576",
		"idempotency_window":      "30s",
		"idempotency_max_bytes":   "1048576",
		"max_consumers":           "4",
		"consumer_ttl":            "2h",
		"max_auto_sessions":       "8",
		"auto_session_ttl":        "1h",
		"max_inflight_body_bytes": "2097152",
		"peer_share":              "0.5",
		"max_header_bytes":        "8192",
		"keepalive":               "30s",
		"shutdown_timeout":        "5s",
		"read_header_timeout":     "3s",
		"idle_timeout":            "1m",
		"log_level":               "debug",
		"log_format":              "json",
		"state_dir":               "/srv/localbus/state",
		"durability":              "memory",
		"fsync":                   "interval",
		"fsync_interval":          "250ms",
	}
)

func TestServeFlagsPassEverySettingToTheDaemon(t *testing.T) {
	config := writeFile(t, "config.toml", "")
	args := []string{"--config", config}
	for _, s := range daemon.Settings() {
		a, ok := fullArgs[s.Key]
		if !ok {
			t.Fatalf("no flag arguments for %s: add them to fullArgs", s.Key)
		}
		if want := "--" + strings.ReplaceAll(s.Key, "_", "-"); !strings.HasPrefix(a[0], want) {
			t.Errorf("flag for %s is %s, want %s", s.Key, a[0], want)
		}
		args = append(args, a...)
	}
	src := runServe(t, args...)
	want := daemon.Source{File: config, FileExplicit: true, Set: fullSet, Env: map[string]string{}}
	if diff := cmp.Diff(want, src); diff != "" {
		t.Errorf("serveSource(every flag) mismatch (-want +got):\n%s", diff)
	}
	cfg, err := daemon.LoadConfig(src)
	if err != nil {
		t.Fatalf("LoadConfig(every flag) = %v", err)
	}
	if diff := daemon.Defaults().Diff(cfg); len(diff) != len(daemon.Settings()) {
		t.Errorf("every flag changed only %q from the defaults", diff)
	}
}

func TestServeFlagsLeftOutAreNotSet(t *testing.T) {
	src := runServe(t, "--ring-size", "7")
	want := daemon.Source{Set: map[string]string{"ring_size": "7"}, Env: map[string]string{}}
	if diff := cmp.Diff(want, src); diff != "" {
		t.Errorf("serveSource(--ring-size 7) mismatch (-want +got):\n%s", diff)
	}
}

func TestServeBoolFlagsSetBothWays(t *testing.T) {
	tests := []struct {
		args []string
		want map[string]string
	}{
		{nil, map[string]string{}},
		{[]string{"--auto-create-sessions"}, map[string]string{"auto_create_sessions": "true"}},
		{[]string{"--auto-create-sessions=true", "--allow-remote=false"}, map[string]string{"auto_create_sessions": "true", "allow_remote": "false"}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, runServe(t, tc.args...).Set); diff != "" {
			t.Errorf("serve %q: Set mismatch (-want +got):\n%s", tc.args, diff)
		}
	}
}

func TestServeSourceReadsTheSettingsEnvironment(t *testing.T) {
	// Not parallel: sets the environment.
	t.Setenv("LOCALBUS_SOCKET", "/tmp/env/bus.sock")
	t.Setenv("LOCALBUS_KEY", "not a setting's")
	src := runServe(t, "--socket", "/tmp/flag/bus.sock")
	want := daemon.Source{Set: map[string]string{"socket": "/tmp/flag/bus.sock"}, Env: map[string]string{"LOCALBUS_SOCKET": "/tmp/env/bus.sock"}}
	if diff := cmp.Diff(want, src); diff != "" {
		t.Errorf("serveSource with $LOCALBUS_SOCKET mismatch (-want +got):\n%s", diff)
	}
	src = runServe(t, "--config", writeFile(t, "config.toml", ""))
	if cfg, err := daemon.LoadConfig(src); err != nil || cfg.Socket != "/tmp/env/bus.sock" {
		t.Errorf("serve with $LOCALBUS_SOCKET: Socket %q, %v; want /tmp/env/bus.sock", cfg.Socket, err)
	}
}

func TestServeConfigErrorsNameTheFlagOrVariable(t *testing.T) {
	// Not parallel: sets the environment. Should the configuration load
	// after all, the daemon stops at once: its context is done, and its
	// socket is in a temporary directory.
	dir := t.TempDir()
	config := writeFile(t, "config.toml", "socket = \""+filepath.Join(dir, "bus.sock")+"\"\ndurability = \"memory\"\n")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"localbus", "serve", "--config", config, "--ring-size", "0x10"}, &stdout, &stderr)
	if want := "localbus: config: --ring-size: must be a decimal integer, got \"0x10\"\n"; code != exitUsage || stderr.String() != want {
		t.Errorf("serve --ring-size 0x10: exit %d, stderr %q; want %d, %q", code, stderr.String(), exitUsage, want)
	}

	t.Setenv("LOCALBUS_SOCKET", "/"+strings.Repeat("x", 200))
	stderr.Reset()
	code = run(ctx, []string{"localbus", "serve", "--config", config}, &stdout, &stderr)
	if want := "localbus: config: $LOCALBUS_SOCKET: is 201 bytes long"; code != exitUsage || !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("serve with a long $LOCALBUS_SOCKET: exit %d, stderr %q; want %d, prefix %q", code, stderr.String(), exitUsage, want)
	}
}

func TestServeConfigFlagNamingMissingFileIsError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.toml")
	src := runServe(t, "--config", path)
	if src.File != path || !src.FileExplicit {
		t.Fatalf("serve --config %s: File %q, FileExplicit %t; want the path, true", path, src.File, src.FileExplicit)
	}
	_, err := daemon.LoadConfig(src)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("serve --config missing: %v, want a not-exist error naming %s", err, path)
	}
}

func TestServeFlagsHaveOneFlagPerSetting(t *testing.T) {
	var names []string
	for _, f := range serveFlags() {
		names = append(names, f.Names()...)
	}
	want := []string{"config"}
	for _, s := range daemon.Settings() {
		want = append(want, strings.ReplaceAll(s.Key, "_", "-"))
	}
	if !slices.Equal(names, want) {
		t.Errorf("serveFlags names = %q, want %q", names, want)
	}
}

func TestServeHelpShowsDefaults(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"localbus", "serve", "--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("serve --help: exit %d\n%s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"--ring-size value", "(default: 8000)",
		"--socket-mode value", "(default: 0660)",
		"--keepalive value", "(default: 15s)",
		"--unix-peer-scopes value [ --unix-peer-scopes value ]", "(default: read,publish)",
		"--auto-create-sessions", "(default: true)",
		"--config value", "(default: " + daemon.DefaultConfigPath() + ")",
		"--socket value", "[$LOCALBUS_SOCKET] (default: " + daemon.DefaultSocketPath() + ")",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("serve --help lacks %q:\n%s", want, out)
		}
	}
}

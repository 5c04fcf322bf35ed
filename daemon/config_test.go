package daemon

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/ipc/wire"
)

// fullConfig is what testdata/full.toml holds.
func fullConfig() Config {
	return Config{
		Socket:               "/srv/localbus/bus.sock",
		SocketMode:           0o600,
		SocketGroup:          "localbus",
		UnixAuth:             "key",
		UnixPeerScopes:       []string{"read:build", "publish:build"},
		ListenTCP:            "0.0.0.0:8001",
		AllowRemote:          true,
		AllowedOrigins:       []string{"http://localhost:3000", "https://app.example.com"},
		AllowedHosts:         []string{"bus.example.com", "bus.example.com:8001"},
		KeysFile:             "/srv/localbus/keys.json",
		RingSize:             1000,
		RingMaxBytes:         8 << 20,
		MaxRingBytesTotal:    256 << 20,
		MaxQueued:            512,
		MaxQueuedBytes:       4 << 20,
		MaxSubscribers:       8,
		MaxSubscribersTotal:  100,
		MaxSessions:          16,
		AutoCreateSessions:   false,
		MaxEventBytes:        64 << 10,
		MaxBodyBytes:         1 << 20,
		IdempotencyWindow:    30 * time.Second,
		IdempotencyMaxBytes:  1 << 20,
		MaxConsumers:         4,
		ConsumerTTL:          2 * time.Hour,
		MaxAutoSessions:      8,
		AutoSessionTTL:       time.Hour,
		MaxInflightBodyBytes: 2 << 20,
		PeerShare:            0.5,
		MaxHeaderBytes:       8 << 10,
		Keepalive:            30 * time.Second,
		ShutdownTimeout:      5 * time.Second,
		ReadHeaderTimeout:    3 * time.Second,
		IdleTimeout:          time.Minute,
		LogLevel:             "debug",
		LogFormat:            "json",
		StateDir:             "/srv/localbus/state",
		Durability:           "memory",
		Fsync:                "interval",
		FsyncInterval:        250 * time.Millisecond,
	}
}

// writeConfig writes content to config.toml in a new temporary directory and
// returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadConfig loads the file at path alone, named by the user if explicit.
func loadConfig(path string, explicit bool) (Config, error) {
	return LoadConfig(Source{File: path, FileExplicit: explicit})
}

// configErrors returns every *ConfigError in err's tree.
func configErrors(err error) []*ConfigError {
	var out []*ConfigError
	var walk func(error)
	walk = func(err error) {
		if ce, ok := err.(*ConfigError); ok {
			out = append(out, ce)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// fieldValue returns the value of the field of key in c.
func fieldValue(t *testing.T, c *Config, key string) any {
	t.Helper()
	s, ok := lookupSetting(key)
	if !ok {
		t.Fatalf("no setting %q", key)
	}
	return reflect.ValueOf(s.field(c)).Elem().Interface()
}

func TestDefaultsMatchSpec(t *testing.T) {
	t.Parallel()
	// SPEC §10, plus the self-protection limits this package adds.
	want := map[string]any{
		"socket":                  DefaultSocketPath(),
		"socket_mode":             os.FileMode(0o660),
		"socket_group":            "",
		"unix_auth":               "peer",
		"unix_peer_scopes":        []string{"read", "publish"},
		"listen_tcp":              "",
		"allow_remote":            false,
		"allowed_origins":         []string(nil),
		"allowed_hosts":           []string(nil),
		"keys_file":               filepath.Join(filepath.Dir(DefaultConfigPath()), "keys.json"),
		"ring_size":               8000,
		"ring_max_bytes":          int64(67108864),
		"max_ring_bytes_total":    int64(1073741824),
		"max_queued":              256,
		"max_queued_bytes":        int64(2097152),
		"max_subscribers":         64,
		"max_subscribers_total":   4096,
		"max_sessions":            4096,
		"auto_create_sessions":    true,
		"max_event_bytes":         int64(1048576),
		"max_body_bytes":          int64(64 << 20),
		"idempotency_window":      10 * time.Minute,
		"idempotency_max_bytes":   int64(16 << 20),
		"max_consumers":           64,
		"consumer_ttl":            720 * time.Hour,
		"max_auto_sessions":       1024,
		"auto_session_ttl":        168 * time.Hour,
		"max_inflight_body_bytes": int64(64 << 20),
		"peer_share":              0.25,
		"max_header_bytes":        int64(16 << 10),
		"keepalive":               15 * time.Second,
		"shutdown_timeout":        10 * time.Second,
		"read_header_timeout":     10 * time.Second,
		"idle_timeout":            120 * time.Second,
		"log_level":               "info",
		"log_format":              "text",
		"state_dir":               DefaultStateDir(),
		"durability":              "disk",
		"fsync":                   "always",
		"fsync_interval":          100 * time.Millisecond,
	}
	def := Defaults()
	for _, s := range settings {
		t.Run(s.Key, func(t *testing.T) {
			w, ok := want[s.Key]
			if !ok {
				t.Fatalf("no expected default for %s: add it to this test", s.Key)
			}
			if diff := cmp.Diff(w, fieldValue(t, &def, s.Key)); diff != "" {
				t.Errorf("Defaults().%s mismatch (-want +got):\n%s", s.Key, diff)
			}
		})
	}
	if len(want) != len(settings) {
		t.Errorf("test expects %d keys, settings has %d", len(want), len(settings))
	}
}

func TestDefaultsAreValid(t *testing.T) {
	t.Parallel()
	if err := Defaults().Validate(); err != nil {
		t.Errorf("Defaults().Validate() = %v, want nil", err)
	}
}

func TestDefaultsReturnsFreshSlices(t *testing.T) {
	t.Parallel()
	a := Defaults()
	a.UnixPeerScopes[0] = "admin"
	if b := Defaults(); b.UnixPeerScopes[0] != "read" {
		t.Errorf("Defaults().UnixPeerScopes = %q after changing an earlier copy", b.UnixPeerScopes)
	}
}

func TestSettingsCoverEveryFieldOnce(t *testing.T) {
	t.Parallel()
	var c Config
	base := reflect.ValueOf(&c).Elem()
	seen := make(map[uintptr]string)
	keyRE := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	keys := make(map[string]bool)
	for _, s := range settings {
		if !keyRE.MatchString(s.Key) {
			t.Errorf("key %q is not snake_case", s.Key)
		}
		if keys[s.Key] {
			t.Errorf("key %q appears twice", s.Key)
		}
		keys[s.Key] = true
		if s.Usage == "" {
			t.Errorf("key %q has no usage", s.Key)
		}
		p := reflect.ValueOf(s.field(&c)).Pointer()
		if other, ok := seen[p]; ok {
			t.Errorf("keys %q and %q share a field", other, s.Key)
		}
		seen[p] = s.Key
		if _, isString := s.field(&c).(*string); s.Path && !isString {
			t.Errorf("path key %q is not a string", s.Key)
		}
	}
	// Upstream is the [upstream] table, not a setting (config_upstream.go).
	if n := base.NumField() - 1; n != len(seen) {
		t.Errorf("Config has %d fields, settings name %d", n, len(seen))
	}
}

func TestLoadConfigGoldenFile(t *testing.T) {
	t.Parallel()
	got, err := loadConfig(filepath.Join("testdata", "full.toml"), true)
	if err != nil {
		t.Fatalf("LoadConfig(full.toml) = %v", err)
	}
	if diff := cmp.Diff(fullConfig(), got); diff != "" {
		t.Errorf("LoadConfig(full.toml) mismatch (-want +got):\n%s", diff)
	}
}

func TestGoldenFileSetsEveryKeyAwayFromDefault(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	if _, err := toml.DecodeFile(filepath.Join("testdata", "full.toml"), &doc); err != nil {
		t.Fatal(err)
	}
	def, full := Defaults(), fullConfig()
	for _, s := range settings {
		if _, ok := doc[s.Key]; !ok {
			t.Errorf("full.toml does not set %s", s.Key)
		}
		if reflect.DeepEqual(fieldValue(t, &def, s.Key), fieldValue(t, &full, s.Key)) {
			t.Errorf("full.toml sets %s to its default", s.Key)
		}
	}
}

func TestLoadConfigAbsentDefaultFileMeansDefaults(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.toml")
	got, err := loadConfig(path, false)
	if err != nil {
		t.Fatalf("LoadConfig(absent, false) = %v, want nil", err)
	}
	want := Defaults()
	want.KeysFile = filepath.Join(filepath.Dir(path), "keys.json")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadConfig(absent, false) mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadConfigEmptyPathReadsDefaultPath(t *testing.T) {
	// Not parallel: sets the environment.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	path := DefaultConfigPath()
	if _, err := os.Stat(path); err == nil {
		t.Skipf("%s exists on this machine", path)
	}
	got, err := loadConfig("", false)
	if err != nil {
		t.Fatalf(`LoadConfig("", false) = %v, want nil`, err)
	}
	if diff := cmp.Diff(Defaults(), got); diff != "" {
		t.Errorf(`LoadConfig("", false) mismatch (-want +got):`+"\n%s", diff)
	}
}

func TestLoadConfigExplicitMissingFileIsError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope.toml")
	_, err := loadConfig(path, true)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadConfig(missing, true) = %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), path) || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("LoadConfig(missing, true) = %q, want a config error naming %s", err, path)
	}
}

func TestLoadConfigUnreadableFileIsError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() // a directory cannot be read as a file, whatever our uid
	if _, err := loadConfig(dir, false); err == nil {
		t.Errorf("LoadConfig(directory, false) = nil error, want one")
	}
}

func TestLoadConfigPartialFileKeepsOtherDefaults(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "ring_size = 10\nlog_level = \"warn\"\n")
	got, err := loadConfig(path, true)
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.RingSize = 10
	want.LogLevel = "warn"
	want.KeysFile = filepath.Join(filepath.Dir(path), "keys.json")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadConfig mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadConfigRelativePathsAreBesideFile(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `
socket = "run/bus.sock"
keys_file = "secret/keys.json"
state_dir = "state"
`)
	got, err := loadConfig(path, true)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	for _, tc := range []struct{ name, got, want string }{
		{"Socket", got.Socket, filepath.Join(dir, "run/bus.sock")},
		{"KeysFile", got.KeysFile, filepath.Join(dir, "secret/keys.json")},
		{"StateDir", got.StateDir, filepath.Join(dir, "state")},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestLoadConfigEmptyListsAreNil(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "unix_peer_scopes = []\nallowed_hosts = []\n")
	got, err := loadConfig(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.UnixPeerScopes != nil || got.AllowedHosts != nil {
		t.Errorf("empty lists = %#v, %#v; want nil", got.UnixPeerScopes, got.AllowedHosts)
	}
}

func TestLoadConfigAcceptsValidValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content string
	}{
		{"loopback v4", `listen_tcp = "127.0.0.1:8001"`},
		{"loopback v6", `listen_tcp = "[::1]:8001"`},
		{"localhost", `listen_tcp = "localhost:8001"`},
		{"any port", `listen_tcp = "127.0.0.1:0"`},
		{"remote allowed", "listen_tcp = \"0.0.0.0:8001\"\nallow_remote = true"},
		{"all interfaces allowed", "listen_tcp = \":8001\"\nallow_remote = true"},
		{"family scopes", `unix_peer_scopes = ["admin", "read", "publish", "read:a", "publish:build_2-x", "read:abcdefghijklmnopqrstuvwxyz012345"]`},
		{"no scopes", `unix_peer_scopes = []`},
		{"mode 0777", `socket_mode = "0777"`},
		{"mode three digits", `socket_mode = "600"`},
		{"numeric group", `socket_group = "1001"`},
		{"smallest ring", "ring_size = 1\nring_max_bytes = 1024"},
		{"largest ring", `ring_size = 1000000`},
		{"queue bounds", "max_queued = 16\nmax_queued_bytes = 1024"},
		{"queue top", `max_queued = 2048`},
		{"event bounds", "max_event_bytes = 1024\nmax_body_bytes = 1024"},
		{"event top", "max_event_bytes = 67108864\nmax_body_bytes = 1073741824"},
		{"header bounds", `max_header_bytes = 1024`},
		{"header top", `max_header_bytes = 1048576`},
		{"keepalive 1s", `keepalive = "1s"`},
		{"auto sessions kept", `auto_session_ttl = "0"`},
		{"auto sessions kept 0s", `auto_session_ttl = "0s"`},
		{"auto session ttl 1s", `auto_session_ttl = "1s"`},
		{"immediate shutdown", `shutdown_timeout = "0s"`},
		{"memory without state dir", "durability = \"memory\"\nstate_dir = \"\""},
		{"fsync never", `fsync = "never"`},
		{"log levels", `log_level = "error"`},
		{"comment only", "# nothing\n"},
		{"empty", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := loadConfig(writeConfig(t, tc.content), true); err != nil {
				t.Errorf("LoadConfig(%q) = %v, want nil", tc.content, err)
			}
		})
	}
}

func TestLoadConfigErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	long := "/" + strings.Repeat("x", 120)
	tests := []struct {
		name    string
		content string
		key     string
		msg     string // a substring of the message
	}{
		// Unknown keys.
		{"unknown key", `ring_sise = 8000`, "ring_sise", `unknown key; did you mean "ring_size"?`},
		{"dashed key", `ring-size = 8000`, "ring-size", `did you mean "ring_size"?`},
		{"unknown far key", `colour = "blue"`, "colour", "unknown key"},
		{"key in other case", `RING_SIZE = 8000`, "RING_SIZE", "unknown key"},
		{"unknown table", "[server]\nport = 1", "server", "unknown key"},
		{"unknown dotted key", `server.port = 1`, "server", "unknown key"},
		{"unknown array of tables", "[[listener]]\naddr = 1", "listener", "unknown key"},

		// Wrong types.
		{"int as string", `ring_size = "8000"`, "ring_size", `must be an integer, got string "8000"`},
		{"int as float", `ring_max_bytes = 1.5`, "ring_max_bytes", "must be an integer, got float 1.5"},
		{"int as table", `max_sessions = {n = 1}`, "max_sessions", "must be an integer, got a table"},
		{"string as int", `socket = 1`, "socket", "must be a string, got integer 1"},
		{"bool as string", `allow_remote = "yes"`, "allow_remote", "must be a boolean"},
		{"list as string", `unix_peer_scopes = "read"`, "unix_peer_scopes", "must be an array of strings"},
		{"list of mixed", `allowed_hosts = ["a", 1]`, "allowed_hosts", "element 1 is integer 1"},
		{"duration as int", `keepalive = 15`, "keepalive", `must be a duration string like "15s", got integer 15`},
		{"duration as date", `fsync_interval = 1979-05-27`, "fsync_interval", "got a date-time"},
		{"mode as int", `socket_mode = 660`, "socket_mode", `must be a quoted octal string like "0660", got integer 660`},
		{"mode as TOML octal", `socket_mode = 0o660`, "socket_mode", "got integer 432"},

		// Bad strings.
		{"duration without unit", `keepalive = "15"`, "keepalive", `must be a duration like "15s"`},
		{"mode not octal", `socket_mode = "0680"`, "socket_mode", `must be an octal mode like "0660"`},
		{"mode symbolic", `socket_mode = "rw-rw----"`, "socket_mode", "octal mode"},
		{"mode too long", `socket_mode = "00660"`, "socket_mode", "octal mode"},
		{"mode empty", `socket_mode = ""`, "socket_mode", "octal mode"},

		// Out of range.
		{"ring_size 0", `ring_size = 0`, "ring_size", "must be between 1 and 1000000, got 0"},
		{"ring_size too big", `ring_size = 1000001`, "ring_size", "must be between 1 and 1000000"},
		{"ring_max_bytes small", `ring_max_bytes = 1023`, "ring_max_bytes", "must be at least 1024 (1 KiB), got 1023"},
		{"max_ring_bytes_total small", `max_ring_bytes_total = 1023`, "max_ring_bytes_total", "must be at least 1024 (1 KiB), got 1023"},
		{"max_queued small", `max_queued = 15`, "max_queued", "must be between 16 and 2048, got 15"},
		{"max_queued big", `max_queued = 2049`, "max_queued", "must be between 16 and 2048"},
		{"max_queued_bytes small", `max_queued_bytes = 0`, "max_queued_bytes", "must be at least 1024 (1 KiB)"},
		{"max_subscribers 0", `max_subscribers = 0`, "max_subscribers", "must be at least 1, got 0"},
		{"max_subscribers_total 0", `max_subscribers_total = -1`, "max_subscribers_total", "must be at least 1"},
		{"max_sessions 0", `max_sessions = 0`, "max_sessions", "must be at least 1"},
		{"max_event_bytes small", `max_event_bytes = 1023`, "max_event_bytes", "must be between 1024 (1 KiB) and 67108864 (64 MiB)"},
		{"max_event_bytes big", "max_event_bytes = 67108865\nmax_body_bytes = 1073741824", "max_event_bytes", "must be between"},
		{"max_body_bytes below event", "max_event_bytes = 2048\nmax_body_bytes = 2047", "max_body_bytes", "must be at least max_event_bytes (2048 (2 KiB))"},
		{"max_body_bytes big", `max_body_bytes = 1073741825`, "max_body_bytes", "and 1073741824 (1 GiB)"},
		{"max_header_bytes small", `max_header_bytes = 1023`, "max_header_bytes", "must be between 1024 (1 KiB) and 1048576 (1 MiB)"},
		{"max_header_bytes big", `max_header_bytes = 1048577`, "max_header_bytes", "must be between"},
		{"keepalive short", `keepalive = "999ms"`, "keepalive", "must be at least 1s, got 999ms"},
		{"auto_session_ttl short", `auto_session_ttl = "500ms"`, "auto_session_ttl", "must be 0 or at least 1s, got 500ms"},
		{"auto_session_ttl negative", `auto_session_ttl = "-1h"`, "auto_session_ttl", "must be 0 or at least 1s, got -1h0m0s"},
		{"shutdown_timeout negative", `shutdown_timeout = "-1s"`, "shutdown_timeout", "must not be negative"},
		{"read_header_timeout 0", `read_header_timeout = "0s"`, "read_header_timeout", "must be more than 0"},
		{"idle_timeout negative", `idle_timeout = "-1m"`, "idle_timeout", "must be more than 0"},
		{"fsync_interval 0", `fsync_interval = "0s"`, "fsync_interval", "must be more than 0"},
		{"socket_mode too big", `socket_mode = "1777"`, "socket_mode", `from "0600" to "0777", got 1777`},
		{"socket_mode owner cannot write", `socket_mode = "0460"`, "socket_mode", "owner read and write"},

		// Bad choices and syntax.
		{"unix_auth", `unix_auth = "pear"`, "unix_auth", `must be one of "peer", "key"; got "pear"`},
		{"log_level", `log_level = "verbose"`, "log_level", `"debug", "info", "warn", "error"`},
		{"log_level case", `log_level = "INFO"`, "log_level", "must be one of"},
		{"log_format", `log_format = "logfmt"`, "log_format", `"text", "json"`},
		{"durability", `durability = "ssd"`, "durability", `must be one of "disk", "memory"`},
		{"fsync", `fsync = "sometimes"`, "fsync", `"always", "interval", "never"`},
		{"scope unknown", `unix_peer_scopes = ["write"]`, "unix_peer_scopes", `"write" is not a scope`},
		{"scope empty family", `unix_peer_scopes = ["read:"]`, "unix_peer_scopes", "is not a scope"},
		{"scope bad family", `unix_peer_scopes = ["read:Build"]`, "unix_peer_scopes", "is not a scope"},
		{"scope long family", `unix_peer_scopes = ["publish:abcdefghijklmnopqrstuvwxyz0123456"]`, "unix_peer_scopes", "is not a scope"},
		{"scope admin family", `unix_peer_scopes = ["admin:x"]`, "unix_peer_scopes", "is not a scope"},
		{"listen no port", `listen_tcp = "127.0.0.1"`, "listen_tcp", "must be host:port"},
		{"listen named port", `listen_tcp = "127.0.0.1:http"`, "listen_tcp", "port must be a number"},
		{"listen port too big", `listen_tcp = "127.0.0.1:65536"`, "listen_tcp", "port must be a number"},
		{"listen remote", `listen_tcp = "0.0.0.0:8001"`, "listen_tcp", "not a loopback address; set allow_remote"},
		{"listen all interfaces", `listen_tcp = ":8001"`, "listen_tcp", "not a loopback address"},
		{"listen host name", `listen_tcp = "example.com:8001"`, "listen_tcp", "not a loopback address"},
		{"socket empty", `socket = ""`, "socket", "must not be empty"},
		{"socket too long", `socket = "` + long + `"`, "socket", "a Unix socket path can hold"},
		{"socket_group space", `socket_group = "a b"`, "socket_group", "must be a group name or number"},
		{"socket_group colon", `socket_group = "a:b"`, "socket_group", "must be a group name or number"},
		{"allowed_origins empty", `allowed_origins = [""]`, "allowed_origins", "must hold origins"},
		{"allowed_origins space", `allowed_origins = ["http://a b"]`, "allowed_origins", "must hold origins"},
		{"allowed_hosts path", `allowed_hosts = ["example.com/x"]`, "allowed_hosts", "must hold host names"},
		{"keys_file empty", `keys_file = ""`, "keys_file", "must not be empty"},
		{"state_dir empty on disk", `state_dir = ""`, "state_dir", `must be set when durability is "disk"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tc.content)
			got, err := loadConfig(path, true)
			if err == nil {
				t.Fatalf("LoadConfig(%q) = nil error, want one naming %s", tc.content, tc.key)
			}
			if !reflect.DeepEqual(got, Config{}) {
				t.Errorf("LoadConfig(%q) returned a non-zero Config with its error", tc.content)
			}
			var first *ConfigError
			if !errors.As(err, &first) {
				t.Fatalf("LoadConfig(%q) = %v, want a *ConfigError", tc.content, err)
			}
			errs := configErrors(err)
			if len(errs) != 1 {
				t.Fatalf("LoadConfig(%q) = %v, want exactly one error", tc.content, err)
			}
			ce := errs[0]
			if ce.Key != tc.key || ce.File != path || ce.Flag != "" {
				t.Errorf("LoadConfig(%q): Key, File, Flag = %q, %q, %q; want %q, %q, \"\"", tc.content, ce.Key, ce.File, ce.Flag, tc.key, path)
			}
			if !strings.Contains(ce.Msg, tc.msg) {
				t.Errorf("LoadConfig(%q): Msg = %q, want it to contain %q", tc.content, ce.Msg, tc.msg)
			}
			if want := "config: " + path + ": " + tc.key + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("LoadConfig(%q) = %q, want prefix %q", tc.content, err, want)
			}
		})
	}
}

func TestLoadConfigReportsEveryBadKey(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `
ring_sise = 1
max_queued = 1
keepalive = 15
log_level = "loud"
`)
	_, err := loadConfig(path, true)
	var keys []string
	for _, ce := range configErrors(err) {
		keys = append(keys, ce.Key)
	}
	want := []string{"ring_sise", "keepalive", "max_queued", "log_level"}
	if !slices.Equal(keys, want) {
		t.Errorf("LoadConfig error keys = %q, want %q (error: %v)", keys, want, err)
	}
}

func TestLoadConfigSyntaxErrorHintsAtStrings(t *testing.T) {
	t.Parallel()
	tests := []struct{ content, hint string }{
		{"socket_mode = 0660", `write socket_mode as a string, e.g. socket_mode = "0660"`},
		{"keepalive = 15s", `write keepalive as a string, e.g. keepalive = "15s"`},
		{"ring_size = 8000 8000", ""},
	}
	for _, tc := range tests {
		path := writeConfig(t, tc.content)
		_, err := loadConfig(path, true)
		var perr toml.ParseError
		if !errors.As(err, &perr) {
			t.Fatalf("LoadConfig(%q) = %v, want a toml.ParseError", tc.content, err)
		}
		if !strings.HasPrefix(err.Error(), "config: "+path+": ") || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("LoadConfig(%q) = %q, want the path and %q", tc.content, err, tc.hint)
		}
	}
}

func TestValidateChecksConfigsBuiltInCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*Config)
		key    string
	}{
		{"mode with setuid", func(c *Config) { c.SocketMode = os.ModeSetuid | 0o660 }, "socket_mode"},
		{"zero config fields", func(c *Config) { c.UnixAuth = "" }, "unix_auth"},
		{"negative ring", func(c *Config) { c.RingSize = -1 }, "ring_size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Defaults()
			tc.change(&c)
			var ce *ConfigError
			if err := c.Validate(); !errors.As(err, &ce) || ce.Key != tc.key {
				t.Errorf("Validate() = %v, want a *ConfigError for %s", err, tc.key)
			}
		})
	}
	if err := (Config{}).Validate(); len(configErrors(err)) < 5 {
		t.Errorf("Config{}.Validate() = %v, want many errors", err)
	}
}

func TestConfigErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  ConfigError
		want string
	}{
		{ConfigError{Key: "ring_size", Msg: "bad"}, "config: ring_size: bad"},
		{ConfigError{Key: "ring_size", Msg: "bad", File: "/etc/c.toml"}, "config: /etc/c.toml: ring_size: bad"},
		{ConfigError{Key: "ring_size", Msg: "bad", Flag: "--ring-size"}, "config: --ring-size: bad"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%#v.Error() = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestDiffNamesChangedKeys(t *testing.T) {
	t.Parallel()
	a := Defaults()
	b := a
	b.UnixPeerScopes = []string{"read"}
	b.RingSize++
	b.Keepalive = time.Minute
	if got, want := a.Diff(b), []string{"unix_peer_scopes", "ring_size", "keepalive"}; !slices.Equal(got, want) {
		t.Errorf("Diff = %q, want %q", got, want)
	}
	if got := a.Diff(Defaults()); got != nil {
		t.Errorf("Diff(Defaults()) = %q, want nil", got)
	}
}

func TestSlogLevel(t *testing.T) {
	t.Parallel()
	tests := map[string]slog.Level{
		"debug": slog.LevelDebug, "info": slog.LevelInfo,
		"warn": slog.LevelWarn, "error": slog.LevelError,
	}
	for level, want := range tests {
		if got := (Config{LogLevel: level}).SlogLevel(); got != want {
			t.Errorf("SlogLevel(%q) = %v, want %v", level, got, want)
		}
	}
}

func TestPathDefaults(t *testing.T) {
	t.Parallel()
	type env map[string]string
	tests := []struct {
		name                     string
		euid                     int
		env                      env
		home                     string
		socket, config, stateDir string
	}{
		{
			name: "root", euid: 0, home: "/root",
			env:    env{"XDG_RUNTIME_DIR": "/run/user/0", "XDG_CONFIG_HOME": "/root/.cfg", "XDG_STATE_HOME": "/root/.st"},
			socket: "/run/localbus/localbus.sock", config: "/etc/localbus/config.toml", stateDir: "/var/lib/localbus",
		},
		{
			name: "root under systemd", euid: 0, home: "/root",
			env:    env{"STATE_DIRECTORY": "/var/lib/localbus-a:/var/lib/other"},
			socket: "/run/localbus/localbus.sock", config: "/etc/localbus/config.toml", stateDir: "/var/lib/localbus-a",
		},
		{
			name: "user with XDG", euid: 1000, home: "/home/u",
			env:    env{"XDG_RUNTIME_DIR": "/run/user/1000", "XDG_CONFIG_HOME": "/home/u/cfg", "XDG_STATE_HOME": "/home/u/st/"},
			socket: "/run/user/1000/localbus/localbus.sock", config: "/home/u/cfg/localbus/config.toml", stateDir: "/home/u/st/localbus",
		},
		{
			name: "user without XDG", euid: 1000, home: "/home/u",
			socket: "/run/user/1000/localbus/localbus.sock", config: "/home/u/.config/localbus/config.toml", stateDir: "/home/u/.local/state/localbus",
		},
		{
			name: "user with relative XDG", euid: 1000, home: "/home/u",
			env:    env{"XDG_RUNTIME_DIR": "run", "XDG_CONFIG_HOME": "cfg", "XDG_STATE_HOME": "st", "STATE_DIRECTORY": "rel"},
			socket: "/run/user/1000/localbus/localbus.sock", config: "/home/u/.config/localbus/config.toml", stateDir: "/home/u/.local/state/localbus",
		},
		{
			name: "user service", euid: 1000, home: "/home/u",
			env:    env{"XDG_RUNTIME_DIR": "/run/user/1000", "STATE_DIRECTORY": "/home/u/.local/state/lb"},
			socket: "/run/user/1000/localbus/localbus.sock", config: "/home/u/.config/localbus/config.toml", stateDir: "/home/u/.local/state/lb",
		},
		{
			name: "user without home", euid: 1000,
			socket: "/run/user/1000/localbus/localbus.sock", config: "/etc/localbus/config.toml", stateDir: "/var/lib/localbus",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := pathEnv{
				getenv: func(k string) string { return tc.env[k] },
				euid:   tc.euid,
				home:   func() string { return tc.home },
			}
			if got := e.socketPath(); got != tc.socket {
				t.Errorf("socketPath() = %q, want %q", got, tc.socket)
			}
			if got := e.configPath(); got != tc.config {
				t.Errorf("configPath() = %q, want %q", got, tc.config)
			}
			if got := e.stateDir(); got != tc.stateDir {
				t.Errorf("stateDir() = %q, want %q", got, tc.stateDir)
			}
		})
	}
}

func TestDefaultPathsReadEnvironment(t *testing.T) {
	// Not parallel: sets the environment.
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "cfg"))
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	t.Setenv("STATE_DIRECTORY", "")
	t.Setenv("HOME", filepath.Join(dir, "home"))

	socket, config, state := filepath.Join(dir, "run", "localbus", "localbus.sock"),
		filepath.Join(dir, "cfg", "localbus", "config.toml"),
		filepath.Join(dir, "state", "localbus")
	if os.Geteuid() == 0 {
		socket, config, state = wire.SystemSocketPath, systemConfigPath, systemStateDir
	}
	if got := DefaultSocketPath(); got != socket {
		t.Errorf("DefaultSocketPath() = %q, want %q", got, socket)
	}
	if got := DefaultConfigPath(); got != config {
		t.Errorf("DefaultConfigPath() = %q, want %q", got, config)
	}
	if got := DefaultStateDir(); got != state {
		t.Errorf("DefaultStateDir() = %q, want %q", got, state)
	}

	t.Setenv("STATE_DIRECTORY", filepath.Join(dir, "sd")+":"+filepath.Join(dir, "other"))
	if got, want := DefaultStateDir(), filepath.Join(dir, "sd"); got != want {
		t.Errorf("DefaultStateDir() with STATE_DIRECTORY = %q, want %q", got, want)
	}
	if got, want := Defaults().StateDir, filepath.Join(dir, "sd"); got != want {
		t.Errorf("Defaults().StateDir with STATE_DIRECTORY = %q, want %q", got, want)
	}
}

func FuzzLoadConfig(f *testing.F) {
	full, err := os.ReadFile(filepath.Join("testdata", "full.toml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	// One directory for every input: a t.TempDir per input costs more than
	// the load itself.
	dir := f.TempDir()
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, strconv.FormatInt(n.Add(1), 10)+".toml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		c, err := loadConfig(path, true)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("LoadConfig error %q lacks the package prefix", err)
			}
			for _, ce := range configErrors(err) {
				if ce.Key == "" || ce.File != path {
					t.Errorf("ConfigError %#v lacks its key or file", ce)
				}
			}
			if !reflect.DeepEqual(c, Config{}) {
				t.Errorf("LoadConfig returned a non-zero Config with error %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Errorf("LoadConfig accepted a config that Validate rejects: %v", err)
		}
		// Loading is deterministic.
		again, err := loadConfig(path, true)
		if err != nil || !reflect.DeepEqual(c, again) {
			t.Errorf("second LoadConfig = %+v, %v; want %+v, nil", again, err, c)
		}
	})
}

func TestExpiryIntervalIsATenthOfTheTTLAtMostAMinute(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		0:                time.Minute,
		time.Second:      100 * time.Millisecond,
		5 * time.Minute:  30 * time.Second,
		10 * time.Minute: time.Minute,
		168 * time.Hour:  time.Minute,
	} {
		if got := expiryInterval(ttl); got != want {
			t.Errorf("expiryInterval(%v) = %v, want %v", ttl, got, want)
		}
	}
}

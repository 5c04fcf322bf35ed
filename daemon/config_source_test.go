package daemon

import (
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/daemon/upstream"
)

// emptyConfig returns the path of an empty configuration file.
func emptyConfig(t *testing.T) string { return writeConfig(t, "") }

// loadSet loads the file at path with set over it.
func loadSet(path string, set map[string]string) (Config, error) {
	return LoadConfig(Source{File: path, FileExplicit: true, Set: set})
}

// fullSet are the set values that say what testdata/full.toml says, written
// as the serve flags pass them.
var fullSet = map[string]string{
	"socket":                  "/srv/localbus/bus.sock",
	"socket_mode":             "0600",
	"socket_group":            "localbus",
	"unix_auth":               "key",
	"unix_peer_scopes":        "read:build,publish:build",
	"listen_tcp":              "0.0.0.0:8001",
	"allow_remote":            "true",
	"allowed_origins":         "http://localhost:3000, https://app.example.com",
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

func TestSetValuesCoverEveryKey(t *testing.T) {
	t.Parallel()
	for _, s := range settings {
		if _, ok := fullSet[s.Key]; !ok {
			t.Fatalf("no set value for %s: add it to fullSet", s.Key)
		}
	}
	got, err := loadSet(emptyConfig(t), fullSet)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fullConfig(), got); diff != "" {
		t.Errorf("LoadConfig(every key set) mismatch (-want +got):\n%s", diff)
	}
}

func TestSetValuesOverrideFile(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `
ring_size = 100
max_queued = 64
keepalive = "20s"
socket_mode = "0600"
unix_peer_scopes = ["admin"]
auto_create_sessions = false
`)
	got, err := loadSet(path, map[string]string{
		"ring_size":            "200",
		"keepalive":            "5s",
		"socket_mode":          "0640",
		"unix_peer_scopes":     "read:build,publish:build",
		"auto_create_sessions": "true",
		"socket":               "/tmp/x/bus.sock",
	})
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
		t.Errorf("LoadConfig mismatch (-want +got):\n%s", diff)
	}
}

func TestSettingDefaultReadsBackAsTheDefault(t *testing.T) {
	t.Parallel()
	path := emptyConfig(t)
	def := Defaults()
	for _, s := range settings {
		if s.Kind() == KindList && s.Default() == "" {
			// An empty value is a list of one empty string, as the list
			// flags take it; an empty list is the flag left out.
			continue
		}
		got, err := loadSet(path, map[string]string{s.Key: s.Default()})
		if err != nil {
			t.Errorf("%s set to its Default %q: %v", s.Key, s.Default(), err)
			continue
		}
		if diff := cmp.Diff(fieldValue(t, &def, s.Key), fieldValue(t, &got, s.Key)); diff != "" {
			t.Errorf("%s set to its Default %q mismatch (-want +got):\n%s", s.Key, s.Default(), diff)
		}
	}
}

func TestSettingKindMatchesField(t *testing.T) {
	t.Parallel()
	want := map[reflect.Type]Kind{
		reflect.TypeFor[*string]():   KindString,
		reflect.TypeFor[*bool]():     KindBool,
		reflect.TypeFor[*[]string](): KindList,
		reflect.TypeFor[*int]():      KindInt,
		reflect.TypeFor[*int64]():    KindInt,
		reflect.TypeFor[*float64]():  KindFloat,
	}
	var c Config
	for _, s := range Settings() {
		typ := reflect.TypeOf(s.field(&c))
		k, ok := want[typ]
		switch typ.Elem().Name() {
		case "Duration":
			k, ok = KindDuration, true
		case "FileMode":
			k, ok = KindMode, true
		}
		if !ok {
			t.Errorf("%s: field type %s has no kind in this test", s.Key, typ)
			continue
		}
		if got := s.Kind(); got != k {
			t.Errorf("%s.Kind() = %d, want %d", s.Key, got, k)
		}
		if got, want := s.Flag(), strings.ReplaceAll(s.Key, "_", "-"); got != want {
			t.Errorf("%s.Flag() = %q, want %q", s.Key, got, want)
		}
	}
}

func TestSettingsReturnsACopy(t *testing.T) {
	t.Parallel()
	s := Settings()
	s[0].Key = "changed"
	if settings[0].Key == "changed" {
		t.Error("changing the slice Settings returned changed the table")
	}
}

func TestSetValuesAreParsedAndValidatedLikeFileValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		key, value string
		msg        string
	}{
		{"int not decimal", "ring_size", "0x10", `must be a decimal integer, got "0x10"`},
		{"int out of range", "ring_size", "0", "must be between 1 and 1000000, got 0"},
		{"bytes not a number", "max_event_bytes", "1MiB", "must be a decimal integer"},
		{"queue out of range", "max_queued", "4096", "must be between 16 and 2048"},
		{"duration without unit", "keepalive", "5", `must be a duration like "15s"`},
		{"duration too short", "keepalive", "10ms", "must be at least 1s"},
		{"mode not octal", "socket_mode", "0668", "octal mode"},
		{"mode too wide", "socket_mode", "4660", `from "0600" to "0777"`},
		{"bad choice", "unix_auth", "password", `must be one of "peer", "key"`},
		{"bad scope", "unix_peer_scopes", "read,write", `"write" is not a scope`},
		{"remote listen", "listen_tcp", "0.0.0.0:8001", "not a loopback address"},
		{"empty socket", "socket", "", "must not be empty"},
		{"not a boolean", "allow_remote", "yes", `must be true or false, got "yes"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flag := "--" + strings.ReplaceAll(tc.key, "_", "-")
			got, err := loadSet(emptyConfig(t), map[string]string{tc.key: tc.value})
			errs := configErrors(err)
			if len(errs) != 1 {
				t.Fatalf("%s=%q: error %v, want one *ConfigError", tc.key, tc.value, err)
			}
			ce := errs[0]
			if ce.Key != tc.key || ce.Flag != flag || ce.File != "" {
				t.Errorf("%s=%q: Key, Flag, File = %q, %q, %q; want %q, %q, \"\"", tc.key, tc.value, ce.Key, ce.Flag, ce.File, tc.key, flag)
			}
			if !strings.Contains(ce.Msg, tc.msg) {
				t.Errorf("%s=%q: Msg = %q, want it to contain %q", tc.key, tc.value, ce.Msg, tc.msg)
			}
			if want := "config: " + flag + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("%s=%q: error %q, want prefix %q", tc.key, tc.value, err, want)
			}
			if got.RingSize != 0 {
				t.Errorf("%s=%q: returned a non-zero Config with its error", tc.key, tc.value)
			}
		})
	}
}

func TestSetListIsCommaSeparatedAndTrimmed(t *testing.T) {
	t.Parallel()
	got, err := loadSet(emptyConfig(t), map[string]string{"allowed_hosts": "a.example, b.example ,c.example"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.example", "b.example", "c.example"}; !slices.Equal(got.AllowedHosts, want) {
		t.Errorf("AllowedHosts = %q, want %q", got.AllowedHosts, want)
	}
}

func TestSetUnknownKeyIsErrorNamingTheFlag(t *testing.T) {
	t.Parallel()
	_, err := loadSet(emptyConfig(t), map[string]string{"ring_sise": "1", "zzz": "2"})
	var got []string
	for _, ce := range configErrors(err) {
		got = append(got, ce.Flag+" "+ce.Msg)
	}
	want := []string{`--ring-sise unknown key; did you mean "ring_size"?`, "--zzz unknown key"}
	if !slices.Equal(got, want) {
		t.Errorf("errors = %q, want %q", got, want)
	}
}

func TestSetValueCanInvalidateFileValue(t *testing.T) {
	t.Parallel()
	// The file's listen_tcp is fine with its allow_remote; the set value
	// turns allow_remote off, and the error names the key where it came
	// from.
	path := writeConfig(t, "listen_tcp = \"0.0.0.0:8001\"\nallow_remote = true\n")
	_, err := loadSet(path, map[string]string{"allow_remote": "false"})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "listen_tcp" || ce.File != path {
		t.Errorf("allow_remote=false: %v, want a listen_tcp error from %s", err, path)
	}
}

func TestFileAndSetErrorsAreReportedTogether(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "ring_sise = 1\nkeepalive = \"1ms\"\n")
	_, err := loadSet(path, map[string]string{"max_queued": "1"})
	var got []string
	for _, ce := range configErrors(err) {
		got = append(got, ce.Key+"@"+ce.File+ce.Flag)
	}
	want := []string{"ring_sise@" + path, "max_queued@--max-queued", "keepalive@" + path}
	if !slices.Equal(got, want) {
		t.Errorf("errors = %q, want %q", got, want)
	}
}

func TestEnvironmentSetsKeyUnlessSetValueDoes(t *testing.T) {
	t.Parallel()
	path := emptyConfig(t)
	env := map[string]string{"LOCALBUS_SOCKET": "/tmp/env/bus.sock", "OTHER": "x"}
	got, err := LoadConfig(Source{File: path, FileExplicit: true, Env: env})
	if err != nil || got.Socket != "/tmp/env/bus.sock" {
		t.Errorf("with $LOCALBUS_SOCKET: Socket %q, %v; want /tmp/env/bus.sock", got.Socket, err)
	}
	got, err = LoadConfig(Source{File: path, FileExplicit: true, Env: env, Set: map[string]string{"socket": "/tmp/flag/bus.sock"}})
	if err != nil || got.Socket != "/tmp/flag/bus.sock" {
		t.Errorf("with $LOCALBUS_SOCKET and a set socket: Socket %q, %v; want the set one", got.Socket, err)
	}
	got, err = LoadConfig(Source{File: writeConfig(t, `socket = "/tmp/file/bus.sock"`), FileExplicit: true, Env: map[string]string{"LOCALBUS_SOCKET": ""}})
	if err != nil || got.Socket != "/tmp/file/bus.sock" {
		t.Errorf("with an empty $LOCALBUS_SOCKET: Socket %q, %v; want the file's", got.Socket, err)
	}
	_, err = LoadConfig(Source{File: path, FileExplicit: true, Env: map[string]string{"LOCALBUS_SOCKET": "/" + strings.Repeat("x", 200)}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "socket" || ce.Flag != "$LOCALBUS_SOCKET" {
		t.Errorf("with a long $LOCALBUS_SOCKET: %v, want a socket error naming the variable", err)
	}
}

// restartOnly are the settings a running daemon cannot change (SPEC §8):
// its listeners, its logger's format, its open journal and the
// http.Server's own limits.
var restartOnly = []string{
	"socket", "socket_mode", "socket_group", "listen_tcp", "max_header_bytes",
	"read_header_timeout", "idle_timeout", "log_format", "state_dir", "durability", "fsync", "fsync_interval",
}

func TestReloadKeepsEveryRestartSettingAndAppliesTheRest(t *testing.T) {
	t.Parallel()
	// full.toml sets every key away from its default, so every setting
	// changes from running to next.
	running, next := Defaults(), fullConfig()
	kept := keepRestartValues(running, &next)
	if !slices.Equal(kept, restartOnly) {
		t.Errorf("kept %q, want %q", kept, restartOnly)
	}
	full := fullConfig()
	for _, s := range settings {
		want := fieldValue(t, &full, s.Key)
		if slices.Contains(restartOnly, s.Key) {
			want = fieldValue(t, &running, s.Key)
		}
		if diff := cmp.Diff(want, fieldValue(t, &next, s.Key)); diff != "" {
			t.Errorf("%s after reload mismatch (-want +got):\n%s", s.Key, diff)
		}
	}
}

func TestTheReloadableListNamesKeys(t *testing.T) {
	t.Parallel()
	for key := range reloadable {
		table, k, ok := strings.Cut(key, ".")
		if ok {
			if table != upstreamKey || !slices.Contains(upstream.Keys, k) {
				t.Errorf("reloadable names %q, which is not a key of the [upstream] table", key)
			}
			continue
		}
		if _, ok := lookupSetting(key); !ok {
			t.Errorf("reloadable names %q, which is not a setting", key)
		}
	}
	fields := upstreamFields(&upstream.Config{})
	for _, k := range upstream.Keys {
		if fields[k] == nil {
			t.Errorf("upstreamFields has no field for upstream.%s", k)
		}
	}
	if len(fields) != len(upstream.Keys) {
		t.Errorf("upstreamFields has %d keys, upstream.Keys %d", len(fields), len(upstream.Keys))
	}
}

func TestReloadWithoutRestartChangesKeepsNothing(t *testing.T) {
	t.Parallel()
	running := Defaults()
	next := running
	next.RingSize++
	next.Keepalive *= 2
	if kept := keepRestartValues(running, &next); kept != nil {
		t.Errorf("kept %q, want nothing", kept)
	}
	if next.RingSize != running.RingSize+1 || next.Keepalive != running.Keepalive*2 {
		t.Errorf("reloadable values were not applied: ring_size %d, keepalive %s", next.RingSize, next.Keepalive)
	}
}

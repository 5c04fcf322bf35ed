package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/localbus/localbus/daemon/upstream"
)

func mustDefaultsFile(t *testing.T, set map[string]string) string {
	t.Helper()
	b, err := DefaultsFile(set)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// loadText loads text as the file dir/config.toml.
func loadText(t *testing.T, dir, text string) Config {
	t.Helper()
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(Source{File: path, FileExplicit: true})
	if err != nil {
		t.Fatalf("loading the file:\n%s\nerror: %v", text, err)
	}
	return c
}

// uncomment turns every commented "#key = value" line into a set one.
var commentedLine = regexp.MustCompile(`(?m)^#([a-z_]+ = )`)

func TestDefaultsFileListsEverySetting(t *testing.T) {
	text := mustDefaultsFile(t, nil)
	main, table, ok := strings.Cut(text, "\n#[upstream]\n")
	if !ok {
		t.Fatalf("no commented [upstream] table in:\n%s", text)
	}
	for _, s := range Settings() {
		value := regexp.MustCompile(`(?m)^#` + s.Key + ` = .+$`).FindString(main)
		rule := regexp.MustCompile(`(?m)^# ` + s.Key + `: [^\n]*(\n#[^\n]*)*\n# Default: `).FindString(main)
		switch {
		case s.DefaultRule == "" && value == "":
			t.Errorf("%s: no commented line with its default", s.Key)
		case s.DefaultRule != "" && (rule == "" || value != ""):
			t.Errorf("%s: want its rule stated (%q) and no value line; rule %q, value %q", s.Key, s.DefaultRule, rule, value)
		case s.DefaultRule == "" && value != "#"+tomlLine(s, ptr(Defaults())):
			t.Errorf("%s: line %q, want %q", s.Key, value, "#"+tomlLine(s, ptr(Defaults())))
		}
	}
	for _, k := range upstream.Keys {
		if !regexp.MustCompile(`(?m)^#` + k + ` = |^# ` + k + `: `).MatchString(table) {
			t.Errorf("upstream.%s is not listed in the [upstream] table", k)
		}
	}
	// The rules are those of the functions that compute the defaults.
	for key, want := range map[string]string{"socket": "/run/localbus/localbus.sock for root", "state_dir": "$STATE_DIRECTORY", "keys_file": "keys.json in the directory of this file"} {
		s, _ := lookupSetting(key)
		if !strings.Contains(s.DefaultRule, want) {
			t.Errorf("%s: rule %q does not say %q", key, s.DefaultRule, want)
		}
	}
}

func ptr(c Config) *Config { return &c }

// TestDefaultsFileMeansTheDefaults loads the file as printed, and with every
// commented value uncommented: both are the configuration of an empty file.
func TestDefaultsFileMeansTheDefaults(t *testing.T) {
	text := mustDefaultsFile(t, nil)
	dir := t.TempDir()
	want := loadText(t, dir, "")
	if got := loadText(t, dir, text); !cmp.Equal(got, want, cmpopts.EquateEmpty()) {
		t.Errorf("the file as printed is not the defaults: %s", cmp.Diff(want, got, cmpopts.EquateEmpty()))
	}
	main, _, _ := strings.Cut(text, "\n#[upstream]\n")
	uncommented := commentedLine.ReplaceAllString(main, "$1")
	if n := strings.Count(uncommented, "\n") - strings.Count(uncommented, "\n#"); n < len(Settings())-4 {
		t.Fatalf("only %d lines uncommented", n)
	}
	if got := loadText(t, dir, uncommented); !cmp.Equal(got, want, cmpopts.EquateEmpty()) {
		t.Errorf("the uncommented defaults are not the defaults: %s", cmp.Diff(want, got, cmpopts.EquateEmpty()))
	}
	// The [upstream] table uncommented is a valid table with its defaults.
	all := commentedLine.ReplaceAllString(strings.Replace(text, "\n#[upstream]\n", "\n[upstream]\n", 1), "$1")
	got := loadText(t, dir, all)
	wantUp := &upstream.Config{URLs: []string{"nats://127.0.0.1:4222"}}
	wantUp.Fill()
	if !cmp.Equal(got.Upstream, wantUp, cmpopts.EquateEmpty()) {
		t.Errorf("[upstream] uncommented: %s", cmp.Diff(wantUp, got.Upstream, cmpopts.EquateEmpty()))
	}
}

func TestDefaultsFileSetsWhatItIsGiven(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "state", "keys.json")
	text := mustDefaultsFile(t, map[string]string{"keys_file": keys, "ring_size": "100", "unix_peer_scopes": "read", "keepalive": "1m0s"})
	for _, line := range []string{`keys_file = "` + keys + `"`, "ring_size = 100", `unix_peer_scopes = ["read"]`, `keepalive = "1m"`, "# Default: ring_size = 8000"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).MatchString(text) {
			t.Errorf("no line %q in:\n%s", line, text)
		}
	}
	c := loadText(t, t.TempDir(), text)
	if c.KeysFile != keys || c.RingSize != 100 || len(c.UnixPeerScopes) != 1 || c.Keepalive.String() != "1m0s" {
		t.Errorf("loaded keys_file %q ring_size %d unix_peer_scopes %q keepalive %v", c.KeysFile, c.RingSize, c.UnixPeerScopes, c.Keepalive)
	}
}

func TestDefaultsFileRefusesAnUnknownKeyOrABadValue(t *testing.T) {
	for set, want := range map[string]string{"ring_sise": "ring_sise: unknown key", "ring_size": `ring_size: must be a decimal integer, got "x"`} {
		_, err := DefaultsFile(map[string]string{set: "x"})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != set || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s=x: error %v, want a ConfigError saying %q", set, err, want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[string]string{"168h": "168h", "10m": "10m", "15s": "15s", "100ms": "100ms", "0s": "0s", "1h30m": "1h30m", "2m30s": "2m30s", "1h0m5s": "1h0m5s"} {
		var c Config
		setString(&c.Keepalive, d)
		if got := formatDuration(c.Keepalive); got != want {
			t.Errorf("formatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/daemon/upstream"
)

func TestConfigWithoutUpstreamTableHasNoBridge(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(writeConfig(t, "ring_size = 10\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Upstream != nil {
		t.Errorf("Upstream = %+v, want nil without an [upstream] table", cfg.Upstream)
	}
}

func TestConfigUpstreamTable(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `
[upstream]
url = ["nats://10.0.0.1:4222", "tls://nats.example:4222"]
node = "build-1"
export = ["build-*", "ci"]
import = ["desk/*"]
`)
	cfg, err := loadConfig(path, true)
	if err != nil {
		t.Fatal(err)
	}
	want := &upstream.Config{
		URLs: []string{"nats://10.0.0.1:4222", "tls://nats.example:4222"}, Node: "build-1", Stream: "LOCALBUS",
		Export: []string{"build-*", "ci"}, Import: []string{"desk/*"}, BacklogBytes: upstream.DefaultBacklogBytes,
	}
	if diff := cmp.Diff(want, cfg.Upstream); diff != "" {
		t.Errorf("Upstream mismatch (-want +got):\n%s", diff)
	}

	one, err := loadConfig(writeConfig(t, "[upstream]\nurl = \"nats://127.0.0.1:4222\"\nnode = \"a\"\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	if got := one.Upstream.URLs; !slices.Equal(got, []string{"nats://127.0.0.1:4222"}) {
		t.Errorf("url as a string: URLs = %q", got)
	}
}

func TestConfigUpstreamErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, toml, key string
	}{
		{"unknown key", "[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\nnod = \"b\"\n", "upstream.nod"},
		{"bad url", "[upstream]\nurl = \"http://h:4222\"\nnode = \"a\"\n", "upstream.url"},
		{"port past 65535", "[upstream]\nurl = \"nats://h:99999\"\nnode = \"a\"\n", "upstream.url"},
		{"port 0", "[upstream]\nurl = [\"nats://h:4222\", \"nats://h:0\"]\nnode = \"a\"\n", "upstream.url"},
		{"url of the wrong type", "[upstream]\nurl = 4222\nnode = \"a\"\n", "upstream.url"},
		{"no url", "[upstream]\nnode = \"a\"\n", "upstream.url"},
		{"bad node name", "[upstream]\nurl = \"nats://h:4222\"\nnode = \"Build_1\"\n", "upstream.node"},
		{"bad export glob", "[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\nexport = [\"[\"]\n", "upstream.export"},
		{"import without a node", "[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\nimport = [\"build\"]\n", "upstream.import"},
		{"missing creds file", "[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\ncreds = \"nope.creds\"\n", "upstream.creds"},
		{"export with durability memory", "durability = \"memory\"\n[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\nexport = [\"ci\"]\n", "upstream.export"},
		{"backlog_bytes not positive", "[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\nbacklog_bytes = -1\n", "upstream.backlog_bytes"},
		{"backlog_bytes not a number", "[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\nbacklog_bytes = \"1G\"\n", "upstream.backlog_bytes"},
		{"upstream not a table", "upstream = \"nats://h:4222\"\n", "upstream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tt.toml)
			_, err := loadConfig(path, true)
			errs := configErrors(err)
			if len(errs) == 0 {
				t.Fatalf("LoadConfig = %v, want a *ConfigError for %s", err, tt.key)
			}
			if errs[0].Key != tt.key || errs[0].File != path {
				t.Errorf("LoadConfig error = %v (key %q, file %q), want key %q in %s", err, errs[0].Key, errs[0].File, tt.key, path)
			}
		})
	}
}

func TestConfigUpstreamBacklogBytes(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(writeConfig(t, "[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\nbacklog_bytes = 4096\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Upstream.BacklogBytes != 4096 {
		t.Errorf("backlog_bytes = %d, want 4096", cfg.Upstream.BacklogBytes)
	}
	// Import alone needs no journal.
	if _, err := loadConfig(writeConfig(t, "durability = \"memory\"\n[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\nimport = [\"b/*\"]\n"), true); err != nil {
		t.Errorf("import with durability memory = %v, want it accepted", err)
	}
}

func TestConfigUpstreamCredsRelativeToTheFile(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "[upstream]\nurl = \"nats://h:4222\"\nnode = \"a\"\ncreds = \"x.creds\"\n")
	creds := filepath.Join(filepath.Dir(path), "x.creds")
	if err := os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Upstream.Creds != creds {
		t.Errorf("creds = %q, want %q", cfg.Upstream.Creds, creds)
	}
}

func TestReloadChangesOnlyUpstreamPatterns(t *testing.T) {
	t.Parallel()
	running := Config{Upstream: &upstream.Config{URLs: []string{"nats://a:1"}, Node: "a", Stream: "S", Export: []string{"x"}}}
	next := Config{Upstream: &upstream.Config{URLs: []string{"nats://b:1"}, Node: "a", Stream: "S", Export: []string{"y"}, Import: []string{"b/*"}}}
	file := next.Upstream
	kept := keepRestartValues(running, &next)
	if !slices.Equal(kept, []string{"upstream.url"}) {
		t.Errorf("kept = %q, want exactly upstream.url left for a restart", kept)
	}
	if file.URLs[0] != "nats://b:1" {
		t.Errorf("keepRestartValues changed the loaded table: url %q", file.URLs[0])
	}
	want := &upstream.Config{URLs: []string{"nats://a:1"}, Node: "a", Stream: "S", Export: []string{"y"}, Import: []string{"b/*"}}
	if diff := cmp.Diff(want, next.Upstream); diff != "" {
		t.Errorf("reloaded Upstream mismatch (-want +got):\n%s", diff)
	}
	noTable := Config{}
	if kept := keepRestartValues(running, &noTable); !slices.Equal(kept, []string{"upstream"}) || noTable.Upstream == nil {
		t.Errorf("removing the table on reload: kept %q, Upstream %v; want it kept for a restart", kept, noTable.Upstream)
	}
}

// TestConfigUpstreamURLErrorsHideTheUserInformation: an error about a URL
// shows it without its user name and password.
func TestConfigUpstreamURLErrorsHideTheUserInformation(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"nats://alice:s3cret@h:99999", "http://alice:s3cret@h:4222", "nats://alice:s3cret@h:4222/%zz", "nats://alice@h:70000"} {
		_, err := loadConfig(writeConfig(t, "[upstream]\nurl = \""+u+"\"\nnode = \"a\"\n"), true)
		if err == nil {
			t.Fatalf("url %q accepted", u)
		}
		if msg := err.Error(); strings.Contains(msg, "alice") || strings.Contains(msg, "s3cret") {
			t.Errorf("url %q: the error shows the user information: %s", u, msg)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/goleak"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/cmd/localbus/bench"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/wire"
)

// TestMain checks for leaked goroutines and removes the daemon binary that
// the reload tests build. The connection variables of the developer's shell
// would change what the commands under test do, and a command run without
// --socket must not reach a daemon the tests did not start (the system
// daemon, or the user's own): the system socket and $XDG_RUNTIME_DIR point
// into a temporary directory where nothing listens. The bench tests run
// this binary again as their baseline server, as main does.
func TestMain(m *testing.M) {
	bench.ServeBaselineIfAsked()
	os.Unsetenv("LOCALBUS_SOCKET")
	os.Unsetenv("LOCALBUS_KEY")
	nowhere, err := os.MkdirTemp("", "localbus-nowhere-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wire.SystemSocketPath = filepath.Join(nowhere, "system", "localbus.sock")
	os.Setenv("XDG_RUNTIME_DIR", filepath.Join(nowhere, "user"))
	goleak.VerifyTestMain(cleanupM{m}, goleak.Cleanup(func(int) { os.RemoveAll(nowhere) }))
}

type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	defer daemontest.Cleanup()
	return c.m.Run()
}

// keyPattern is what access.Generate makes.
var keyPattern = regexp.MustCompile(`^lb_[A-Za-z0-9_-]{43}$`)

// cliResult is one run of the command line.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the app with args (after "localbus") and returns its exit
// code and output. The app gets the keys command if newApp does not have it
// yet, and errors map to exit codes as run maps them.
//
// Tests that run the app do not run in parallel: urfave/cli's shared help
// flag is written by every run.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	app := newApp(&out, &errb)
	if !slices.ContainsFunc(app.Commands, func(c *cli.Command) bool { return c.Name == "keys" }) {
		app.Commands = append(app.Commands, keysCommand())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := app.RunContext(ctx, append([]string{"localbus"}, args...))
	code := exitOK
	if err != nil {
		errb.WriteString("localbus: " + err.Error() + "\n")
		code = exitUsage
		var ee exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
	}
	if code != exitOK {
		t.Logf("localbus %s: exit %d, stderr:\n%s", strings.Join(args, " "), code, errb.String())
	}
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// keysEnv is a keys file and a socket path on which no daemon listens.
type keysEnv struct {
	file, socket string
}

func newKeysEnv(t *testing.T) keysEnv {
	dir := t.TempDir()
	return keysEnv{file: filepath.Join(dir, "keys.json"), socket: filepath.Join(dir, "none.sock")}
}

func (e keysEnv) run(t *testing.T, sub string, args ...string) cliResult {
	t.Helper()
	full := []string{"keys", sub, "--keys-file", e.file, "--socket", e.socket}
	return runCLI(t, append(full, args...)...)
}

func (e keysEnv) mustAdd(t *testing.T, name string, scopes ...string) string {
	t.Helper()
	args := []string{"--name", name}
	for _, s := range scopes {
		args = append(args, "--scope", s)
	}
	r := e.run(t, "add", args...)
	if r.code != exitOK {
		t.Fatalf("keys add %s: exit %d, stderr %s", name, r.code, r.stderr)
	}
	return strings.TrimSuffix(r.stdout, "\n")
}

func TestKeysAddPrintsTheKeyAloneAndStoresOnlyItsHash(t *testing.T) {
	e := newKeysEnv(t)
	r := e.run(t, "add", "--name", "ci", "--scope", "read", "--scope", "publish:build")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	if !strings.HasSuffix(r.stdout, "\n") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("stdout = %q, want the key alone on one line", r.stdout)
	}
	key := strings.TrimSuffix(r.stdout, "\n")
	if !keyPattern.MatchString(key) {
		t.Fatalf("stdout = %q, want a key like %s", key, keyPattern)
	}
	if strings.Contains(r.stderr, key) {
		t.Errorf("stderr repeats the key: %q", r.stderr)
	}
	if !strings.Contains(r.stderr, "applies when the daemon next starts") {
		t.Errorf("stderr = %q, want it to say the change applies at the next start (no daemon runs)", r.stderr)
	}

	st, err := os.Stat(e.file)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Errorf("keys file mode = %04o, want 0600", perm)
	}
	data, err := os.ReadFile(e.file)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(key)) || bytes.Contains(data, []byte(strings.TrimPrefix(key, access.KeyPrefix))) {
		t.Fatalf("keys file holds the key:\n%s", data)
	}
	if !bytes.Contains(data, []byte(access.HashKey(key))) {
		t.Errorf("keys file lacks the key's hash %s:\n%s", access.HashKey(key), data)
	}
	ring, err := access.Load(e.file)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := ring.Lookup(key)
	if !ok || info.Name != "ci" || info.Scopes.String() != "read,publish:build" {
		t.Errorf("Lookup(printed key) = %+v, %v; want ci with read,publish:build", info, ok)
	}
}

func TestKeysAddTakesCommaSeparatedScopes(t *testing.T) {
	e := newKeysEnv(t)
	key := e.mustAdd(t, "app", "read:build,publish:build")
	ring, err := access.Load(e.file)
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := ring.Lookup(key); !ok || info.Scopes.String() != "read:build,publish:build" {
		t.Errorf("scopes = %v, want read:build,publish:build", info.Scopes)
	}
}

func TestKeysListShowsNamesScopesAndCreatedButNoSecret(t *testing.T) {
	e := newKeysEnv(t)
	before := time.Now().UTC().Truncate(time.Second)
	k1 := e.mustAdd(t, "reader", "read")
	k2 := e.mustAdd(t, "admin-1", "admin")

	r := e.run(t, "list")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("keys list =\n%s\nwant a header and two keys", r.stdout)
	}
	for i, want := range [][2]string{{"reader", "read"}, {"admin-1", "admin"}} {
		f := strings.Fields(lines[i+1])
		if len(f) != 3 || f[0] != want[0] || f[1] != want[1] {
			t.Errorf("line %q, want name %s and scopes %s", lines[i+1], want[0], want[1])
			continue
		}
		created, err := time.Parse(time.RFC3339, f[2])
		if err != nil || created.Before(before) || created.After(time.Now().Add(time.Second)) {
			t.Errorf("created %q: want an RFC 3339 time of now (%v)", f[2], err)
		}
	}

	j := e.run(t, "list", "--json")
	if j.code != exitOK {
		t.Fatalf("list --json: exit %d, stderr %s", j.code, j.stderr)
	}
	var infos []struct {
		Name    string    `json:"name"`
		Scopes  []string  `json:"scopes"`
		Created time.Time `json:"created"`
	}
	dec := json.NewDecoder(strings.NewReader(j.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&infos); err != nil {
		t.Fatalf("list --json = %s: %v", j.stdout, err)
	}
	if len(infos) != 2 || infos[0].Name != "reader" || !slices.Equal(infos[1].Scopes, []string{"admin"}) {
		t.Errorf("list --json = %+v", infos)
	}

	for _, out := range []string{r.stdout, r.stderr, j.stdout, j.stderr} {
		for _, secret := range []string{k1, k2, "sha256:", access.HashKey(k1)} {
			if strings.Contains(out, secret) {
				t.Errorf("keys list output holds a secret or a hash (%.10s…):\n%s", secret, out)
			}
		}
	}
}

func TestKeysListOfNoKeysSaysSoOnStderr(t *testing.T) {
	e := newKeysEnv(t)
	r := e.run(t, "list")
	if r.code != exitOK || r.stdout != "" || !strings.Contains(r.stderr, "no keys") {
		t.Errorf("keys list with no file = exit %d, stdout %q, stderr %q; want 0, nothing, \"no keys\"", r.code, r.stdout, r.stderr)
	}
}

func TestKeysRevokeRemovesTheKey(t *testing.T) {
	e := newKeysEnv(t)
	gone := e.mustAdd(t, "gone", "read")
	kept := e.mustAdd(t, "kept", "publish")
	r := e.run(t, "revoke", "gone")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("revoke stdout = %q, want nothing", r.stdout)
	}
	ring, err := access.Load(e.file)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ring.Lookup(gone); ok {
		t.Error("the revoked key still matches")
	}
	if _, ok := ring.Lookup(kept); !ok {
		t.Error("the other key no longer matches")
	}
	if r := e.run(t, "revoke", "gone"); r.code != exitUsage || !strings.Contains(r.stderr, `no key named "gone" in `+e.file) {
		t.Errorf("revoking it again = exit %d, stderr %q; want 1 and \"no key with that name\"", r.code, r.stderr)
	}
}

func TestKeysRefusesBadInputAndLeavesTheFile(t *testing.T) {
	tests := []struct {
		name     string
		sub      string
		args     []string
		inStderr string
	}{
		{"unknown scope", "add", []string{"--name", "x", "--scope", "write"}, "invalid scope"},
		{"empty scope in list", "add", []string{"--name", "x", "--scope", "read,"}, "invalid scope"},
		{"reserved family", "add", []string{"--name", "x", "--scope", "publish:stream"}, "reserved"},
		{"upper-case family", "add", []string{"--name", "x", "--scope", "read:Build"}, "invalid scope"},
		{"no scope", "add", []string{"--name", "x"}, "scope"},
		{"no name", "add", []string{"--scope", "read"}, "name"},
		{"bad name", "add", []string{"--name", "-x", "--scope", "read"}, "invalid key name"},
		{"name taken", "add", []string{"--name", "existing", "--scope", "read"}, "already exists"},
		{"argument to add", "add", []string{"--name", "x", "--scope", "read", "extra"}, "no arguments"},
		{"argument to list", "list", []string{"extra"}, "no arguments"},
		{"revoke without name", "revoke", nil, "one argument"},
		{"revoke two names", "revoke", []string{"a", "b"}, "one argument"},
		{"revoke unknown", "revoke", []string{"nobody"}, "no key named \"nobody\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newKeysEnv(t)
			e.mustAdd(t, "existing", "read")
			before, err := os.ReadFile(e.file)
			if err != nil {
				t.Fatal(err)
			}
			r := e.run(t, tt.sub, tt.args...)
			if r.code != exitUsage {
				t.Errorf("keys %s %q: exit %d, want %d", tt.sub, tt.args, r.code, exitUsage)
			}
			if !strings.Contains(r.stderr, tt.inStderr) {
				t.Errorf("stderr = %q, want it to mention %q", r.stderr, tt.inStderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.stdout)
			}
			after, err := os.ReadFile(e.file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("the keys file changed:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func TestKeysRefusesAKeysFileOthersCanRead(t *testing.T) {
	e := newKeysEnv(t)
	e.mustAdd(t, "a", "read")
	if err := os.Chmod(e.file, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"add", "list"} {
		r := e.run(t, sub, "--name", "b", "--scope", "read")
		if sub == "list" {
			r = e.run(t, sub)
		}
		if r.code != exitUsage || !strings.Contains(r.stderr, "0644") {
			t.Errorf("keys %s on a 0644 file = exit %d, stderr %q; want 1 naming the mode", sub, r.code, r.stderr)
		}
	}
}

func TestKeysFindTheKeysFileThroughConfig(t *testing.T) {
	tests := []struct {
		name   string
		config string
		want   string // relative to the config's directory
	}{
		{"keys_file set", `keys_file = "secret/k.json"` + "\n", "secret/k.json"},
		{"default beside the config", "", "keys.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(cfg, []byte(tt.config), 0o600); err != nil {
				t.Fatal(err)
			}
			r := runCLI(t, "keys", "add", "--config", cfg, "--socket", filepath.Join(dir, "none.sock"), "--name", "n", "--scope", "admin")
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
			}
			ring, err := access.Load(filepath.Join(dir, tt.want))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := ring.Lookup(strings.TrimSpace(r.stdout)); !ok {
				t.Errorf("the key is not in %s", tt.want)
			}
			l := runCLI(t, "keys", "list", "--config", cfg)
			if l.code != exitOK || !strings.Contains(l.stdout, "admin") {
				t.Errorf("keys list --config = exit %d, %q", l.code, l.stdout)
			}
		})
	}
	t.Run("missing config named explicitly", func(t *testing.T) {
		r := runCLI(t, "keys", "list", "--config", filepath.Join(t.TempDir(), "nope.toml"))
		if r.code != exitUsage || !strings.Contains(r.stderr, "nope.toml") {
			t.Errorf("exit %d, stderr %q; want 1 naming the file", r.code, r.stderr)
		}
	})
}

// startDaemon runs the daemon with a keys file and a TCP listener, and
// returns it with the keys file and the TCP base URL.
func startDaemon(t *testing.T, config string) (d *daemontest.Daemon, keys, baseURL string) {
	t.Helper()
	dir := t.TempDir()
	keys = filepath.Join(dir, "keys.json")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	d = daemontest.Start(t, daemontest.Options{Dir: dir, Args: []string{"--keys-file", keys, "--listen-tcp", "127.0.0.1:0"}})
	addr := tcpAddr(t, d)
	return d, keys, "http://" + addr
}

var tcpLine = regexp.MustCompile(`msg=listening tcp=(127\.0\.0\.1:[0-9]+)`)

// tcpAddr reads the TCP address the daemon logged.
func tcpAddr(t *testing.T, d *daemontest.Daemon) string {
	t.Helper()
	var m []string
	bustest.Eventually(bustest.Showing(t, d.Stderr), 10*time.Second, "the daemon to log its TCP address", func() bool {
		m = tcpLine.FindStringSubmatch(d.Stderr())
		return m != nil
	})
	return m[1]
}

// tcpStatus makes GET url with the key and returns the status.
func tcpStatus(t *testing.T, url, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestKeysChangesApplyOnReloadOfARunningDaemon(t *testing.T) {
	d, keys, base := startDaemon(t, "")
	sessions := base + "/api/v1/sessions"

	add := runCLI(t, "keys", "add", "--keys-file", keys, "--socket", d.Socket, "--name", "app", "--scope", "read")
	if add.code != exitOK {
		t.Fatalf("keys add: exit %d, stderr %s", add.code, add.stderr)
	}
	key := strings.TrimSpace(add.stdout)
	if !strings.Contains(add.stderr, "reloaded") {
		t.Errorf("keys add stderr = %q, want it to say the daemon reloaded", add.stderr)
	}
	if got := tcpStatus(t, sessions, key); got != http.StatusOK {
		t.Fatalf("GET /api/v1/sessions with the new key = %d, want 200", got)
	}

	rev := runCLI(t, "keys", "revoke", "--keys-file", keys, "--socket", d.Socket, "app")
	if rev.code != exitOK || !strings.Contains(rev.stderr, "reloaded") {
		t.Fatalf("keys revoke: exit %d, stderr %q", rev.code, rev.stderr)
	}
	if got := tcpStatus(t, sessions, key); got != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/sessions with the revoked key = %d, want 401", got)
	}
	if strings.Contains(d.Stderr(), key) {
		t.Errorf("the daemon logged the key:\n%s", d.Stderr())
	}
}

func TestKeysFindTheSocketInLOCALBUS_SOCKET(t *testing.T) {
	d, keys, base := startDaemon(t, "")
	t.Setenv("LOCALBUS_SOCKET", d.Socket)
	add := runCLI(t, "keys", "add", "--keys-file", keys, "--name", "env", "--scope", "read")
	if add.code != exitOK || !strings.Contains(add.stderr, "reloaded") {
		t.Fatalf("keys add: exit %d, stderr %q; want the daemon on $LOCALBUS_SOCKET to reload", add.code, add.stderr)
	}
	if got := tcpStatus(t, base+"/api/v1/sessions", strings.TrimSpace(add.stdout)); got != http.StatusOK {
		t.Errorf("GET with the new key = %d, want 200", got)
	}
}

func TestKeysReloadRefusedIsAWarningNotAFailure(t *testing.T) {
	// With unix_auth = "key" even root needs an admin key on the socket.
	d, keys, base := startDaemon(t, "unix_auth = \"key\"\n")

	first := runCLI(t, "keys", "add", "--keys-file", keys, "--socket", d.Socket, "--name", "admin", "--scope", "admin")
	if first.code != exitOK {
		t.Fatalf("keys add: exit %d, stderr %s", first.code, first.stderr)
	}
	if !strings.Contains(first.stderr, "refused to reload (401") {
		t.Errorf("stderr = %q, want a warning that the reload was refused with 401", first.stderr)
	}
	admin := strings.TrimSpace(first.stdout)
	if !keyPattern.MatchString(admin) {
		t.Fatalf("stdout = %q, want the key even though the reload was refused", first.stdout)
	}
	if got := tcpStatus(t, base+"/api/v1/sessions", admin); got != http.StatusUnauthorized {
		t.Errorf("the key works before any reload: %d, want 401", got)
	}

	// Reload by signal, as systemctl reload would; then --key authorizes
	// the reload request of the next change.
	d.Signal(t, syscall.SIGHUP)
	bustest.Eventually(bustest.Showing(t, d.Stderr), 10*time.Second, "the admin key to work after SIGHUP", func() bool {
		return tcpStatus(t, base+"/api/v1/sessions", admin) == http.StatusOK
	})
	second := runCLI(t, "keys", "add", "--keys-file", keys, "--socket", d.Socket, "--key", admin, "--name", "reader", "--scope", "read")
	if second.code != exitOK || !strings.Contains(second.stderr, "reloaded") {
		t.Fatalf("keys add --key: exit %d, stderr %q", second.code, second.stderr)
	}
	if got := tcpStatus(t, base+"/api/v1/sessions", strings.TrimSpace(second.stdout)); got != http.StatusOK {
		t.Errorf("the key added with an authorized reload = %d, want 200", got)
	}
}

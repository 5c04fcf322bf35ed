package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localbus/localbus/daemon/daemontest"
)

// asOneUser returns the uid that both the daemon and the CLI run as, and
// the wrapper that runs the daemon as that user: the test's own user, or
// nobody when the test runs as root, so that the CLI's default
// configuration can lie in the test's directory ($XDG_CONFIG_HOME; root's
// is always /etc/localbus). dirs are given to that user.
func asOneUser(t *testing.T, dirs ...string) (uid int, wrapper []string) {
	t.Helper()
	for _, d := range dirs {
		openDir(t, d)
	}
	if os.Geteuid() != 0 {
		return os.Geteuid(), nil
	}
	// The built binary's directory is root's alone.
	if err := os.Chmod(filepath.Dir(daemontest.Binary(t)), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		err := filepath.Walk(d, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, nobody, nobody)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return nobody, []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}
}

func TestKeysAddActsOnTheKeysFileOfTheRunningDaemon(t *testing.T) {
	t.Parallel()
	daemonDir, home := t.TempDir(), t.TempDir()
	// The daemon's keys file is keys.json beside its config; the CLI's
	// default configuration is another one, whose keys file is elsewhere.
	if err := os.WriteFile(filepath.Join(daemonDir, "config.toml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	otherConfig := filepath.Join(home, "localbus", "config.toml")
	if err := os.MkdirAll(filepath.Dir(otherConfig), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(otherConfig, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	uid, wrapper := asOneUser(t, daemonDir, home)
	daemonKeys := filepath.Join(daemonDir, "keys.json")
	otherKeys := filepath.Join(home, "localbus", "keys.json")

	d := daemontest.Start(t, daemontest.Options{Dir: daemonDir, Wrapper: wrapper, Args: []string{"--listen-tcp", "127.0.0.1:0"}})
	base := "http://" + tcpAddr(t, d)
	bin := daemontest.Binary(t)
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_RUNTIME_DIR=" + home}
	keys := func(args ...string) binResult {
		return runAs(t, uid, env, bin, append([]string{"keys"}, args...)...)
	}

	add := keys("add", "--name", "web", "--scope", "read", "--socket", d.Socket)
	if add.code != exitOK {
		t.Fatalf("keys add: exit %d, stderr %q", add.code, add.stderr)
	}
	key := strings.TrimSpace(add.stdout)
	if !keyPattern.MatchString(key) {
		t.Fatalf("keys add: stdout %q, want the key", add.stdout)
	}
	if !strings.Contains(add.stderr, daemonKeys) || !strings.Contains(add.stderr, "accepts it") {
		t.Errorf("keys add: stderr %q, want it to name %s and say the daemon accepts the key", add.stderr, daemonKeys)
	}
	if got := tcpStatus(t, base+"/api/v1/sessions", key); got != 200 {
		t.Fatalf("GET /api/v1/sessions over TCP with the added key = %d, want 200", got)
	}
	if _, err := os.Stat(otherKeys); !os.IsNotExist(err) {
		t.Errorf("keys add wrote the default configuration's keys file %s (%v)", otherKeys, err)
	}

	// --config names another keys file than the daemon's: refused, both
	// named, nothing written.
	r := keys("add", "--config", otherConfig, "--name", "other", "--scope", "read", "--socket", d.Socket)
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, daemonKeys) || !strings.Contains(r.stderr, otherKeys) {
		t.Errorf("keys add --config %s: exit %d, stdout %q, stderr %q; want 1 naming %s and %s", otherConfig, r.code, r.stdout, r.stderr, otherKeys, daemonKeys)
	}
	if _, err := os.Stat(otherKeys); !os.IsNotExist(err) {
		t.Errorf("the refused keys add wrote %s (%v)", otherKeys, err)
	}
	// The daemon's own config is no disagreement.
	if r := keys("list", "--config", filepath.Join(daemonDir, "config.toml"), "--socket", d.Socket); r.code != exitOK || !strings.Contains(r.stdout, "web ") || r.stderr != "keys in "+daemonKeys+":\n" {
		t.Errorf("keys list --config (the daemon's): exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	rev := keys("revoke", "web", "--socket", d.Socket)
	if rev.code != exitOK || !strings.Contains(rev.stderr, "revoked key \"web\" in "+daemonKeys) {
		t.Fatalf("keys revoke web: exit %d, stderr %q", rev.code, rev.stderr)
	}
	if got := tcpStatus(t, base+"/api/v1/sessions", key); got != 401 {
		t.Errorf("GET with the revoked key = %d, want 401", got)
	}
	if r := keys("revoke", "web", "--socket", d.Socket); r.code != exitUsage || !strings.Contains(r.stderr, "no key named \"web\" in "+daemonKeys) {
		t.Errorf("keys revoke of a gone key: exit %d, stderr %q; want 1 naming %s", r.code, r.stderr, daemonKeys)
	}

	// No daemon: the default configuration's file, named.
	none := filepath.Join(home, "none.sock")
	r = keys("add", "--name", "offline", "--scope", "read", "--socket", none)
	if r.code != exitOK || !strings.Contains(r.stderr, "no daemon answered on "+none) || !strings.Contains(r.stderr, otherKeys) {
		t.Errorf("keys add with no daemon: exit %d, stderr %q; want it to say it used %s", r.code, r.stderr, otherKeys)
	}
}

func TestKeysAddTakesTheKeyBackWhenTheDaemonRefusesIt(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.json")
	// A daemon that names keysFile and reloads, yet refuses every key.
	sock := fakeDaemon(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/caps":
			fmt.Fprintf(w, `{"version":"x","admin":{"keysFile":%q}}`, keysFile)
		case "/api/v1/reload":
			io.WriteString(w, `{"status":"reloaded"}`)
		default:
			refusing.ServeHTTP(w, r)
		}
	}))
	r := runCLI(t, "keys", "add", "--name", "web", "--scope", "read", "--socket", sock)
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "does not accept the new key (answered 401)") {
		t.Errorf("keys add: exit %d, stdout %q, stderr %q; want 1, no key, and why", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(keysFile); !os.IsNotExist(err) {
		t.Errorf("keys file after the refused key: %v\n%s; want the file this command created removed", err, b)
	}
}

func TestKeysAddTakesTheKeyBackWhenTheDaemonCannotLoadTheFile(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.json")
	// A daemon that names keysFile but refuses to reload, as one that
	// cannot read the file does.
	sock := fakeDaemon(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/caps":
			fmt.Fprintf(w, `{"version":"x","admin":{"keysFile":%q}}`, keysFile)
		case "/api/v1/reload":
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"code":"reload_refused","message":"access: keys file: permission denied"}}`)
		}
	}))
	r := runCLI(t, "keys", "add", "--name", "web", "--scope", "read", "--socket", sock)
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, "taken back") {
		t.Errorf("keys add: exit %d, stdout %q, stderr %q; want 1, no key, and the daemon's reason", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(keysFile); !os.IsNotExist(err) {
		t.Errorf("the keys file the command created is still there (%v)", err)
	}
}

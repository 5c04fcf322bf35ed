package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/access"
)

var tcpListening = regexp.MustCompile(`msg=listening tcp=(127\.0\.0\.1:[0-9]+)`)

// startTCP starts a daemon that also listens on loopback TCP, with an
// admin key and a read key (named "reader"), and returns it with its URL
// and the keys; args are more of the daemon's arguments.
func startTCP(t *testing.T, args ...string) (d *daemontest.Daemon, url, admin, read string) {
	t.Helper()
	dir := t.TempDir()
	ring := &access.Keyring{}
	var err error
	if admin, err = ring.Add("admin", []access.Scope{access.Admin}); err != nil {
		t.Fatal(err)
	}
	if read, err = ring.Add("reader", []access.Scope{access.Read}); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "keys.json")
	if err := ring.Save(keys); err != nil {
		t.Fatal(err)
	}
	d = daemontest.Start(t, daemontest.Options{Dir: dir, Args: append([]string{"--keys-file", keys, "--listen-tcp", "127.0.0.1:0"}, args...)})
	var m []string
	bustest.Eventually(bustest.Showing(t, d.Stderr), e2eWait, "the daemon to log its TCP address", func() bool {
		m = tcpListening.FindStringSubmatch(d.Stderr())
		return m != nil
	})
	return d, "http://" + m[1], admin, read
}

func TestCommandsOverTCPWithKeys(t *testing.T) {
	t.Parallel()
	d, url, admin, read := startTCP(t)
	c := apiClient(t, d)
	publishData(t, c, "s", "t:n", 1, 2)
	wrong, err := access.Generate()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		says string // on stderr, when the command fails
	}{
		{"status with an admin key", []string{"status", "--url", url, "--key", admin}, exitOK, ""},
		{"status without a key", []string{"status", "--url", url}, exitRefused, "refused by the daemon (401 unauthorized)"},
		{"status with a wrong key", []string{"status", "--url", url, "--key", wrong}, exitRefused, "pass a key with --key or LOCALBUS_KEY"},
		{"events with a read key", []string{"events", "--url", url, "--key", read, "--session", "s", "--since", "0", "--count", "2"}, exitOK, ""},
		{"events over WebSocket with a read key", []string{"events", "--url", url, "--key", read, "--session", "s", "--since", "0", "--count", "2", "--transport", "ws"}, exitOK, ""},
		{"events without a key", []string{"events", "--url", url, "--session", "s"}, exitRefused, "refused by the daemon (401 unauthorized)"},
		{"events over WebSocket without a key", []string{"events", "--url", url, "--session", "s", "--transport", "ws"}, exitRefused, "refused by the daemon (401 unauthorized)"},
		{"publish with a read key", []string{"publish", "--url", url, "--key", read, "--session", "s", "t:n", "3"}, exitRefused, "use a key with the needed scope"},
		{"delete with a read key", []string{"session", "delete", "--url", url, "--key", read, "s"}, exitRefused, "refused by the daemon (403 forbidden)"},
		{"reload with a read key", []string{"reload", "--url", url, "--key", read}, exitRefused, "refused by the daemon (403 forbidden)"},
		{"a malformed URL", []string{"status", "--url", "127.0.0.1:1"}, exitUsage, "want http://HOST:PORT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runBin(t, "", tt.args...)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d; stderr %q", r.code, tt.code, r.stderr)
			}
			if tt.says != "" {
				oneLine(t, tt.args[0], r.stderr, tt.says)
			}
			if strings.Contains(r.stderr, admin) || strings.Contains(r.stderr, read) {
				t.Errorf("stderr shows a key")
			}
		})
	}
}

func TestKeyAndSocketComeFromTheEnvironment(t *testing.T) {
	t.Parallel()
	d, url, admin, _ := startTCP(t)
	for name, env := range map[string][]string{
		"LOCALBUS_KEY":    {"LOCALBUS_KEY=" + admin},
		"LOCALBUS_SOCKET": {"LOCALBUS_SOCKET=" + d.Socket},
	} {
		t.Run(name, func(t *testing.T) {
			args := []string{"publish", "--session", "env", "t:n", "1"}
			if name == "LOCALBUS_KEY" {
				args = append([]string{"publish", "--url", url}, args[1:]...)
			}
			cmd := exec.Command(daemontest.Binary(t), args...)
			cmd.Env = append(cliEnv(), env...)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "published event ") {
				t.Errorf("localbus %s with %s: %v, output %q", strings.Join(args, " "), env[0][:strings.Index(env[0], "=")], err, out)
			}
		})
	}
}

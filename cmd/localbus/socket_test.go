package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/localbus/localbus/daemon/daemontest"
)

// nobody is the unprivileged user the tests run the CLI as when they run
// as root.
const nobody = 65534

// buildWithSystemSocket builds the CLI with its system socket at sys, so a
// test can serve "the system daemon" in its temporary directory.
func buildWithSystemSocket(t *testing.T, sys string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(t.TempDir(), "localbus")
	cmd := exec.Command("go", "build", "-o", bin, "-ldflags", "-X "+daemontest.SystemSocketVar+"="+sys, ".")
	cmd.Dir = filepath.Dir(file)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runAs runs bin with args and exactly the environment env, as the user
// uid when the test runs as root (else as the test's user).
func runAs(t *testing.T, uid int, env []string, bin string, args ...string) binResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Dir = "/"
	if os.Geteuid() == 0 && uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("localbus %s: %v", strings.Join(args, " "), err)
	}
	return binResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// openDir makes dir and its parents up to the temporary directory
// searchable by everyone, so another user can reach a socket in it.
func openDir(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != "/" && d != os.TempDir() && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSocketPrintsThePathTheCommandsUse(t *testing.T) {
	t.Parallel()
	bin := daemontest.Binary(t)
	env := []string{"PATH=/usr/bin:/bin", "HOME=/"}
	if r := runAs(t, 0, append(env, "LOCALBUS_SOCKET=/srv/lb.sock"), bin, "socket"); r.code != exitOK || r.stdout != "/srv/lb.sock\n" {
		t.Errorf("LOCALBUS_SOCKET=/srv/lb.sock localbus socket: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runAs(t, 0, env, bin, "socket", "--socket", "/srv/other.sock"); r.code != exitOK || r.stdout != "/srv/other.sock\n" {
		t.Errorf("localbus socket --socket /srv/other.sock: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if os.Geteuid() == 0 {
		if r := runAs(t, 0, append(env, "XDG_RUNTIME_DIR=/run/user/0"), bin, "socket"); r.stdout != daemontest.SystemSocket(t)+"\n" {
			t.Errorf("localbus socket as root: stdout %q, want the system socket %s", r.stdout, daemontest.SystemSocket(t))
		}
	}
}

func TestNonRootCLIFallsBackToTheSystemSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys", "localbus.sock")
	userRun := filepath.Join(dir, "user")
	for _, d := range []string{filepath.Dir(sys), userRun} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	openDir(t, userRun)
	if os.Geteuid() == 0 {
		if err := os.Chown(userRun, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildWithSystemSocket(t, sys)
	uid := nobody
	if os.Geteuid() != 0 {
		uid = os.Geteuid()
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=/", "XDG_RUNTIME_DIR=" + userRun}
	own := filepath.Join(userRun, "localbus", "localbus.sock")

	// No socket anywhere: the user's own path, so the error names it.
	if r := runAs(t, uid, env, bin, "socket"); r.stdout != own+"\n" {
		t.Errorf("localbus socket with no daemon: stdout %q, want %q", r.stdout, own)
	}

	daemontest.Start(t, daemontest.Options{Socket: sys, Args: []string{"--socket-mode", "0666"}})
	if r := runAs(t, uid, env, bin, "socket"); r.stdout != sys+"\n" {
		t.Errorf("localbus socket with only the system daemon: stdout %q, stderr %q, want %q", r.stdout, r.stderr, sys)
	}
	if r := runAs(t, uid, env, bin, "status"); r.code != exitOK || !strings.Contains(r.stdout, sys) {
		t.Errorf("localbus status as uid %d without a socket of its own: exit %d, stdout %q, stderr %q; want the system daemon's status", uid, r.code, r.stdout, r.stderr)
	}

	// The user's own socket wins once it exists.
	if err := os.MkdirAll(filepath.Dir(own), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		for _, p := range []string{filepath.Dir(own), own} {
			if err := os.Chown(p, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r := runAs(t, uid, env, bin, "socket"); r.stdout != own+"\n" {
		t.Errorf("localbus socket with a socket of its own: stdout %q, want %q", r.stdout, own)
	}
}

// TestUnreachableNamesEverySocketTriedAndWhy runs the CLI as another user
// whose own socket does not exist, with a "system daemon" (in the test's
// directory) that this user may not reach: the error names both sockets,
// that the user's is missing, and what denies the system one: its
// directory's group, or an unset socket_group; and that the user may run a
// daemon of their own instead.
func TestUnreachableNamesEverySocketTriedAndWhy(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("acting as another user needs root")
	}
	dir := t.TempDir()
	openDir(t, dir)
	sysDir := filepath.Join(dir, "sys")
	sys := filepath.Join(sysDir, "localbus.sock")
	userRun := filepath.Join(dir, "user")
	if err := os.Mkdir(sysDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(userRun, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(userRun, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	bin := buildWithSystemSocket(t, sys)
	d := daemontest.Start(t, daemontest.Options{Socket: sys})
	env := []string{"PATH=/usr/bin:/bin", "HOME=/", "XDG_RUNTIME_DIR=" + userRun}
	own := filepath.Join(userRun, "localbus", "localbus.sock")

	users, err := user.LookupGroup("users")
	if err != nil {
		t.Fatalf("group users: %v", err)
	}
	usersGID, _ := strconv.Atoi(users.Gid)
	tests := []struct {
		name  string
		setup func() error
		says  []string
	}{
		{"directory of group root", func() error { return nil },
			[]string{"no socket at " + own, "permission denied on " + sys, "its directory " + sysDir + " is mode 0750, group root: the daemon's socket_group is unset"}},
		{"directory of another group", func() error { return os.Chown(sysDir, 0, usersGID) },
			[]string{"no socket at " + own, "permission denied on " + sys, "its directory " + sysDir + " is mode 0750, group users, and you are not in group users (sudo usermod -aG users $USER"}},
		{"socket of group root", func() error { return os.Chmod(sysDir, 0o755) },
			[]string{"no socket at " + own, "permission denied on " + sys, "the socket is mode 0660, group root: the daemon's socket_group is unset"}},
	}
	for _, tt := range tests {
		if err := tt.setup(); err != nil {
			t.Fatal(err)
		}
		r := runAs(t, nobody, env, bin, "status")
		if r.code != exitUnreachable {
			t.Errorf("%s: localbus status as uid %d: exit %d, want %d; stderr %q", tt.name, nobody, r.code, exitUnreachable, r.stderr)
		}
		for _, s := range tt.says {
			oneLine(t, tt.name+": localbus status", r.stderr, s)
		}
		if strings.Contains(r.stderr, "is it running?") {
			t.Errorf("%s: stderr %q asks whether a daemon that is running runs", tt.name, r.stderr)
		}
		if !strings.HasSuffix(strings.TrimSpace(r.stderr), "; or run a daemon of your own: 'localbus serve'") {
			t.Errorf("%s: stderr %q does not say the user may run a daemon of their own", tt.name, r.stderr)
		}
	}
	// The daemon was never disturbed: root still reaches it.
	if r := runAs(t, 0, append(env, "LOCALBUS_SOCKET="+d.Socket), bin, "status"); r.code != exitOK {
		t.Errorf("localbus status as root: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSocketProblemsInPlainWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{fs.ErrNotExist, "no socket at /x/lb.sock"},
		{syscall.ENOENT, "no socket at /x/lb.sock"},
		{syscall.ECONNREFUSED, "nothing is listening on /x/lb.sock (a socket left behind by a daemon that stopped)"},
		{syscall.ECONNRESET, "/x/lb.sock: connection reset by peer"},
	}
	for _, tt := range tests {
		if got := (socketTry{"/x/lb.sock", tt.err}).problem(); got != tt.want {
			t.Errorf("problem(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localbus/localbus/daemon/daemontest"
)

func TestSystemdPrintShowsBothUnitsWithTheBinary(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"localbus", "systemd", "print", "--binary", "/opt/lb/localbus"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	for _, want := range []string{"# --- localbus.socket ---", "# --- localbus.service ---", "ExecStart=/opt/lb/localbus serve", "FileDescriptorName=unix", "Type=notify"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("systemd print output lacks %q", want)
		}
	}
}

func TestSystemdInstallWritesUnitsIntoDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "units")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"localbus", "systemd", "install", "--user", "--dir", dir, "--binary", "/usr/bin/localbus"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	for _, name := range []string{"localbus.socket", "localbus.service"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "localbus.service" && !strings.Contains(string(b), "ExecStart=/usr/bin/localbus serve") {
			t.Errorf("installed service does not run the given binary:\n%s", b)
		}
	}
	if !strings.Contains(out.String(), "systemctl --user daemon-reload") {
		t.Errorf("install output does not say what to run next: %s", out.String())
	}
}

func TestSystemdPrintRefusesRelativeBinary(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"localbus", "systemd", "print", "--binary", "bin/localbus"}, &out, &errb); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errb.String(), "not absolute") {
		t.Errorf("stderr = %q, want it to say the path is not absolute", errb.String())
	}
}

func TestSystemdInstallRefusesABinaryUnderAProtectedHome(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "units")
	const inHome = "/home/alice/go/bin/localbus"
	r := runBin(t, "", "systemd", "install", "--dir", dir, "--binary", inHome)
	if r.code != exitUsage {
		t.Errorf("systemd install --binary %s: exit %d, want %d", inHome, r.code, exitUsage)
	}
	for _, want := range []string{inHome, "ProtectHome=yes", "install -m 0755 " + inHome + " /usr/local/bin/", "--binary /usr/local/bin/localbus", "--force"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q does not say %q", r.stderr, want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("refused install left %s behind (%v)", dir, err)
	}

	r = runBin(t, "", "systemd", "install", "--force", "--dir", dir, "--binary", inHome)
	if r.code != exitOK || !strings.Contains(r.stderr, "warning: ") || !strings.Contains(r.stderr, "ProtectHome=yes") {
		t.Errorf("systemd install --force: exit %d, stderr %q; want 0 and a warning", r.code, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "localbus.service")); err != nil || !strings.Contains(string(b), "ExecStart="+inHome+" serve") {
		t.Errorf("--force did not install the service: %v\n%s", err, b)
	}

	// The per-user service runs as the user, who can run a binary in their
	// home.
	userDir := filepath.Join(t.TempDir(), "user-units")
	if r := runBin(t, "", "systemd", "install", "--user", "--dir", userDir, "--binary", inHome); r.code != exitOK || strings.Contains(r.stderr, "warning") {
		t.Errorf("systemd install --user --binary %s: exit %d, stderr %q; want 0 and no warning", inHome, r.code, r.stderr)
	}
	if r := runBin(t, "", "systemd", "install", "--dir", filepath.Join(t.TempDir(), "ok"), "--binary", "/usr/local/bin/localbus"); r.code != exitOK || r.stderr != "" {
		t.Errorf("systemd install --binary /usr/local/bin/localbus: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
}

// A binary that go run or go test built lives in a temporary directory
// (this test's does too): a unit naming it would break once that is
// cleaned, so install refuses it, for the per-user service as well, and
// says how to install one: for --user into the user's own ~/.local/bin,
// with a command that keeps --user and --dir; for the system service into
// /usr/local/bin. The command the hint gives is then accepted.
func TestSystemdInstallRefusesABinaryInATemporaryDirectory(t *testing.T) {
	t.Parallel()
	bin := daemontest.Binary(t)
	for _, tt := range []struct {
		name  string
		flags []string
		says  []string
		never []string
	}{
		{"user", []string{"--user"},
			[]string{"a temporary directory", "install -D -m 0755 " + bin + " ~/.local/bin/localbus\n",
				" --user --dir ", " --binary ~/.local/bin/localbus\n", "go build -o ~/.local/bin/localbus ./cmd/localbus", "--force"},
			[]string{"/usr/local/bin"}},
		{"system", nil,
			[]string{"the service would run " + bin, "install -m 0755 " + bin + " /usr/local/bin/\n",
				" --binary /usr/local/bin/localbus\n", "go build -o /usr/local/bin/localbus ./cmd/localbus", "--force"},
			[]string{"--user", "~/.local"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "units")
			r := runBin(t, "", append([]string{"systemd", "install", "--dir", dir}, tt.flags...)...)
			if r.code != exitUsage {
				t.Errorf("systemd install %v from a temporary build: exit %d, want %d", tt.flags, r.code, exitUsage)
			}
			for _, want := range tt.says {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr %q does not say %q", r.stderr, want)
				}
			}
			for _, never := range tt.never {
				if strings.Contains(r.stderr, never) {
					t.Errorf("stderr %q says %q", r.stderr, never)
				}
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("refused install left %s behind (%v)", dir, err)
			}

			// The command the hint suggests, with ~ as a home the service can
			// see, installs the units.
			var suggested []string
			for line := range strings.Lines(r.stderr) {
				if rest, ok := strings.CutPrefix(line, "  localbus "); ok {
					suggested = strings.Fields(strings.ReplaceAll(rest, "~/", "/home/alice/"))
				}
			}
			if suggested == nil {
				t.Fatalf("stderr %q suggests no localbus command", r.stderr)
			}
			if r := runBin(t, "", suggested...); r.code != exitOK || r.stderr != "" {
				t.Errorf("the suggested localbus %v: exit %d, stderr %q; want 0 and nothing", suggested, r.code, r.stderr)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "localbus.service")); err != nil || !strings.Contains(string(b), "ExecStart=/") || strings.Contains(string(b), bin) {
				t.Errorf("the suggested command did not install a service for the new binary: %v\n%s", err, b)
			}
		})
	}
}

// A home in a temporary directory (HOME=/tmp/…) makes ~/.local/bin no
// better than where the binary is: the refusal says so and asks for a
// binary outside it, rather than to install it where it already is.
func TestSystemdInstallUserWithAHomeInATemporaryDirectory(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	bin := filepath.Join(home, ".local", "bin", "localbus")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := run(t.Context(), []string{"localbus", "systemd", "install", "--user", "--binary", bin}, &stdout, &stderr)
	if code != exitUsage {
		t.Errorf("systemd install --user --binary %s: exit %d, want %d", bin, code, exitUsage)
	}
	says := []string{"your home directory, " + home + ", is in a temporary directory too",
		"localbus systemd install --user --binary PATH\n", "--force"}
	for _, want := range says {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not say %q", stderr.String(), want)
		}
	}
	if strings.Contains(stderr.String(), "install -D") {
		t.Errorf("stderr %q suggests installing the binary where it is", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(home, ".config", "systemd")); !os.IsNotExist(err) {
		t.Errorf("refused install left units behind (%v)", err)
	}

	// A home the service can run from gets the usual hint.
	if got := binaryHint(bin, "install", true, "", ""); !strings.Contains(got, "install -D -m 0755 ") {
		t.Errorf("binaryHint with a usable home = %q, want the install line", got)
	}
}

func TestShellWordQuotesOnlyWhatNeedsIt(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/local/bin/localbus":          "/usr/local/bin/localbus",
		"/home/al ice/bin/localbus":        "'/home/al ice/bin/localbus'",
		"/tmp/it's/localbus":               `'/tmp/it'\''s/localbus'`,
		"/root/.cache/go-build/ab/x-1.2_3": "/root/.cache/go-build/ab/x-1.2_3",
	} {
		if got := shellWord(in); got != want {
			t.Errorf("shellWord(%q) = %s, want %s", in, got, want)
		}
	}
}

package systemd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBinaryProblemNamesWhatTheServiceCannotSee(t *testing.T) {
	system, err := Units(false, "")
	if err != nil {
		t.Fatal(err)
	}
	user, err := Units(true, "")
	if err != nil {
		t.Fatal(err)
	}
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		units  []Unit
		binary string
		says   string
	}{
		{system, "/home/alice/go/bin/localbus", "under /home, which the unit hides from it (ProtectHome=yes)"},
		{system, "/root/go/bin/localbus", "under /root"},
		{system, "/run/user/1000/localbus", "under /run/user"},
		{system, "/tmp/localbus", "under /tmp, which the unit hides from it (PrivateTmp=)"},
		{system, "/usr/local/bin/localbus", ""},
		{user, "/home/alice/go/bin/localbus", ""},
		{user, "/tmp/go-build1234/b001/exe/localbus", "under /tmp, a temporary directory (go run builds there"},
		{user, "/var/tmp/localbus", "under /var/tmp, a temporary directory"},
		{user, cacheDir + "/go-build/ab/localbus", "under " + cacheDir + "/go-build, the Go build cache (go clean -cache empties it)"},
		{user, "/usr/local/bin/localbus", ""},
	}
	for _, tt := range tests {
		got := BinaryProblem(tt.units, tt.binary)
		if (tt.says == "") != (got == "") || !strings.Contains(got, tt.says) {
			t.Errorf("BinaryProblem(%s) = %q, want it to say %q", tt.binary, got, tt.says)
		}
	}
}

func TestNotForOthersFindsTheClosedDirectory(t *testing.T) {
	dir := t.TempDir()
	closed := filepath.Join(dir, "closed")
	bin := filepath.Join(closed, "localbus")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := notForOthers(bin); !strings.Contains(got, closed+" (mode 0700)") {
		t.Errorf("notForOthers = %q, want it to name %s", got, closed)
	}
	os.Chmod(closed, 0o755)
	os.Chmod(bin, 0o700)
	if got := notForOthers(bin); !strings.Contains(got, bin+" (mode 0700)") {
		t.Errorf("notForOthers = %q, want it to name the binary", got)
	}
	os.Chmod(bin, 0o755)
	if got := notForOthers(bin); got != "" && !strings.Contains(got, os.TempDir()) {
		t.Errorf("notForOthers of an open binary = %q", got)
	}
}

// TestSystemServiceRunsUnprivileged checks with systemd-analyze security
// that the system service does not run as root.
func TestSystemServiceRunsUnprivileged(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not in PATH (Debian package systemd)")
	}
	units, err := Units(false, "/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Install(dir, units); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, analyze, "security", "--offline=true", "--no-pager", filepath.Join(dir, "localbus.service"))
	cmd.Env = append(os.Environ(), "SYSTEMD_COLORS=0", "SYSTEMD_PAGER=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "User=/DynamicUser=") && !strings.HasPrefix(line, "✓") {
			t.Errorf("systemd-analyze security: %s", line)
		}
		if strings.Contains(line, "runs as root") {
			t.Errorf("systemd-analyze security: %s", line)
		}
	}
	if !strings.Contains(string(out), "Overall exposure level for localbus.service") {
		t.Errorf("systemd-analyze security said no exposure level:\n%s", out)
	}
}

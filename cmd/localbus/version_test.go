package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestResolveStamp(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		info := &debug.BuildInfo{GoVersion: "go1.26.1"}
		info.Main.Version = "v0.0.0-20261206032646-e14df0c7fe40"
		info.Settings = []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
		return info
	}
	devel := &debug.BuildInfo{GoVersion: "go1.26.1"}
	devel.Main.Version = develVersion
	tests := []struct {
		name                string
		ldVersion, ldCommit string
		info                *debug.BuildInfo
		want                string
	}{
		{"stamped", "1.2.0", "e14df0c7fe40e345044e79d348c2623800c95ed0", vcs("0000000000000000000000000000000000000000", "false"),
			"localbus 1.2.0 (commit e14df0c7fe40, go1.26.1)"},
		{"stamped version only", "0.0.0~git20261206.e14df0c7fe40", "", vcs("e14df0c7fe40e345044e79d348c2623800c95ed0", "false"),
			"localbus 0.0.0~git20261206.e14df0c7fe40 (commit e14df0c7fe40, go1.26.1)"},
		{"go build in a checkout", "", "", vcs("e14df0c7fe40e345044e79d348c2623800c95ed0", "false"),
			"localbus v0.0.0-20261206032646-e14df0c7fe40 (commit e14df0c7fe40, go1.26.1)"},
		{"modified checkout", "", "", vcs("e14df0c7fe40e345044e79d348c2623800c95ed0", "true"),
			"localbus v0.0.0-20261206032646-e14df0c7fe40+dirty (commit e14df0c7fe40, go1.26.1)"},
		{"go run or -buildvcs=false", "", "", devel,
			"localbus (devel) (unstamped: no version or commit in this build, go1.26.1)"},
		{"no build information", "", "", nil,
			"localbus (devel) (unstamped: no version or commit in this build, " + runtime.Version() + ")"},
	}
	for _, tt := range tests {
		if got := resolveStamp(tt.ldVersion, tt.ldCommit, tt.info).String(); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
	// A Go that already marks the pseudo-version dirty is not marked twice.
	info := vcs("e14df0c7fe40e345044e79d348c2623800c95ed0", "true")
	info.Main.Version += "+dirty"
	if got := resolveStamp("", "", info).Version; got != "v0.0.0-20261206032646-e14df0c7fe40+dirty" {
		t.Errorf("dirty twice: %q", got)
	}
}

// TestVersionOfBuiltBinaries builds the binary as scripts/package stamps it
// and as a build without version information, and runs both.
func TestVersionOfBuiltBinaries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	build := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out := filepath.Join(dir, name)
		cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, args...), "-o", out, ".")...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", args, err, b)
		}
		return out
	}
	run := func(bin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			t.Fatalf("%s %v: %v", bin, args, err)
		}
		return string(out)
	}
	stamped := build("stamped", "-trimpath", "-ldflags", "-s -w -X main.version=0.0.0~git20261206.e14df0c7fe40+dirty -X main.commit=e14df0c7fe40e345")
	want := "localbus 0.0.0~git20261206.e14df0c7fe40+dirty (commit e14df0c7fe40, " + runtime.Version() + ")\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if got := run(stamped, args...); got != want {
			t.Errorf("stamped: localbus %s = %q, want %q", args[0], got, want)
		}
	}
	bare := build("bare", "-buildvcs=false")
	got := run(bare, "version")
	if !regexp.MustCompile(`^localbus \(devel\) \(unstamped: [^()]*, go[0-9.]+\)\n$`).MatchString(got) {
		t.Errorf("-buildvcs=false: localbus version = %q, want (devel) and unstamped", got)
	}
	for _, out := range []string{run(stamped, "version"), got} {
		if strings.Contains(out, " dev ") || strings.Contains(out, " dev\n") {
			t.Errorf("version line %q says a bare dev", out)
		}
	}
}

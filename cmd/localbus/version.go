package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"
)

// version and commit are stamped at build time by scripts/package:
//
//	go build -ldflags "-X main.version=1.2.0 -X main.commit=0123456789ab" ./cmd/localbus
//
// Left empty, they come from the build's own information (see buildVersion).
var (
	version string
	commit  string
)

// develVersion is the version of a build that carries none: go run, or go
// build with -buildvcs=false outside a module version.
const develVersion = "(devel)"

// shortCommit is how many hex digits of a commit the version line shows.
const shortCommit = 12

// A buildStamp is what "localbus version" reports.
type buildStamp struct {
	// Version is the stamped version, the module's pseudo-version or
	// develVersion.
	Version string
	// Commit is the short commit hash, or "" when unknown.
	Commit string
	// Go is the Go release the binary was built with, "go1.26.0".
	Go string
}

// unstamped reports whether the build carries neither a version nor a
// commit.
func (s buildStamp) unstamped() bool { return s.Version == develVersion && s.Commit == "" }

// String is the one version line: "localbus VERSION (commit SHORT, goX.Y.Z)".
func (s buildStamp) String() string {
	if s.unstamped() {
		return fmt.Sprintf("localbus %s (unstamped: no version or commit in this build, %s)", s.Version, s.Go)
	}
	c := s.Commit
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("localbus %s (commit %s, %s)", s.Version, c, s.Go)
}

// buildVersion returns the stamp of this binary.
func buildVersion() buildStamp {
	info, _ := debug.ReadBuildInfo()
	return resolveStamp(version, commit, info)
}

// resolveStamp decides the stamp: the -X values when set; else the build
// information's module version and VCS revision (what "go build" records in
// a checkout), marking a modified tree "+dirty" when the version does not
// say so already; else develVersion.
func resolveStamp(ldVersion, ldCommit string, info *debug.BuildInfo) buildStamp {
	s := buildStamp{Version: ldVersion, Commit: short(ldCommit), Go: runtime.Version()}
	if info == nil {
		if s.Version == "" {
			s.Version = develVersion
		}
		return s
	}
	if info.GoVersion != "" {
		s.Go = info.GoVersion
	}
	var revision string
	var modified bool
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			revision = kv.Value
		case "vcs.modified":
			modified = kv.Value == "true"
		}
	}
	if s.Version == "" {
		s.Version = info.Main.Version
		if s.Version == "" {
			s.Version = develVersion
		}
		if modified && s.Version != develVersion && !strings.Contains(s.Version, "dirty") {
			s.Version += "+dirty"
		}
	}
	if s.Commit == "" {
		s.Commit = short(revision)
	}
	return s
}

func short(rev string) string {
	if len(rev) > shortCommit {
		return rev[:shortCommit]
	}
	return rev
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the commit and the Go release it was built from",
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
				return err
			}
			printVersion(c.App.Writer)
			return nil
		},
	}
}

// printVersion writes the one version line of both "localbus version" and
// "localbus --version".
func printVersion(w io.Writer) {
	fmt.Fprintln(w, buildVersion())
}

package systemd

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// BinaryProblem says why the service among units could not start binary,
// or returns "" when nothing stands in the way that can be seen from here:
//
//   - ProtectHome=yes or tmpfs hides /home, /root and /run/user from the
//     service, and PrivateTmp= (or DynamicUser=) gives it a /tmp and
//     /var/tmp of its own, so a binary there is not found (where
//     "go install" puts one, for example);
//   - a binary in the Go build cache or a temporary directory (where "go
//     run" and "go test" build theirs) goes away when that is cleaned, for
//     the per-user service too;
//   - a service with DynamicUser= runs as a user that needs read and
//     execute access to the binary and search access to every directory
//     above it, as "others".
//
// Symbolic links in binary are followed, as the service manager would.
func BinaryProblem(units []Unit, binary string) string {
	var service []byte
	for _, u := range units {
		if strings.HasSuffix(u.Name, ".service") {
			service = u.Content
		}
	}
	d := serviceSettings(service)
	resolved := binary
	if r, err := filepath.EvalSymlinks(binary); err == nil {
		resolved = r
	}
	shown := binary
	if resolved != binary {
		shown = fmt.Sprintf("%s (a link to %s)", binary, resolved)
	}
	var hidden []string
	switch d["ProtectHome"] {
	case "yes", "true", "on", "1", "tmpfs":
		hidden = append(hidden, "/home", "/root", "/run/user")
	}
	if yes(d["PrivateTmp"]) || yes(d["DynamicUser"]) {
		hidden = append(hidden, "/tmp", "/var/tmp")
	}
	for _, p := range []string{binary, resolved} {
		for _, h := range hidden {
			if p == h || strings.HasPrefix(p, h+"/") {
				what := "ProtectHome=" + d["ProtectHome"]
				if h == "/tmp" || h == "/var/tmp" {
					what = "PrivateTmp="
				}
				return fmt.Sprintf("the service would run %s, under %s, which the unit hides from it (%s): it would not start", shown, h, what)
			}
		}
	}
	for _, p := range []string{binary, resolved} {
		if dir, what := transientDir(p); dir != "" {
			return fmt.Sprintf("the service would run %s, under %s, %s: it would stop starting once that is cleaned", shown, dir, what)
		}
	}
	if yes(d["DynamicUser"]) {
		if p := notForOthers(resolved); p != "" {
			return fmt.Sprintf("the service runs as its own unprivileged user, which cannot use %s: %s is not open to others", shown, p)
		}
	}
	return ""
}

// notForOthers returns the first of the directories above the file at
// path, or the file itself, that others cannot search or read and execute;
// "" when all can, or path does not exist.
func notForOthers(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	if fi.Mode().Perm()&0o005 != 0o005 {
		return fmt.Sprintf("%s (mode %04o)", path, fi.Mode().Perm())
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 && fi.Mode().Type()&fs.ModeDir != 0 {
			return fmt.Sprintf("the directory %s (mode %04o)", dir, fi.Mode().Perm())
		}
		if dir == "/" || dir == "." {
			return ""
		}
	}
}

// serviceSettings returns the last value of each setting of the [Service]
// section of a unit file.
func serviceSettings(content []byte) map[string]string {
	m := map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(content))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		case section == "Service":
			if k, v, ok := strings.Cut(line, "="); ok {
				m[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
	}
	return m
}

func yes(v string) bool {
	switch v {
	case "yes", "true", "on", "1":
		return true
	}
	return false
}

// transientDir returns the directory that holds path and is cleaned
// behind its back, with what it is: the Go build cache ($GOCACHE, by
// default go-build in the user's cache directory) or a temporary directory
// (os.TempDir, /tmp, /var/tmp, $GOTMPDIR). It returns "" for any other path.
func transientDir(path string) (dir, what string) {
	var caches []string
	if c := os.Getenv("GOCACHE"); c != "" && c != "off" {
		caches = append(caches, c)
	}
	if c, err := os.UserCacheDir(); err == nil {
		caches = append(caches, filepath.Join(c, "go-build"))
	}
	temps := []string{os.TempDir(), "/tmp", "/var/tmp"}
	if t := os.Getenv("GOTMPDIR"); t != "" {
		temps = append(temps, t)
	}
	under := func(p, d string) bool {
		d = filepath.Clean(d)
		return filepath.IsAbs(d) && d != "/" && strings.HasPrefix(p, d+"/")
	}
	for _, c := range caches {
		if under(path, c) {
			return c, "the Go build cache (go clean -cache empties it)"
		}
	}
	for _, t := range temps {
		if under(path, t) {
			return t, "a temporary directory (go run builds there and removes its binary when it exits)"
		}
	}
	return "", ""
}

package systemd

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// DefaultBinary is the path of the localbus executable in the unit files as
// shipped, and what [Units] uses when given none.
const DefaultBinary = "/usr/local/bin/localbus"

// packageGroup is the group a distribution package creates for the system
// socket, stamped by scripts/package with
// -X github.com/localbus/localbus/systemd.packageGroup=localbus, so that the
// installed "localbus systemd print" shows the units the package installed.
// "" (a build from source) leaves SocketGroup= unset.
var packageGroup string

// ServiceUser is the name of the system service's dynamic user when the
// socket has a group (see [UnitsForGroup]).
const ServiceUser = "localbusd"

// unitFiles holds the unit files: the system variants at the top, the
// variants for the per-user service manager under user/.
//
//go:embed localbus.socket localbus.service user/localbus.socket user/localbus.service
var unitFiles embed.FS

// unitNames lists the units in the order they are installed and printed.
var unitNames = []string{"localbus.socket", "localbus.service"}

// A Unit is a systemd unit file ready to install.
type Unit struct {
	// Name is the unit's file name, such as "localbus.socket".
	Name string
	// Content is the unit file.
	Content []byte
}

// Units returns the unit files, the socket first and then the service, with
// ExecStart= running binary. user selects the variants for the per-user
// service manager (systemctl --user) instead of the system ones. An empty
// binary means [DefaultBinary].
//
// binary must be an absolute, clean, UTF-8 path of at most PATH_MAX bytes
// and NAME_MAX bytes per name, without control characters, quotes or
// backslashes, which systemd refuses in an executable name; spaces and "%"
// are quoted and escaped for the unit file.
func Units(user bool, binary string) ([]Unit, error) {
	return UnitsForGroup(user, binary, packageGroup)
}

// UnitsForGroup is [Units] for a system whose administrators, or whose
// package, made a static group for the socket: the system socket gets
// SocketGroup=group, so its members may connect, and the system service's
// dynamic user is named [ServiceUser], since systemd refuses to allocate a
// dynamic user of the unit's name when a group of that name exists. An
// empty group means the units as shipped; the user units never change.
// group must be a valid user or group name (at most 31 characters of
// [a-z0-9_-], not starting with a digit or '-').
func UnitsForGroup(user bool, binary, group string) ([]Unit, error) {
	if group != "" && !validGroup(group) {
		return nil, fmt.Errorf("systemd: %q is not a valid group name", group)
	}
	if binary == "" {
		binary = DefaultBinary
	}
	if err := checkBinary(binary); err != nil {
		return nil, err
	}
	dir := "."
	if user {
		dir = "user"
	}
	old := "ExecStart=" + DefaultBinary + " "
	repl := "ExecStart=" + quoteExec(binary) + " "
	units := make([]Unit, 0, len(unitNames))
	for _, name := range unitNames {
		b, err := unitFiles.ReadFile(path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("systemd: embedded unit: %w", err)
		}
		s := strings.ReplaceAll(string(b), old, repl)
		if group != "" && !user {
			var ok bool
			if s, ok = withGroup(name, s, group); !ok {
				return nil, fmt.Errorf("systemd: embedded unit %s: no line to set the group on", name)
			}
		}
		units = append(units, Unit{Name: name, Content: []byte(s)})
	}
	return units, nil
}

// The lines of the embedded system units that withGroup changes, and the
// comments that say who may connect and who the service runs as.
const (
	socketGroupLine = "#SocketGroup=localbus-users\n"
	dynamicUserLine = "DynamicUser=yes\n"
	// The socket's paragraph on access, from its first line to the end of
	// the example that names a group by hand.
	socketAccessFrom = "# Access is by file permissions"
	socketAccessTo   = "#   systemctl restart localbus.socket\n#\n"
	serviceUserLine  = "# a user and group \"localbus\", named after the unit, allocated while it runs.\n"
)

// withGroup sets the socket's group in the unit file s of the unit name, or
// names the service's dynamic user, and makes the comments say so. It
// reports false when a line it changes is missing.
func withGroup(name, s, group string) (string, bool) {
	switch name {
	case "localbus.socket":
		access := "# Access is by file permissions: root and members of the static group\n" +
			"# " + group + " may connect (SocketMode=0660, SocketGroup= below). To let a\n" +
			"# user in:\n" +
			"#\n" +
			"#   usermod -aG " + group + " alice     # alice logs in again to get it\n" +
			"#\n" +
			"# The service's dynamic user is " + ServiceUser + " (User= in localbus.service): systemd\n" +
			"# will not allocate a dynamic user named like a static group.\n" +
			"#\n"
		s, ok := replaceSpan(s, socketAccessFrom, socketAccessTo, access)
		repl := "# Members of the group " + group + " may connect.\nSocketGroup=" + group + "\n"
		return strings.Replace(s, socketGroupLine, repl, 1), ok && strings.Contains(s, socketGroupLine)
	case "localbus.service":
		repl := dynamicUserLine + "# Not " + group + ": a static group of that name exists, and systemd would\n" +
			"# refuse to allocate a dynamic user of the same name.\nUser=" + ServiceUser + "\n"
		ok := strings.Contains(s, dynamicUserLine) && strings.Contains(s, serviceUserLine)
		s = strings.Replace(s, serviceUserLine, "# a user and group \""+ServiceUser+"\" (User=), allocated while it runs.\n", 1)
		return strings.Replace(s, dynamicUserLine, repl, 1), ok
	}
	return s, true
}

// replaceSpan replaces the text of s from the first from up to and
// including the next to with repl. It reports false, and returns s, when
// there is no such span.
func replaceSpan(s, from, to, repl string) (string, bool) {
	i := strings.Index(s, from)
	if i < 0 {
		return s, false
	}
	j := strings.Index(s[i:], to)
	if j < 0 {
		return s, false
	}
	return s[:i] + repl + s[i+j+len(to):], true
}

// validGroup reports whether g is a portable user or group name.
func validGroup(g string) bool {
	if len(g) == 0 || len(g) > 31 || g[0] == '-' || (g[0] >= '0' && g[0] <= '9') {
		return false
	}
	for _, r := range g {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// checkBinary applies systemd's rules for an executable path.
func checkBinary(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("systemd: binary path %q is not absolute", p)
	}
	if filepath.Clean(p) != p {
		return fmt.Errorf("systemd: binary path %q is not clean", p)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("systemd: binary path %q is not UTF-8", p)
	}
	for _, r := range p {
		if r < ' ' || r == 0x7f || r == '"' || r == '\'' || r == '\\' {
			return fmt.Errorf("systemd: binary path %q has a character systemd refuses in an executable name", p)
		}
	}
	if len(p) >= unix.PathMax {
		return fmt.Errorf("systemd: binary path %q is too long", p)
	}
	for _, elem := range strings.Split(p, "/") {
		if len(elem) > unix.NAME_MAX {
			return fmt.Errorf("systemd: binary path %q has a name too long", p)
		}
	}
	return nil
}

// quoteExec writes p as the first word of an Exec*= line: "%" starts a
// specifier, so it is doubled, and a path with a space is quoted. checkBinary
// has ruled out the characters that would need escaping inside quotes.
func quoteExec(p string) string {
	p = strings.ReplaceAll(p, "%", "%%")
	if strings.ContainsAny(p, " ") {
		p = `"` + p + `"`
	}
	return p
}

// UnitDir returns the directory where administrators install unit files:
// /etc/systemd/system for the system service manager, and for the per-user
// one $XDG_CONFIG_HOME/systemd/user, or ~/.config/systemd/user when
// XDG_CONFIG_HOME is unset or not absolute.
func UnitDir(user bool) (string, error) {
	if !user {
		return "/etc/systemd/system", nil
	}
	if c := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(c) {
		return filepath.Join(c, "systemd", "user"), nil
	}
	home := os.Getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("systemd: neither XDG_CONFIG_HOME nor HOME is an absolute path")
	}
	return filepath.Join(home, ".config", "systemd", "user"), nil
}

// Install writes units into dir, creating dir (mode 0755) if needed. Each file
// gets mode 0644 and replaces any file of that name atomically: a reader sees
// the old unit or the new one, never a part. Install stops at the first
// error.
//
// The service manager does not see new or changed units until
// "systemctl daemon-reload" (with --user for the per-user manager); then
// "systemctl enable --now localbus.socket" starts listening.
func Install(dir string, units []Unit) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("systemd: install: %w", err)
	}
	for _, u := range units {
		if u.Name == "" || u.Name != filepath.Base(u.Name) || u.Name == "." || u.Name == ".." {
			return fmt.Errorf("systemd: install: invalid unit name %q", u.Name)
		}
		if err := writeFile(filepath.Join(dir, u.Name), u.Content); err != nil {
			return fmt.Errorf("systemd: install: %w", err)
		}
	}
	return nil
}

// writeFile writes b to name through a temporary file in the same directory
// and a rename.
func writeFile(name string, b []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(b); err != nil {
		return err
	}
	// CreateTemp makes the file 0600; units are world-readable.
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

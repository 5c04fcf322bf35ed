package systemd

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// directives parses a unit file into section -> key -> values, in order.
func directives(t *testing.T, content []byte) map[string]map[string][]string {
	t.Helper()
	m := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(content))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			m[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("unit line %q is not key=value in a section", line)
			}
			m[section][k] = append(m[section][k], v)
		}
	}
	return m
}

func unitByName(t *testing.T, units []Unit, name string) Unit {
	t.Helper()
	for _, u := range units {
		if u.Name == name {
			return u
		}
	}
	t.Fatalf("no unit %s among %d units", name, len(units))
	return Unit{}
}

func TestUnitsRenderTheBinaryPath(t *testing.T) {
	tests := []struct {
		name      string
		binary    string
		wantStart string // the ExecStart= value
	}{
		{"default", "", "/usr/local/bin/localbus serve"},
		{"plain", "/usr/bin/localbus", "/usr/bin/localbus serve"},
		{"space is quoted", "/opt/local bus/localbus", `"/opt/local bus/localbus" serve`},
		{"percent is escaped", "/opt/100%/localbus", "/opt/100%%/localbus serve"},
		{"dollar is literal", "/opt/$HOME/localbus", "/opt/$HOME/localbus serve"},
	}
	for _, user := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(variant(user)+"/"+tt.name, func(t *testing.T) {
				units, err := Units(user, tt.binary)
				if err != nil {
					t.Fatalf("Units(%v, %q) error = %v", user, tt.binary, err)
				}
				var names []string
				for _, u := range units {
					names = append(names, u.Name)
				}
				if want := []string{"localbus.socket", "localbus.service"}; !slices.Equal(names, want) {
					t.Fatalf("Units(%v, %q) names = %v, want %v", user, tt.binary, names, want)
				}
				svc := directives(t, unitByName(t, units, "localbus.service").Content)
				if got := svc["Service"]["ExecStart"]; !slices.Equal(got, []string{tt.wantStart}) {
					t.Errorf("ExecStart = %q, want [%q]", got, tt.wantStart)
				}
				// The socket does not name the binary: it is as shipped.
				sock := unitByName(t, units, "localbus.socket").Content
				if shipped := embedded(t, user, "localbus.socket"); !bytes.Equal(sock, shipped) {
					t.Errorf("localbus.socket differs from the shipped file:\n%s", cmp.Diff(string(shipped), string(sock)))
				}
			})
		}
	}
}

func TestUnitsAsShippedUseTheDefaultBinary(t *testing.T) {
	for _, user := range []bool{false, true} {
		units, err := Units(user, DefaultBinary)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range units {
			if shipped := embedded(t, user, u.Name); !bytes.Equal(u.Content, shipped) {
				t.Errorf("%s %s rendered for DefaultBinary differs from the shipped file", variant(user), u.Name)
			}
		}
	}
}

func TestUnitsRefuseBinaryPathsSystemdRefuses(t *testing.T) {
	for _, binary := range []string{
		"localbus",
		"bin/localbus",
		"/usr/bin/../bin/localbus",
		"/usr/bin/",
		"/usr//bin/localbus",
		`/opt/a"b/localbus`,
		"/opt/a'b/localbus",
		`/opt/a\b/localbus`,
		"/opt/a\nExecStartPre=/bin/true\n/localbus",
		"/opt/a\tb/localbus",
		"/opt/a\x7fb/localbus",
		"/opt/\xffb/localbus",
		"/opt/" + strings.Repeat("n", 256) + "/localbus",
		"/" + strings.Repeat("long/", 1000) + "localbus",
	} {
		if units, err := Units(false, binary); err == nil || !strings.HasPrefix(err.Error(), "systemd: binary path ") {
			t.Errorf("Units(false, %q) = %d units, %v; want a systemd: binary path error", binary, len(units), err)
		}
	}
}

// TestUnitsCarryTheContract pins the directives SPEC §8 and the daemon rely
// on, and that the user variant keeps to what a user manager can apply.
func TestUnitsCarryTheContract(t *testing.T) {
	common := map[string]map[string]string{
		"localbus.socket": {
			"Socket/FileDescriptorName": "unix",
			"Socket/SocketMode":         "0660",
			"Install/WantedBy":          "sockets.target",
		},
		"localbus.service": {
			"Unit/Requires":                   "localbus.socket",
			"Service/Type":                    "notify",
			"Service/NotifyAccess":            "main",
			"Service/ExecReload":              "/bin/kill -HUP $MAINPID",
			"Service/WatchdogSec":             "30s",
			"Service/Restart":                 "on-failure",
			"Service/StateDirectory":          "localbus",
			"Service/NoNewPrivileges":         "yes",
			"Service/RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
			"Service/RestrictNamespaces":      "yes",
			"Service/LockPersonality":         "yes",
			"Service/MemoryDenyWriteExecute":  "yes",
			"Service/SystemCallArchitectures": "native",
			"Install/Also":                    "localbus.socket",
		},
	}
	system := map[string]map[string]string{
		"localbus.socket": {
			"Socket/ListenStream": "/run/localbus/localbus.sock",
		},
		"localbus.service": {
			"Service/DynamicUser":           "yes",
			"Service/ProtectSystem":         "strict",
			"Service/ProtectHome":           "yes",
			"Service/PrivateTmp":            "yes",
			"Service/ProtectKernelTunables": "yes",
			"Service/ProtectControlGroups":  "yes",
		},
	}
	user := map[string]map[string]string{
		"localbus.socket": {
			"Socket/ListenStream":  "%t/localbus/localbus.sock",
			"Socket/DirectoryMode": "0750",
		},
	}
	// Settings that need a mount namespace, which a user manager can only
	// build with unprivileged user namespaces.
	notInUser := []string{
		"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables",
		"ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock",
		"ProtectHostname", "ProtectProc", "CapabilityBoundingSet", "PrivateUsers", "User", "DynamicUser",
	}

	for _, isUser := range []bool{false, true} {
		t.Run(variant(isUser), func(t *testing.T) {
			units, err := Units(isUser, "")
			if err != nil {
				t.Fatal(err)
			}
			extra := system
			if isUser {
				extra = user
			}
			for _, want := range []map[string]map[string]string{common, extra} {
				for name, kv := range want {
					d := directives(t, unitByName(t, units, name).Content)
					for key, v := range kv {
						section, k, _ := strings.Cut(key, "/")
						if got := d[section][k]; !slices.Equal(got, []string{v}) {
							t.Errorf("%s [%s] %s = %q, want [%q]", name, section, k, got, v)
						}
					}
				}
			}
			if isUser {
				d := directives(t, unitByName(t, units, "localbus.service").Content)
				for _, k := range notInUser {
					if v, ok := d["Service"][k]; ok {
						t.Errorf("user localbus.service sets %s=%q, which a user manager may be unable to apply", k, v)
					}
				}
			}
		})
	}
}

// TestUnitsPassSystemdAnalyzeVerify installs the rendered units with a fake
// executable at the binary path and runs systemd-analyze verify on them,
// which loads them as the service manager would and fails on fatal errors;
// the test also fails on any warning.
func TestUnitsPassSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not in PATH (Debian package systemd); cannot verify the unit files")
	}
	for _, user := range []bool{false, true} {
		for _, binDir := range []string{"bin", "my bin%"} {
			t.Run(variant(user)+"/"+binDir, func(t *testing.T) {
				root := t.TempDir()
				binary := filepath.Join(root, binDir, "localbus")
				if err := os.MkdirAll(filepath.Dir(binary), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(binary, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				group := ""
				if !user && binDir == "bin" {
					group = "localbus" // the units of the package
				}
				units, err := UnitsForGroup(user, binary, group)
				if err != nil {
					t.Fatal(err)
				}
				dir := filepath.Join(root, "units")
				if err := Install(dir, units); err != nil {
					t.Fatal(err)
				}

				args := []string{"verify", "--man=no"}
				if user {
					args = append(args, "--user")
				}
				for _, u := range units {
					args = append(args, filepath.Join(dir, u.Name))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, analyze, args...)
				// A user manager needs a runtime directory; keep it, and
				// anything else systemd-analyze might look at, in the test's
				// own directories.
				runtime := filepath.Join(root, "run")
				if err := os.Mkdir(runtime, 0o700); err != nil {
					t.Fatal(err)
				}
				cmd.Env = append(os.Environ(),
					"XDG_RUNTIME_DIR="+runtime,
					"HOME="+filepath.Join(root, "home"),
					"XDG_CONFIG_HOME="+filepath.Join(root, "config"),
					"SYSTEMD_LOG_LEVEL=notice",
					"SYSTEMD_PAGER=",
				)
				out, err := cmd.CombinedOutput()
				if err != nil || len(bytes.TrimSpace(out)) > 0 {
					t.Errorf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
				}
			})
		}
	}
}

func TestUnitDir(t *testing.T) {
	tests := []struct {
		name       string
		user       bool
		xdg, home  string // "" unsets
		want       string
		wantErrors bool
	}{
		{name: "system", want: "/etc/systemd/system", home: "/home/ada"},
		{name: "user with XDG_CONFIG_HOME", user: true, xdg: "/cfg", home: "/home/ada", want: "/cfg/systemd/user"},
		{name: "user without XDG_CONFIG_HOME", user: true, home: "/home/ada", want: "/home/ada/.config/systemd/user"},
		{name: "user with relative XDG_CONFIG_HOME", user: true, xdg: "cfg", home: "/home/ada", want: "/home/ada/.config/systemd/user"},
		{name: "user without a home", user: true, wantErrors: true},
		{name: "user with a relative home", user: true, home: "ada", wantErrors: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setOrUnset(t, "XDG_CONFIG_HOME", tt.xdg)
			setOrUnset(t, "HOME", tt.home)
			got, err := UnitDir(tt.user)
			if tt.wantErrors {
				if err == nil {
					t.Errorf("UnitDir(%v) = %q, want an error", tt.user, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("UnitDir(%v) = %q, %v; want %q", tt.user, got, err, tt.want)
			}
		})
	}
}

func TestInstallWritesUnitsReadable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc", "systemd", "system")
	units, err := Units(false, "/usr/bin/localbus")
	if err != nil {
		t.Fatal(err)
	}
	// An old, private unit is replaced.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "localbus.service"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Install(dir, units); err != nil {
		t.Fatalf("Install = %v", err)
	}
	for _, u := range units {
		p := filepath.Join(dir, u.Name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, u.Content) {
			t.Errorf("%s content differs from the unit:\n%s", u.Name, cmp.Diff(string(u.Content), string(b)))
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s mode = %v, want 0644", u.Name, fi.Mode().Perm())
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"localbus.service", "localbus.socket"}; !slices.Equal(names, want) {
		t.Errorf("files in the unit directory = %v, want %v (no temporary files left)", names, want)
	}
}

func TestInstallRefusesNamesOutsideDir(t *testing.T) {
	for _, name := range []string{"", ".", "..", "../localbus.service", "sub/localbus.service", "/etc/localbus.service"} {
		dir := t.TempDir()
		err := Install(dir, []Unit{{Name: name, Content: []byte("[Unit]\n")}})
		if err == nil || !strings.HasPrefix(err.Error(), "systemd: install: invalid unit name") {
			t.Errorf("Install(%q) = %v, want an invalid unit name error", name, err)
		}
	}
}

func embedded(t *testing.T, user bool, name string) []byte {
	t.Helper()
	if user {
		name = "user/" + name
	}
	b, err := unitFiles.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func variant(user bool) string {
	if user {
		return "user"
	}
	return "system"
}

func TestUnitsForGroup(t *testing.T) {
	units, err := UnitsForGroup(false, "/usr/bin/localbus", "localbus")
	if err != nil {
		t.Fatal(err)
	}
	one := func(name, section, key string) string {
		return strings.Join(directives(t, unitByName(t, units, name).Content)[section][key], "|")
	}
	sock := map[string]map[string]string{"Socket": {"SocketGroup": one("localbus.socket", "Socket", "SocketGroup")}}
	svc := map[string]map[string]string{"Service": {}}
	for _, k := range []string{"User", "DynamicUser", "ExecStart"} {
		svc["Service"][k] = one("localbus.service", "Service", k)
	}
	if sock["Socket"]["SocketGroup"] != "localbus" || svc["Service"]["User"] != ServiceUser || svc["Service"]["DynamicUser"] != "yes" ||
		svc["Service"]["ExecStart"] != "/usr/bin/localbus serve" {
		t.Errorf("SocketGroup=%q User=%q DynamicUser=%q ExecStart=%q; want localbus, %s, yes, /usr/bin/localbus serve",
			sock["Socket"]["SocketGroup"], svc["Service"]["User"], svc["Service"]["DynamicUser"], svc["Service"]["ExecStart"], ServiceUser)
	}
	// The comments say who the packaged units run as and let in, and name
	// no other binary.
	all := string(unitByName(t, units, "localbus.socket").Content) + string(unitByName(t, units, "localbus.service").Content)
	for _, want := range []string{`a user and group "` + ServiceUser + `" (User=)`, "members of the static group\n# localbus may connect", "usermod -aG localbus alice"} {
		if !strings.Contains(all, want) {
			t.Errorf("the units for the group localbus do not say %q", want)
		}
	}
	for _, never := range []string{`"localbus", named after the unit`, "Name it other than", "/usr/local/bin"} {
		if strings.Contains(all, never) {
			t.Errorf("the units for the group localbus still say %q", never)
		}
	}
	// The user units and the units without a group are those shipped.
	for _, user := range []bool{false, true} {
		plain, err := Units(user, "/usr/bin/localbus")
		if err != nil {
			t.Fatal(err)
		}
		grouped, err := UnitsForGroup(user, "/usr/bin/localbus", map[bool]string{false: "", true: "localbus"}[user])
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(plain, grouped) {
			t.Errorf("%s: %s", variant(user), cmp.Diff(plain, grouped))
		}
		if _, ok := directives(t, unitByName(t, plain, "localbus.socket").Content)["Socket"]["SocketGroup"]; ok {
			t.Errorf("%s: a build from source sets SocketGroup=", variant(user))
		}
		for _, u := range plain {
			if strings.Contains(string(u.Content), DefaultBinary) {
				t.Errorf("%s %s for /usr/bin/localbus still names %s", variant(user), u.Name, DefaultBinary)
			}
		}
	}
	for _, bad := range []string{"Localbus", "1bus", "-bus", "a b", "bus\nExecStart=/bin/sh", strings.Repeat("a", 32)} {
		if _, err := UnitsForGroup(false, "/usr/bin/localbus", bad); err == nil {
			t.Errorf("UnitsForGroup(%q) succeeded", bad)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
)

// readmeService returns the README's user unit that follows a consumer
// with --exec, its handler script, and the unit's ExecStart= command line
// with %h (the home directory) replaced by home, split into words.
func readmeService(t *testing.T, home string) (unit, handler string, argv []string) {
	t.Helper()
	unit = readmeBlock(t, "ini", "--consumer")
	handler = readmeBlock(t, "sh", "archive-build-event: one event")
	for l := range strings.Lines(unit) {
		if cmdline, ok := strings.CutPrefix(strings.TrimSpace(l), "ExecStart="); ok {
			if strings.ContainsAny(cmdline, `'"\$`) {
				t.Fatalf("the README's ExecStart= quotes or expands (%q): split it as systemd does before running it here", cmdline)
			}
			argv = strings.Fields(strings.ReplaceAll(cmdline, "%h", home))
		}
	}
	if len(argv) == 0 {
		t.Fatalf("the README's unit has no ExecStart=:\n%s", unit)
	}
	return unit, handler, argv
}

// homeWithBinaries makes home/.local/bin hold localbus (the built binary)
// and the README's handler, where the README's unit runs them.
func homeWithBinaries(t *testing.T, home, handler string) {
	t.Helper()
	bin := filepath.Join(home, ".local", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(daemontest.Binary(t), filepath.Join(bin, "localbus")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "archive-build-event"), []byte(handler), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeServiceUnitPassesSystemdAnalyzeVerify installs the README's
// user unit beside localbus's own user units and runs systemd-analyze
// verify on them, failing on any warning, as the tests of localbus's
// units do.
func TestReadmeServiceUnitPassesSystemdAnalyzeVerify(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not in PATH (Debian package systemd); cannot verify the README's unit")
	}
	root := t.TempDir()
	home := filepath.Join(root, "home")
	unit, handler, _ := readmeService(t, home)
	homeWithBinaries(t, home, handler)
	dir := filepath.Join(root, "units")
	if r := runBin(t, "", "systemd", "install", "--user", "--force", "--binary", filepath.Join(home, ".local", "bin", "localbus"), "--dir", dir); r.code != exitOK {
		t.Fatalf("systemd install --user: exit %d, stderr %q", r.code, r.stderr)
	}
	service := filepath.Join(dir, "build-archive.service")
	if err := os.WriteFile(service, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(root, "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"verify", "--man=no", "--user", filepath.Join(dir, "localbus.socket"), filepath.Join(dir, "localbus.service"), service}
	cmd := exec.CommandContext(ctx, analyze, args...)
	cmd.Env = append(os.Environ(),
		"XDG_RUNTIME_DIR="+runtime,
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"SYSTEMD_LOG_LEVEL=notice",
		"SYSTEMD_PAGER=",
	)
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestReadmeServiceUnitArchivesEveryEventAcrossRestarts runs the README's
// unit's ExecStart= as systemd would (in the home directory the unit's %h
// names, the daemon's socket in LOCALBUS_SOCKET), with the README's
// handler: every event of build-17 is archived under its id; after the
// command is killed and the daemon restarted, the command started again
// archives the events published meanwhile, after the last acknowledged
// one.
func TestReadmeServiceUnitArchivesEveryEventAcrossRestarts(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	home := filepath.Join(root, "home")
	_, handler, argv := readmeService(t, home)
	homeWithBinaries(t, home, handler)
	opts := daemontest.Options{Dir: filepath.Join(root, "daemon"), Durable: true}
	if err := os.Mkdir(opts.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, opts)
	c := apiClient(t, d)
	var env []string
	for _, kv := range cliEnv() {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_DATA_HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "LOCALBUS_SOCKET="+d.Socket)
	start := func() *proc {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env, cmd.Dir = env, home
		return startProc(t, cmd)
	}
	archive := filepath.Join(home, ".local", "share", "build-17")
	archived := func(from, to int) {
		t.Helper()
		for n := from; n <= to; n++ {
			file := filepath.Join(archive, fmt.Sprintf("%d.json", n))
			var b []byte
			bustest.Eventually(t, e2eWait, "the handler to archive "+file, func() bool {
				var err error
				b, err = os.ReadFile(file)
				return err == nil
			})
			var ev bus.Envelope
			if err := json.Unmarshal(b, &ev); err != nil || ev.ID != uint64(n) || string(ev.Data) != fmt.Sprint(n) {
				t.Errorf("%s = %q (%v), want the envelope of event %d", file, b, err, n)
			}
		}
	}

	publishData(t, c, "build-17", "build:step", 1, 3)
	p := start()
	archived(1, 3)
	var acked uint64
	bustest.Eventually(t, e2eWait, "the consumer to be acknowledged through 3", func() bool {
		cs, _ := consumerOf(t, c, "build-17", "archive")
		acked = cs.AckedID
		return acked == 3
	})
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.exitCode(t)
	d.Stop(t)
	d = daemontest.Start(t, opts)
	publishData(t, c, "build-17", "build:step", 4, 5)
	p = start()
	archived(4, 5)
	p.waitStderr(t, `following consumer "archive" of session "build-17" (explicit acks); resuming after event 3`)
	entries, err := os.ReadDir(archive)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if fmt.Sprint(names) != "[1.json 2.json 3.json 4.json 5.json]" {
		t.Errorf("the archive holds %v, want 1.json to 5.json and nothing else", names)
	}
}

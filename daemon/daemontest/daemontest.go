package daemontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
)

// A build is one localbus binary, built once per test process.
type build struct {
	once sync.Once
	path string
	err  error
	dir  string
}

var (
	raceBuild  build // Binary's
	plainBuild build // PlainBinary's
)

// SystemSocketVar is the linker name of the system socket's path, for a
// test that builds a binary of its own with -ldflags "-X SystemSocketVar=…".
const SystemSocketVar = "github.com/localbus/localbus/ipc/wire.SystemSocketPath"

// SystemSocket returns the system socket of the binary Binary builds: a
// path in its temporary directory where no daemon listens, so that a
// command run as root without --socket fails to connect rather than reach
// a daemon the test did not start.
func SystemSocket(t testing.TB) string {
	t.Helper()
	return filepath.Join(filepath.Dir(Binary(t)), "system", "localbus.sock")
}

// Binary returns the path of a localbus binary built from this module with
// -race, once per test process, with its system socket in the binary's
// temporary directory (SystemSocket). Call Cleanup from TestMain to remove
// it.
func Binary(t testing.TB) string {
	t.Helper()
	return raceBuild.get(t, "-race")
}

// PlainBinary is Binary built without the race detector, whose shadow
// memory is several times the daemon's heap: for a test that measures the
// daemon's memory (Options.Plain). Its system socket is in its own
// temporary directory, as Binary's.
func PlainBinary(t testing.TB) string {
	t.Helper()
	return plainBuild.get(t)
}

func (b *build) get(t testing.TB, flags ...string) string {
	t.Helper()
	b.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		b.dir, b.err = os.MkdirTemp("", "localbus-bin-")
		if b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "localbus")
		sys := filepath.Join(b.dir, "system", "localbus.sock")
		args := append([]string{"build"}, flags...)
		args = append(args, "-ldflags", "-X "+SystemSocketVar+"="+sys, "-o", b.path, "./cmd/localbus")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Cleanup removes the built binaries; call it from TestMain after m.Run.
func Cleanup() {
	for _, b := range []*build{&raceBuild, &plainBuild} {
		if b.dir != "" {
			os.RemoveAll(b.dir)
		}
	}
}

// Daemon is a running "localbus serve".
type Daemon struct {
	// Socket is the daemon's Unix socket path.
	Socket string
	// Dir is the daemon's temporary directory (socket, config, keys).
	Dir string
	// Config is the configuration file, DIR/config.toml.
	Config string
	// Cmd is the running process (the wrapper's, which becomes the
	// daemon's when it execs it).
	Cmd *exec.Cmd

	mu     sync.Mutex // guards stderr and err
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

// Options configure Start.
type Options struct {
	// Args are extra arguments after the ones Start always passes.
	Args []string
	// Env is extra environment, "K=V". The daemon inherits the test's
	// environment without the variables that would tie it to a service
	// manager or to another daemon (NOTIFY_SOCKET, LISTEN_*, WATCHDOG_*,
	// LOCALBUS_SOCKET); set them here to test them.
	Env []string
	// Dir is the directory to use; "" means a new t.TempDir().
	Dir string
	// Socket is the socket path; "" means DIR/run/lb.sock.
	Socket string
	// NoSocket leaves out --socket, for a daemon that gets its socket from
	// socket activation; Socket still names the path that Client dials.
	// Never use it without activation: the daemon would serve on the
	// default socket.
	NoSocket bool
	// Config is written to DIR/config.toml before the daemon starts; ""
	// writes an empty file unless there is one already.
	Config string
	// Wrapper is a command that runs the daemon's command line, which is
	// appended to it: {"systemd-socket-activate", "-l", path} runs the
	// daemon under socket activation. The wrapper must exec the daemon in
	// its own process, so that signals reach it. nil runs the daemon
	// directly.
	Wrapper []string
	// NoWait skips waiting for the daemon to answer /healthz.
	NoWait bool
	// Durable leaves out "--durability memory" and passes
	// "--state-dir DIR/state", so the daemon keeps its journal there: a
	// daemon started again on the same Dir restores it.
	Durable bool
	// Plain runs PlainBinary, built without the race detector, instead
	// of Binary.
	Plain bool
}

// scrubbed are the environment variables the daemon does not inherit from
// the test process, so that a test run under a service manager, or from a
// shell that talks to a daemon of its own, starts the same daemon.
var scrubbed = []string{
	"NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES",
	"WATCHDOG_USEC", "WATCHDOG_PID", "LOCALBUS_SOCKET",
}

func environ(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(scrubbed, k) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Start runs "localbus serve --socket SOCKET --config DIR/config.toml
// --durability memory" (see Options.Durable) plus opts.Args and waits
// until it answers. The
// daemon is stopped (SIGTERM, then SIGKILL after 10 s) when the test ends;
// the test then fails if the daemon reported a data race.
func Start(t testing.TB, opts Options) *Daemon {
	t.Helper()
	bin := Binary(t)
	if opts.Plain {
		bin = PlainBinary(t)
	}
	dir := opts.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	d := &Daemon{Dir: dir, Socket: opts.Socket, Config: filepath.Join(dir, "config.toml"), done: make(chan struct{})}
	if d.Socket == "" {
		d.Socket = filepath.Join(dir, "run", "lb.sock")
	}
	if opts.Config != "" {
		d.WriteConfig(t, opts.Config)
	} else if _, err := os.Stat(d.Config); errors.Is(err, fs.ErrNotExist) {
		d.WriteConfig(t, "")
	}
	args := append([]string(nil), opts.Wrapper...)
	args = append(args, bin, "serve")
	if !opts.NoSocket {
		args = append(args, "--socket", d.Socket)
	}
	args = append(args, "--config", d.Config)
	if opts.Durable {
		args = append(args, "--state-dir", filepath.Join(dir, "state"))
	} else {
		args = append(args, "--durability", "memory")
	}
	args = append(args, opts.Args...)
	d.Cmd = exec.Command(args[0], args[1:]...)
	d.Cmd.Env = environ(opts.Env)
	d.Cmd.Stderr = &lockedWriter{mu: &d.mu, w: &d.stderr}
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := d.Cmd.Wait()
		d.mu.Lock()
		d.err = err
		d.mu.Unlock()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.Stop(t)
		if strings.Contains(d.Stderr(), "WARNING: DATA RACE") {
			t.Errorf("the daemon reported a data race")
		}
		if t.Failed() {
			t.Logf("daemon stderr:\n%s", d.Stderr())
		}
	})
	if !opts.NoWait {
		d.WaitReady(t)
	}
	return d
}

// WriteConfig replaces the daemon's configuration file with text, for a
// start or a reload to read.
func (d *Daemon) WriteConfig(t testing.TB, text string) {
	t.Helper()
	if err := os.WriteFile(d.Config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// WaitReady waits up to 10 s for /healthz to answer on the socket.
func (d *Daemon) WaitReady(t testing.TB) {
	t.Helper()
	c := d.Client()
	bustest.Eventually(bustest.Showing(t, d.Stderr), 10*time.Second, "the daemon to be ready", func() bool {
		select {
		case <-d.done:
			t.Fatalf("daemon exited before it was ready: %v\n%s", d.Err(), d.Stderr())
		default:
		}
		resp, err := c.Get("http://localbus/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// WaitStderr waits up to timeout for the daemon's stderr to contain s. It
// fails the test if the daemon exits first or the time runs out.
func (d *Daemon) WaitStderr(t testing.TB, s string, timeout time.Duration) {
	t.Helper()
	bustest.Eventually(bustest.Showing(t, d.Stderr), timeout, fmt.Sprintf("the daemon's stderr to hold %q", s), func() bool {
		if strings.Contains(d.Stderr(), s) {
			return true
		}
		select {
		case <-d.done:
			if !strings.Contains(d.Stderr(), s) {
				t.Fatalf("daemon exited (%v) without logging %q:\n%s", d.Err(), s, d.Stderr())
			}
		default:
		}
		return false
	})
}

// Client returns an HTTP client that dials the daemon's socket; any host in
// the URL is fine.
func (d *Daemon) Client() *http.Client { return UnixClient(d.Socket) }

// UnixClient returns an HTTP client that dials the Unix socket at path.
func UnixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
		// A request that says Expect: 100-continue waits this long for the
		// daemon to ask for its body, so a refusal by Content-Length comes
		// back as a reply rather than a broken pipe.
		ExpectContinueTimeout: 5 * time.Second,
	}}
}

// Signal sends sig to the daemon.
func (d *Daemon) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := d.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// Wait waits up to timeout for the daemon to exit and returns its exit
// error (nil for status 0). It fails the test if the daemon is still
// running then.
func (d *Daemon) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case <-d.done:
		return d.Err()
	case <-time.After(timeout):
		t.Fatalf("daemon still running after %v", timeout)
		return nil
	}
}

// Done is closed when the daemon has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err returns the process's exit error once it has exited.
func (d *Daemon) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// ExitCode returns the daemon's exit status once it has exited: -1 while it
// runs or if a signal killed it.
func (d *Daemon) ExitCode() int {
	select {
	case <-d.done:
		return d.Cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// Stop stops the daemon: SIGTERM, then SIGKILL after 10 s. It is idempotent.
func (d *Daemon) Stop(t testing.TB) {
	select {
	case <-d.done:
		return
	default:
	}
	d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		d.Cmd.Process.Kill()
		<-d.done
	}
}

// Kill kills the daemon with SIGKILL, as a crash would, and waits up to
// 10 s for it to be gone.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	d.Cmd.Process.Kill()
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		t.Fatal("daemon still running 10s after SIGKILL")
	}
}

// Stderr returns what the daemon has logged so far.
func (d *Daemon) Stderr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

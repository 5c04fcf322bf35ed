// Package lbtest runs the built localbus binary for end-to-end tests: it
// builds the binary once per test process, starts "localbus serve" on a
// socket in a temporary directory, waits until it answers, and stops it when
// the test ends.
package lbtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// Binary returns the path of a localbus binary built from this module, once
// per test process. Call Cleanup from TestMain to remove it.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		buildDir, buildErr = os.MkdirTemp("", "localbus-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "localbus")
		cmd := exec.Command("go", "build", "-race", "-o", binPath, "./cmd/localbus")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Cleanup removes the built binary; call it from TestMain after m.Run.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Daemon is a running "localbus serve".
type Daemon struct {
	// Socket is the daemon's Unix socket path.
	Socket string
	// Dir is the daemon's temporary directory (socket, config, keys).
	Dir string
	// Cmd is the running process.
	Cmd *exec.Cmd

	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

// Options configure Start.
type Options struct {
	// Args are extra arguments after "serve --socket S".
	Args []string
	// Env is extra environment, "K=V".
	Env []string
	// Dir is the directory to use; "" means a new t.TempDir().
	Dir string
	// NoWait skips waiting for the daemon to answer /healthz.
	NoWait bool
}

// Start runs "localbus serve --socket DIR/run/lb.sock --durability memory"
// plus opts.Args and waits until it answers. The daemon is stopped (SIGTERM,
// then SIGKILL after 10 s) when the test ends.
func Start(t testing.TB, opts Options) *Daemon {
	t.Helper()
	bin := Binary(t)
	dir := opts.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	d := &Daemon{Dir: dir, Socket: filepath.Join(dir, "run", "lb.sock"), done: make(chan struct{})}
	args := append([]string{"serve", "--socket", d.Socket, "--config", filepath.Join(dir, "config.toml"), "--durability", "memory"}, opts.Args...)
	d.Cmd = exec.Command(bin, args...)
	d.Cmd.Env = append(os.Environ(), opts.Env...)
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
		if t.Failed() {
			t.Logf("daemon stderr:\n%s", d.Stderr())
		}
	})
	if !opts.NoWait {
		d.WaitReady(t)
	}
	return d
}

// WaitReady waits up to 10 s for /healthz to answer on the socket.
func (d *Daemon) WaitReady(t testing.TB) {
	t.Helper()
	c := d.Client()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			t.Fatalf("daemon exited before it was ready: %v\n%s", d.Err(), d.Stderr())
		default:
		}
		resp, err := c.Get("http://localbus/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Fatalf("daemon not ready after 10s:\n%s", d.Stderr())
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
// error (nil for status 0).
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

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/client"
)

// e2eWait bounds every wait of the end-to-end tests. The binary is built
// with -race, so it is generous.
const e2eWait = 30 * time.Second

// cliEnv is the environment of the client commands under test: the
// test's, without the variables that would point them at another daemon.
func cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCALBUS_") {
			env = append(env, kv)
		}
	}
	return env
}

// binResult is one run of the built binary.
type binResult struct {
	code           int
	stdout, stderr string
}

// runBin runs the built binary to completion with stdin and returns its
// exit code and output.
func runBin(t *testing.T, stdin string, args ...string) binResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, daemontest.Binary(t), args...)
	cmd.Env = cliEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("localbus %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("localbus %s did not finish within %v", strings.Join(args, " "), e2eWait)
	}
	if code != 0 {
		t.Logf("localbus %s: exit %d, stderr:\n%s", strings.Join(args, " "), code, errb.String())
	}
	return binResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// A proc is a client command running in the background. Its stdout is
// read line by line only when the test asks for a line, so a test that
// stops asking makes the command a slow reader: its output pipe fills and
// it stops reading its stream.
type proc struct {
	cmd    *exec.Cmd
	lines  chan string   // stdout, one line at a time
	quit   chan struct{} // closed at cleanup: discard the rest of stdout
	read   chan struct{} // closed when stdout is at its end
	done   chan struct{} // closed when the process has exited
	mu     sync.Mutex    // guards stderr
	stderr bytes.Buffer
}

// startBin starts the built binary with args; it is stopped (SIGTERM,
// then SIGKILL) when the test ends.
func startBin(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(daemontest.Binary(t), args...)
	cmd.Env = cliEnv()
	return startProc(t, cmd)
}

// startProc starts cmd, a client command, as startBin does.
func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	args := cmd.Args[1:]
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{
		cmd:   cmd,
		lines: make(chan string), quit: make(chan struct{}), read: make(chan struct{}), done: make(chan struct{}),
	}
	p.cmd.Stdout = w
	p.cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stderr.Write(b)
	})
	if err := p.cmd.Start(); err != nil {
		r.Close()
		w.Close()
		t.Fatal(err)
	}
	w.Close() // the child has its copy; EOF comes when it exits
	go func() {
		defer close(p.read)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-p.quit:
			}
		}
	}()
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(e2eWait):
			p.cmd.Process.Kill()
			<-p.done
		}
		close(p.quit)
		<-p.read
		if t.Failed() {
			t.Logf("localbus %s stderr:\n%s", strings.Join(args, " "), p.Stderr())
		}
		if strings.Contains(p.Stderr(), "WARNING: DATA RACE") {
			t.Errorf("localbus %s reported a data race", strings.Join(args, " "))
		}
	})
	return p
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// Stderr returns what the command has written to stderr so far.
func (p *proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// line returns the next line of stdout, failing the test after e2eWait or
// if stdout ends.
func (p *proc) line(t *testing.T) string {
	t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-p.read:
		t.Fatalf("stdout ended (exit %d); stderr:\n%s", p.exitCode(t), p.Stderr())
	case <-time.After(e2eWait):
		t.Fatalf("no line on stdout within %v; stderr:\n%s", e2eWait, p.Stderr())
	}
	return ""
}

// envelopes reads n lines of --raw output and decodes them.
func (p *proc) envelopes(t *testing.T, n int) []bus.Envelope {
	t.Helper()
	out := make([]bus.Envelope, n)
	for i := range out {
		l := p.line(t)
		if err := json.Unmarshal([]byte(l), &out[i]); err != nil {
			t.Fatalf("stdout line %q is not an envelope: %v", l, err)
		}
	}
	return out
}

// waitStderr waits until stderr contains s.
func (p *proc) waitStderr(t *testing.T, s string) {
	t.Helper()
	bustest.Eventually(bustest.Showing(t, p.Stderr), e2eWait, fmt.Sprintf("stderr to hold %q", s), func() bool {
		return strings.Contains(p.Stderr(), s)
	})
}

// exitCode waits for the command to exit and returns its status.
func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(e2eWait):
		t.Fatalf("still running after %v; stderr:\n%s", e2eWait, p.Stderr())
		return -1
	}
}

// drainExit reads stdout to its end and returns the lines and the exit
// status.
func (p *proc) drainExit(t *testing.T) ([]string, int) {
	t.Helper()
	var lines []string
	timeout := time.After(e2eWait)
	for {
		select {
		case l := <-p.lines:
			lines = append(lines, l)
		case <-p.read:
			return lines, p.exitCode(t)
		case <-timeout:
			t.Fatalf("stdout did not end within %v; stderr:\n%s", e2eWait, p.Stderr())
		}
	}
}

// apiClient returns a client of the daemon for the test's own calls.
func apiClient(t *testing.T, d *daemontest.Daemon) *client.Client {
	c := &client.Client{Socket: d.Socket}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// publishData publishes events of type typ whose data are the numbers
// from..to, in one batch.
func publishData(t *testing.T, c *client.Client, session, typ string, from, to int) {
	t.Helper()
	var events []client.Event
	for n := from; n <= to; n++ {
		events = append(events, client.Event{Type: typ, Data: n})
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	if _, err := c.PublishBatch(ctx, session, events); err != nil {
		t.Fatalf("publish %d..%d: %v", from, to, err)
	}
}

// waitSubscribers waits until session has n subscribers.
func waitSubscribers(t *testing.T, c *client.Client, session string, n int) {
	t.Helper()
	var info client.SessionInfo
	var err error
	last := func() string { return fmt.Sprintf("%+v, %v", info, err) }
	bustest.Eventually(bustest.Showing(t, last), e2eWait, fmt.Sprintf("session %s to have %d subscribers", session, n), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
		defer cancel()
		info, err = c.Session(ctx, session)
		return err == nil && info.Subscribers == n
	})
}

// fakeDaemon serves handler on a Unix socket in a temporary directory
// until the test ends, and returns the socket.
func fakeDaemon(t *testing.T, handler http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return sock
}

// refusing answers every request 401, as a daemon that wants a key does.
var refusing = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	io.WriteString(w, `{"error":{"code":"unauthorized","message":"credentials required: send Authorization: Bearer <key>"}}`)
})

// oneLine fails the test unless s is exactly one line mentioning want.
func oneLine(t *testing.T, what, s, want string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") || !strings.Contains(s, want) {
		t.Errorf("%s stderr = %q, want one line that says %q", what, s, want)
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/client"
)

// readme returns the README's text.
func readme(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeBlock returns the README's fenced block of language lang that
// contains want.
func readmeBlock(t *testing.T, lang, want string) string {
	t.Helper()
	blocks := regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(readme(t), -1)
	for _, b := range blocks {
		if strings.Contains(b[1], want) {
			return b[1]
		}
	}
	t.Fatalf("README has no ```%s block with %q", lang, want)
	return ""
}

func TestReadmeExamplesAreSafeToPasteAsRootAndAsAUser(t *testing.T) {
	r := readme(t)
	if !strings.Contains(r, "S=$(localbus socket)") {
		t.Error("README does not set S=$(localbus socket)")
	}
	for _, bad := range []string{"/run/user/1000", "S=$XDG_RUNTIME_DIR", "--unix-socket $S", "--unix-socket \"$XDG"} {
		if strings.Contains(r, bad) {
			t.Errorf("README has %q, which breaks under root, sudo or another user", bad)
		}
	}
	// websocat 1.x: --ws-c-uri names the URI, ws-c:unix: the socket.
	ws := readmeBlock(t, "sh", "websocat")
	if !regexp.MustCompile(`(?m)^websocat --ws-c-uri=ws://localbus/api/v1/sessions/[^ ]+/ws - ws-c:unix:"\$S"$`).MatchString(ws) || strings.Contains(ws, "--unix-socket") {
		t.Errorf("README's websocat example is not websocat 1.x syntax:\n%s", ws)
	}
}

// startFollower runs name with args and env, and returns a channel of its
// stdout lines and a function that kills it and waits for it to end,
// which also runs when the test ends.
func startFollower(t *testing.T, env []string, name string, args ...string) (<-chan string, func()) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-quit:
			}
		}
		close(lines)
	}()
	stop := sync.OnceFunc(func() {
		cmd.Process.Kill()
		close(quit)
		<-done
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	t.Cleanup(stop)
	return lines, stop
}

func TestReadmeClientExamplesFindTheDaemonThroughLocalbusSocket(t *testing.T) {
	t.Parallel()
	opts := daemontest.Options{Dir: t.TempDir(), Durable: true}
	d := daemontest.Start(t, opts)
	c := apiClient(t, d)
	bin := daemontest.Binary(t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	// localbus on PATH; the socket in LOCALBUS_SOCKET, as a user who runs
	// the daemon elsewhere would set it (localbus socket honours it).
	env := append(cliEnv(), "PATH="+filepath.Dir(bin)+":/usr/bin:/bin", "LOCALBUS_SOCKET="+d.Socket)
	publishData(t, c, "build-17", "build:step", 0, 0)

	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	sh := exec.CommandContext(ctx, "sh", "-c", `S=$(localbus socket) && curl -sf --unix-socket "$S" http://localbus/api/v1/caps`)
	sh.Env = env
	if out, err := sh.CombinedOutput(); err != nil || !strings.Contains(string(out), `"schemaVersion"`) {
		t.Errorf("S=$(localbus socket); curl … /api/v1/caps: %v\n%s", err, out)
	}

	clients := []struct {
		name, pkg string
		cmd       []string
		code      string
		consumer  string // the consumer the snippet follows, "" for none
	}{
		{"python", "python3", []string{"/usr/bin/python3", "-c"}, readmeBlock(t, "python", "since={since}"), ""},
		{"node", "nodejs", []string{"node", "-e"}, readmeBlock(t, "js", "ws${query}"), ""},
		{"python-consumer", "python3", []string{"/usr/bin/python3", "-c"}, readmeBlock(t, "python", "consumer={consumer}&ack=explicit"), "py-worker"},
		{"node-consumer", "nodejs", []string{"node", "-e"}, readmeBlock(t, "js", "?consumer=node-worker"), "node-worker"},
	}
	for _, cl := range clients {
		// A subtest that restarts the daemon ties the new one to itself; the
		// next subtest gets one of its own, on the same journal.
		restarted := false
		t.Run(cl.name, func(t *testing.T) {
			if _, err := exec.LookPath(cl.cmd[0]); err != nil {
				t.Skipf("%s is not installed (Debian package %s)", cl.cmd[0], cl.pkg)
			}
			if cl.cmd[0] == "node" {
				requireNodeWS(t, env, os.Getenv("LOCALBUS_TEST_NO_INSTALL") == "1")
			}
			lines, stop := startFollower(t, env, cl.cmd[0], append(cl.cmd[1:], cl.code)...)
			waitSubscribers(t, c, "build-17", 1)
			restart := func() {
				t.Helper()
				d.Stop(t)
				// While the daemon is down, its socket answers nothing: a
				// listener there closes every connection unanswered until
				// the snippet has tried at least once.
				tried, stop := refuseOn(t, d.Socket)
				bustest.Eventually(t, e2eWait, "the snippet to try to reconnect while the daemon is down", func() bool { return tried() > 0 })
				stop()
				d, restarted = daemontest.Start(t, opts), true
			}
			next := func() (string, bool, error) {
				select {
				case l, ok := <-lines:
					return l, ok, nil
				case <-time.After(e2eWait):
					return "", false, fmt.Errorf("nothing printed within %v", e2eWait)
				}
			}
			if cl.consumer == "" {
				checkResumesAcrossReloadAndRestart(t, c, "build-17", restart, next)
				return
			}
			rerun := func(while func()) {
				t.Helper()
				stop()
				waitSubscribers(t, c, "build-17", 0)
				while()
				lines, stop = startFollower(t, env, cl.cmd[0], append(cl.cmd[1:], cl.code)...)
			}
			checkConsumerResumes(t, c, "build-17", cl.consumer, restart, rerun, next)
		})
		if restarted {
			d = daemontest.Start(t, opts)
		}
		waitSubscribers(t, c, "build-17", 0)
	}
}

// checkResumesAcrossReloadAndRestart publishes three events to session,
// reloads the daemon, publishes three more, restarts it (restart) and
// publishes three more, and reads what a README snippet printed ("ID TYPE
// DATA" lines, through next) until the last of them: every event must be
// there once, in order, although the last three of each round were
// published while the snippet was reconnecting.
func checkResumesAcrossReloadAndRestart(t *testing.T, c *client.Client, session string, restart func(), next func() (line string, ok bool, err error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	info, err := c.Session(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	first := info.LastID + 1
	want := first
	read := func(upTo uint64) {
		t.Helper()
		line := regexp.MustCompile(`^(\d+) build:step (\d+)$`)
		for want <= upTo {
			l, ok, err := next()
			if err != nil || !ok {
				t.Fatalf("the snippet stopped (%v) before printing event %d; it printed events %d to %d", err, want, first, want-1)
			}
			m := line.FindStringSubmatch(strings.TrimSpace(l))
			if m == nil {
				continue
			}
			id, _ := strconv.ParseUint(m[1], 10, 64)
			n, _ := strconv.ParseUint(m[2], 10, 64)
			if id != want || n != want-first+1 {
				t.Fatalf("the snippet printed %q, want event %d (data %d) next: an event lost, repeated or out of order", l, want, want-first+1)
			}
			want++
		}
	}
	publishData(t, c, session, "build:step", 1, 3)
	if _, err := c.Reload(ctx); err != nil {
		t.Fatalf("reload: %v", err)
	}
	publishData(t, c, session, "build:step", 4, 6)
	read(first + 5)
	waitSubscribers(t, c, session, 1)
	restart()
	publishData(t, c, session, "build:step", 7, 9)
	read(first + 8)
}

// checkConsumerResumes checks a README snippet that follows session
// through consumer ("ID TYPE DATA" lines, through next): a new consumer
// starts at the beginning of the ring; then, as in
// checkResumesAcrossReloadAndRestart, events published around a reload and
// a restart of the daemon (restart) come once each, in order; last, the
// snippet is stopped, three events are published, and it is started again
// (rerun): it prints those three and nothing before them. Before each
// disruption the test waits for the consumer's stored position to reach
// the last event printed, so nothing before the last acknowledgement may
// come again and nothing after it may be lost.
func checkConsumerResumes(t *testing.T, c *client.Client, session, consumer string, restart func(), rerun func(while func()), next func() (string, bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	info, err := c.Session(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	base, want := info.LastID, uint64(1)
	line := regexp.MustCompile(`^(\d+) build:step (\d+)$`)
	read := func(upTo uint64) {
		t.Helper()
		for want <= upTo {
			l, ok, err := next()
			if err != nil || !ok {
				t.Fatalf("the snippet stopped (%v) before printing event %d", err, want)
			}
			m := line.FindStringSubmatch(strings.TrimSpace(l))
			if m == nil {
				continue
			}
			id, _ := strconv.ParseUint(m[1], 10, 64)
			n, _ := strconv.ParseUint(m[2], 10, 64)
			if id != want || (id > base && n != id-base) {
				t.Fatalf("the snippet printed %q, want event %d next: an event lost, repeated or out of order", l, want)
			}
			want++
		}
	}
	stored := func() {
		t.Helper()
		var cs client.Consumer
		bustest.Eventually(bustest.Showing(t, func() string { return fmt.Sprintf("%+v", cs) }), e2eWait,
			fmt.Sprintf("consumer %s to be stored through %d", consumer, want-1), func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
				defer cancel()
				list, _ := c.Consumers(ctx, session)
				for _, cs = range list {
					if cs.Name == consumer {
						return cs.AckedID == want-1
					}
				}
				return false
			})
	}
	read(base) // a new consumer: the whole ring
	publishData(t, c, session, "build:step", 1, 3)
	read(base + 3)
	stored()
	if _, err := c.Reload(ctx); err != nil {
		t.Fatalf("reload: %v", err)
	}
	publishData(t, c, session, "build:step", 4, 6)
	read(base + 6)
	stored()
	restart()
	publishData(t, c, session, "build:step", 7, 9)
	read(base + 9)
	stored()
	rerun(func() { publishData(t, c, session, "build:step", 10, 12) })
	read(base + 12)
}

// refuseOn listens on the Unix socket path, where no daemon runs, and
// closes every connection unanswered, as a daemon that is going away
// would. tried reports how many connections came; stop closes the
// listener, which removes path (it also runs when the test ends).
func refuseOn(t *testing.T, path string) (tried func() int, stop func()) {
	t.Helper()
	os.Remove(path) // a socket the daemon left behind
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	stop = sync.OnceFunc(func() {
		ln.Close()
		<-done
	})
	t.Cleanup(stop)
	return func() int { return int(n.Load()) }, stop
}

// requireNodeWS fails the test unless node, with env, finds the ws module.
// scripts/test installs it into scripts/.deps and sets NODE_PATH, the one
// place the module path is set; the tests inherit it. Under scripts/test
// --no-install (noInstall), which tests with what is there and says that
// the tests needing a missing program skip, the test skips instead, saying
// how to get ws.
func requireNodeWS(t testing.TB, env []string, noInstall bool) {
	t.Helper()
	cmd := exec.Command("node", "-e", "require('ws')")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	nodePath := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "NODE_PATH="); ok {
			nodePath = v
		}
	}
	if noInstall {
		t.Skipf("node cannot load ws (NODE_PATH=%q), and scripts/test --no-install installs nothing: scripts/test installs it into scripts/.deps with npm", nodePath)
	}
	t.Fatalf("node cannot load ws (NODE_PATH=%q): %v\n%s\nscripts/test installs it into scripts/.deps and sets NODE_PATH", nodePath, err, out)
}

// verdictTB records how a check ended the test it was given: Skipf and
// Fatalf end the calling goroutine, as testing's do.
type verdictTB struct {
	testing.TB
	verdict string
}

func (v *verdictTB) Helper() {}
func (v *verdictTB) Skipf(format string, args ...any) {
	v.verdict = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (v *verdictTB) Fatalf(format string, args ...any) {
	v.verdict = "fail: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Without ws, the README's Node snippet cannot run: scripts/test installs
// ws, so there a missing ws is a failure; scripts/test --no-install says
// the tests that need a missing program skip, so there it is a skip.
func TestANodeWithoutWSFailsUnlessNothingWasInstalled(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("node is not installed (Debian package nodejs): %v", err)
	}
	empty := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + empty, "NODE_PATH=" + empty}
	for _, tt := range []struct {
		noInstall bool
		want      string
	}{
		{false, "fail: node cannot load ws"},
		{true, "skip: node cannot load ws"},
	} {
		v := &verdictTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			requireNodeWS(v, env, tt.noInstall)
		}()
		<-done
		if !strings.HasPrefix(v.verdict, tt.want) || !strings.Contains(v.verdict, "scripts/.deps") {
			t.Errorf("requireNodeWS without ws, noInstall %v: %q, want %q… naming scripts/.deps", tt.noInstall, v.verdict, tt.want)
		}
	}
}

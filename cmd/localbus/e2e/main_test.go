package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/access"

	"github.com/localbus/localbus/bus/bustest"
)

// TestMain checks for leaked goroutines and removes the daemon binary the
// tests built.
func TestMain(m *testing.M) { goleak.VerifyTestMain(cleanupM{m}) }

type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	defer daemontest.Cleanup()
	return c.m.Run()
}

// The users the tests act as besides root. otherUID is nobody (group
// nogroup); strangerUID has no entry in the user database and is in no
// group the daemon's socket names.
const (
	otherUID    = 65534
	strangerUID = 65533
)

// wait bounds every wait of these tests.
const wait = 10 * time.Second

// python is Debian's interpreter, which has python3-websockets and which
// every uid may run (unlike a per-user pyenv shim).
const python = "/usr/bin/python3"

// keySet holds one key per role, as the daemon's keys file has them.
type keySet struct {
	read    string // read
	family  string // read:build, publish:build
	publish string // publish
	admin   string // admin
	// wrong is shaped like a key but in no keys file.
	wrong string
}

// all returns every key value, for leak checks.
func (k keySet) all() []string { return []string{k.read, k.family, k.publish, k.admin, k.wrong} }

// setup says how to start a daemon.
type setup struct {
	// config is the config.toml of the daemon.
	config string
	// args are extra serve flags.
	args []string
	// tcp starts a TCP listener on a free loopback port.
	tcp bool
	// otherUIDCanConnect makes the socket reachable for otherUID: see start.
	otherUIDCanConnect bool
	// durable keeps the journal in the daemon's directory, so that
	// restart restores it.
	durable bool
}

// daemon is a running localbus serve with keys.
type daemon struct {
	*daemontest.Daemon
	keys keySet
	// tcp is the TCP listener's host:port, "" without one.
	tcp string
	// opts started the daemon, for restart.
	opts daemontest.Options
}

// restart stops the daemon and starts it again on the same directory,
// arguments and (with setup.durable) journal.
func (d *daemon) restart(t *testing.T) {
	t.Helper()
	d.Stop(t)
	d.Daemon = daemontest.Start(t, d.opts)
}

// start writes a keys file with one key per role and a config.toml into a
// temporary directory, and runs the daemon on them. When the test ends the
// daemon is stopped, and the test fails if the daemon's log holds a key or
// a data race report (the binary is built with -race).
func start(t *testing.T, s setup) *daemon {
	t.Helper()
	dir := t.TempDir()
	ring := &access.Keyring{}
	add := func(name string, scopes ...access.Scope) string {
		k, err := ring.Add(name, scopes)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	d := &daemon{}
	d.keys.read = add("reader", access.Read)
	d.keys.family = add("builder", "read:build", "publish:build")
	d.keys.publish = add("publisher", access.Publish)
	d.keys.admin = add("admin", access.Admin)
	var err error
	if d.keys.wrong, err = access.Generate(); err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(dir, "keys.json")
	if err := ring.Save(keysFile); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(s.config), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.otherUIDCanConnect {
		// t.TempDir makes its directories 0700 and the daemon makes a missing
		// socket directory 0750 (SPEC §7), so another uid could not reach the
		// socket whatever its mode. Open the path to it: the temporary
		// directory and its parent, and a socket directory made before the
		// daemon starts (the daemon keeps an existing one as it is).
		for _, p := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(filepath.Join(dir, "run"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"--keys-file", keysFile}, s.args...)
	if s.tcp {
		args = append(args, "--listen-tcp", "127.0.0.1:0")
	}
	// Registered before daemontest.Start, so it runs after the daemon stopped.
	t.Cleanup(func() {
		if d.Daemon == nil {
			return
		}
		log := d.Stderr()
		if strings.Contains(log, "DATA RACE") {
			t.Errorf("the daemon reported a data race:\n%s", log)
		}
		for _, k := range d.keys.all() {
			if strings.Contains(log, k) {
				t.Errorf("the daemon's log holds a key (%.8s…)", k)
			}
		}
	})
	d.opts = daemontest.Options{Dir: dir, Args: args, Durable: s.durable}
	d.Daemon = daemontest.Start(t, d.opts)
	if s.tcp {
		d.tcp = tcpAddr(t, d.Daemon)
	}
	return d
}

var tcpLine = regexp.MustCompile(`msg=listening tcp=(127\.0\.0\.1:[0-9]+)`)

// tcpAddr returns the TCP address the daemon logged it listens on.
func tcpAddr(t *testing.T, d *daemontest.Daemon) string {
	t.Helper()
	var m []string
	bustest.Eventually(bustest.Showing(t, d.Stderr), wait, "the daemon to log its TCP address", func() bool {
		m = tcpLine.FindStringSubmatch(d.Stderr())
		return m != nil
	})
	return m[1]
}

// url returns the URL of path on the daemon: over TCP when tcp is set,
// else a placeholder host for the Unix socket.
func (d *daemon) url(tcp bool, path string) string {
	if tcp {
		return "http://" + d.tcp + path
	}
	return "http://localbus" + path
}

// client returns an HTTP client for the daemon over TCP or its socket. It
// keeps no connection open between requests.
func (d *daemon) client(tcp bool) *http.Client {
	if tcp {
		return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	return d.Client()
}

// reply is a response as the tests look at it.
type reply struct {
	status int
	header http.Header
	body   string
}

// request describes one HTTP request.
type request struct {
	method, path, body string
	header             []string // name, value pairs
	// stream makes the call return once the headers arrived: the body of an
	// allowed stream never ends by itself.
	stream bool
}

// do makes req with client against url and returns the reply.
func do(t *testing.T, client *http.Client, url string, req request) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	method := req.method
	if method == "" {
		method = http.MethodGet
	}
	r, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if req.body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(req.header); i += 2 {
		if strings.EqualFold(req.header[i], "Host") {
			r.Host = req.header[i+1]
			continue
		}
		r.Header.Add(req.header[i], req.header[i+1])
	}
	resp, err := client.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out := reply{status: resp.StatusCode, header: resp.Header}
	if req.stream && resp.StatusCode == http.StatusOK {
		return out
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	out.body = string(b)
	return out
}

// dialWS opens a WebSocket to url with client and the given headers and
// subprotocols, and returns the HTTP status (101 when it opened) and the
// error body of a refusal. An opened connection is closed at once.
func dialWS(t *testing.T, client *http.Client, url string, header []string, protos ...string) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Add(header[i], header[i+1])
	}
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http"), &websocket.DialOptions{
		HTTPClient: client, HTTPHeader: h, Subprotocols: protos,
	})
	if err == nil {
		c.Close(websocket.StatusNormalClosure, "")
		return reply{status: resp.StatusCode, header: resp.Header}
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	// On a refusal the library has read at most a prefix of the body.
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// needRoot skips a test that must run clients as other users.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running a client as another uid needs root")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (Debian package util-linux) is needed to run a client as another uid: %v", err)
	}
}

// runAs runs argv as uid and gid (with no supplementary groups) through
// setpriv and returns its stdout, stderr and exit code. A command that
// cannot start fails the test.
func runAs(t *testing.T, uid, gid int, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	args := append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(gid), "--clear-groups", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "setpriv", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("setpriv %q: %v", argv, err)
	}
	return out.String(), errb.String(), code
}

// needCurl skips a test when curl is not installed.
func needCurl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed (Debian package curl)")
	}
}

// needPython skips a test when Debian's python3 is not installed or, with
// websockets, cannot import the websockets module.
func needPython(t *testing.T, websockets bool) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is not installed (Debian package python3): %v", python, err)
	}
	if !websockets {
		return
	}
	if out, err := exec.Command(python, "-c", "import websockets").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import websockets (Debian package python3-websockets): %v: %s", python, err, bytes.TrimSpace(out))
	}
}

// curlAs makes req on the daemon's socket with curl run as uid, gid. For a
// stream (SSE or a WebSocket upgrade) curl stops after a second, which is
// when the status is known.
func (d *daemon) curlAs(t *testing.T, uid, gid int, req request) reply {
	t.Helper()
	needCurl(t)
	method := req.method
	if method == "" {
		method = http.MethodGet
	}
	maxTime := "8"
	if req.stream {
		maxTime = "1"
	}
	argv := []string{"curl", "-s", "-X", method, "--max-time", maxTime, "--unix-socket", d.Socket, "-w", "\n%{http_code}"}
	for i := 0; i+1 < len(req.header); i += 2 {
		argv = append(argv, "-H", req.header[i]+": "+req.header[i+1])
	}
	if req.body != "" {
		argv = append(argv, "-H", "Content-Type: application/json", "--data-binary", req.body)
	}
	argv = append(argv, d.url(false, req.path))
	out, errOut, code := runAs(t, uid, gid, argv...)
	const curlTimedOut = 28
	if code != 0 && !(req.stream && code == curlTimedOut) {
		t.Fatalf("curl as uid %d: exit %d: %s", uid, code, errOut)
	}
	i := strings.LastIndexByte(out, '\n')
	status, err := strconv.Atoi(strings.TrimSpace(out[i+1:]))
	if err != nil {
		t.Fatalf("curl as uid %d: no status in %q", uid, out)
	}
	return reply{status: status, body: out[:i]}
}

// upgradeHeader are the headers of a WebSocket upgrade request, for clients
// that do not speak WebSocket themselves.
var upgradeHeader = []string{
	"Connection", "Upgrade", "Upgrade", "websocket",
	"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==",
}

// bearer returns the Authorization header pair for key.
func bearer(key string) []string { return []string{"Authorization", "Bearer " + key} }

// eventually polls cond until it reports true or fails the test after
// timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	bustest.Eventually(t, timeout, what, cond)
}

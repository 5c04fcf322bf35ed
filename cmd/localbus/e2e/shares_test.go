package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
)

// Fair shares (SPEC §2): every pool a peer can draw from is shared by
// peer, so one uid on the socket never refuses another uid or root. These
// tests run the hostile peer as a real second user, through setpriv, with
// Debian's python3 speaking HTTP on the socket.

// peerScript is the client the tests run as another uid. Its first
// argument is the socket; the second the mode:
//
//	slow N: send N declared bodies of 64 MiB at once, a byte every quarter
//	  second each, and print one line per body, "STATUS CODE SECONDS", once
//	  it is answered.
//	fill SESSION: take tickets, sessions created by a publish and streams
//	  of SESSION until each is refused, print what it got as JSON, then hold
//	  the streams until its stdin closes.
//	probe SESSION PREFIX: one ticket, one publish that creates the session
//	  PREFIX-new, one stream of SESSION; print the statuses as JSON.
const peerScript = `
import http.client, json, select, socket, sys, time

sock_path = sys.argv[1]

class Conn(http.client.HTTPConnection):
    def __init__(self):
        super().__init__("localbus", timeout=20)
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(sock_path)

def call(conn, method, path, body=None):
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    code = ""
    if r.status >= 400:
        try:
            code = json.loads(data)["error"]["code"]
        except Exception:
            code = "?"
    return r.status, code

def open_stream(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(sock_path)
    s.sendall(("GET %s HTTP/1.1\r\nHost: localbus\r\nAccept: text/event-stream\r\n\r\n" % path).encode())
    buf = b""
    while b"event: stream:" not in buf or not buf.split(b"event: stream:", 1)[1].count(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    status = int(buf.split(b" ", 2)[1]) if buf.startswith(b"HTTP/") else 0
    event = ""
    if b"event: stream:" in buf:
        event = "stream:" + buf.split(b"event: stream:", 1)[1].split(b"\n", 1)[0].decode().strip()
    return s, status, event

mode = sys.argv[2]
if mode == "slow":
    n = int(sys.argv[3])
    start = time.monotonic()
    socks = []
    for i in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock_path)
        s.sendall(("POST /api/v1/sessions/slow-%d/events HTTP/1.1\r\nHost: localbus\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (i, 64 << 20)).encode())
        socks.append(s)
    replies = {}
    while len(replies) < n and time.monotonic() - start < 40:
        for s in socks:
            if s in replies:
                continue
            try:
                s.send(b" ")
            except OSError:
                pass
        ready, _, _ = select.select([s for s in socks if s not in replies], [], [], 0.25)
        for s in ready:
            data = s.recv(65536)
            replies[s] = (data, time.monotonic() - start)
    for s in socks:
        data, at = replies.get(s, (b"", time.monotonic() - start))
        status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "none"
        code = "-"
        if b'"code":"' in data:
            code = data.split(b'"code":"', 1)[1].split(b'"', 1)[0].decode()
        print(status, code, "%.1f" % at, flush=True)
elif mode == "fill":
    session = sys.argv[3]
    out = {}
    conn = Conn()
    n = 0
    while n < 20000:
        st, code = call(conn, "POST", "/api/v1/tickets", json.dumps({"path": "/api/v1/sessions/%s/events" % session}))
        if st != 200:
            out["tickets"], out["ticketRefusal"] = n, "%d %s" % (st, code)
            break
        n += 1
    n = 0
    while n < 5000:
        st, code = call(conn, "POST", "/api/v1/sessions/hog-%d/events" % n, '{"type":"t:a","data":1}')
        if st != 200:
            out["sessions"], out["sessionRefusal"] = n, "%d %s" % (st, code)
            break
        n += 1
    held = []
    while len(held) < 500:
        s, st, event = open_stream("/api/v1/sessions/%s/events" % session)
        if event != "stream:ready":
            out["streams"], out["streamRefusal"] = len(held), "%d %s" % (st, event)
            s.close()
            break
        held.append(s)
    print(json.dumps(out), flush=True)
    sys.stdin.read()
elif mode == "probe":
    session, prefix = sys.argv[3], sys.argv[4]
    conn = Conn()
    out = {}
    out["ticket"] = call(conn, "POST", "/api/v1/tickets", json.dumps({"path": "/api/v1/sessions/%s/events" % session}))[0]
    out["publish"] = call(conn, "POST", "/api/v1/sessions/%s-new/events" % prefix, '{"type":"t:a","data":1}')[0]
    s, st, event = open_stream("/api/v1/sessions/%s/events" % session)
    out["stream"] = event
    print(json.dumps(out), flush=True)
`

// peer is peerScript running as another uid.
type peer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *lineBuffer
	stderr bytes.Buffer
}

// startPeer runs peerScript with args as uid (and gid uid) on d's socket.
// It is killed when the test ends, if still running.
func (d *daemon) startPeer(t *testing.T, uid int, args ...string) *peer {
	t.Helper()
	needPython(t, false)
	argv := append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid), "--clear-groups", "--",
		python, "-c", peerScript, d.Socket}, args...)
	p := &peer{cmd: exec.Command("setpriv", argv...), stdout: &lineBuffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("setpriv %v: %v", args, err)
	}
	t.Cleanup(func() {
		p.stdin.Close()
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	return p
}

// lines waits for n lines of output, for at most timeout.
func (p *peer) lines(t *testing.T, n int, timeout time.Duration) []string {
	t.Helper()
	var got []string
	eventually(t, timeout, fmt.Sprintf("%d lines from the peer", n), func() bool {
		got = p.stdout.lines()
		return len(got) >= n
	})
	return got
}

// lineBuffer collects a process's output; it is safe for concurrent use.
type lineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the complete lines written so far.
func (b *lineBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	i := strings.LastIndexByte(s, '\n')
	if i < 0 {
		return nil
	}
	return strings.Split(s[:i], "\n")
}

// publishAsRoot publishes one event as root and returns the status and how
// long the answer took.
func publishAsRoot(t *testing.T, d *daemon, session string) (int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url(false, "/api/v1/sessions/"+session+"/events"), strings.NewReader(`{"type":"t:a","data":1}`))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := d.Client().Do(req)
	took := time.Since(start)
	if err != nil {
		return 0, took
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, took
}

// sharedSetup is a daemon whose socket every uid may reach.
var sharedSetup = setup{config: "socket_mode = \"0666\"\n", otherUIDCanConnect: true}

// TestSlowBodiesOfAnotherUIDStopNeitherRootNorAThirdUID: uid 65534 sends
// two bodies that declare 64 MiB (max_body_bytes and
// max_inflight_body_bytes) and trickle in a byte at a time, while root and
// uid 65533 publish. With the default peer_share such a body is larger
// than the peer's share of the bodies read at once: a 413 at once. With
// shares off (peer_share = 1) the bodies are read: nothing is reserved
// from their Content-Length, so every root publish is answered, each
// within 2 s, and so are the third uid's, until the slow bodies are cut
// with 408 body_too_slow at the end of their first window after 5 s.
func TestSlowBodiesOfAnotherUIDStopNeitherRootNorAThirdUID(t *testing.T) {
	needRoot(t)
	for _, tt := range []struct {
		name, config string
		status, code string
		after        [2]float64 // seconds, when the bodies are answered
	}{
		{"default share", "", "413", "body_too_large", [2]float64{0, 2}},
		{"shares off", "peer_share = 1\n", "408", "body_too_slow", [2]float64{9, 20}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := start(t, setup{config: "socket_mode = \"0666\"\n" + tt.config, otherUIDCanConnect: true})
			hog := d.startPeer(t, otherUID, "slow", "2")
			n := 0
			peerStderr := func() string { return "peer stderr: " + hog.stderr.String() }
			bustest.Eventually(bustest.Showing(t, peerStderr), 30*time.Second, "the slow bodies to be answered, beside 20 publishes or more", func() bool {
				if n >= 20 && len(hog.stdout.lines()) >= 2 {
					return true
				}
				st, took := publishAsRoot(t, d, "root")
				if st != http.StatusOK || took > 2*time.Second {
					t.Fatalf("root publish %d beside slow bodies of uid %d = %d after %v, want 200 within 2s", n, otherUID, st, took)
				}
				if n%10 == 0 {
					other := d.curlAs(t, strangerUID, strangerUID, request{method: "POST", path: "/api/v1/sessions/third/events", body: `{"type":"t:a","data":1}`})
					if other.status != http.StatusOK {
						t.Fatalf("publish of uid %d beside slow bodies of uid %d = %d %s, want 200", strangerUID, otherUID, other.status, other.body)
					}
				}
				n++
				time.Sleep(50 * time.Millisecond) // pacing the publishes, not synchronisation
				return false
			})
			for _, line := range hog.lines(t, 2, wait) {
				f := strings.Fields(line)
				if len(f) != 3 || f[0] != tt.status || f[1] != tt.code {
					t.Errorf("slow body answered %q, want %s %s", line, tt.status, tt.code)
					continue
				}
				if at, _ := strconv.ParseFloat(f[2], 64); at < tt.after[0] || at > tt.after[1] {
					t.Errorf("slow body answered after %s s, want within %v s", f[2], tt.after)
				}
			}
			for _, s := range []string{"slow-0", "slow-1"} {
				if r := do(t, d.Client(), d.url(false, "/api/v1/sessions/"+s), request{}); r.status != http.StatusNotFound {
					t.Errorf("session %s after its body was refused = %d, want 404", s, r.status)
				}
			}
			if !strings.Contains(d.Stderr(), "code="+tt.code+" peer_uid=65534") {
				t.Errorf("the slow bodies' refusal is not logged with the peer:\n%s", d.Stderr())
			}
		})
	}
}

// fillResult is what peerScript fill printed.
type fillResult struct {
	Tickets        int    `json:"tickets"`
	TicketRefusal  string `json:"ticketRefusal"`
	Sessions       int    `json:"sessions"`
	SessionRefusal string `json:"sessionRefusal"`
	Streams        int    `json:"streams"`
	StreamRefusal  string `json:"streamRefusal"`
}

// TestOneUIDFillingItsSharesLeavesAnotherUIDAndRootServed: uid 65534 takes
// tickets, sessions by publish and streams of one session until each is
// refused; it stops at its share (a quarter) of each, while uid 65533 and
// root get all three.
func TestOneUIDFillingItsSharesLeavesAnotherUIDAndRootServed(t *testing.T) {
	needRoot(t)
	d := start(t, setup{config: "socket_mode = \"0666\"\nmax_sessions = 40\nmax_subscribers = 8\n", otherUIDCanConnect: true})
	if r := do(t, d.Client(), d.url(false, "/api/v1/sessions"), request{method: "POST", body: `{"id":"shared"}`}); r.status != s201 {
		t.Fatalf("create shared = %d %s", r.status, r.body)
	}
	hog := d.startPeer(t, otherUID, "fill", "shared")
	var got fillResult
	if err := json.Unmarshal([]byte(hog.lines(t, 1, 60*time.Second)[0]), &got); err != nil {
		t.Fatal(err)
	}
	want := fillResult{
		Tickets: 2500, TicketRefusal: "429 ticket_limit", // a quarter of 10,000
		Sessions: 5, SessionRefusal: "429 session_limit", // max_auto_sessions lowered to 20; a quarter
		Streams: 2, StreamRefusal: "200 stream:error", // a quarter of max_subscribers
	}
	if got != want {
		t.Fatalf("uid %d filling its shares got %+v, want %+v", otherUID, got, want)
	}
	other := d.startPeer(t, strangerUID, "probe", "shared", "third")
	var probe struct {
		Ticket, Publish int
		Stream          string
	}
	if err := json.Unmarshal([]byte(other.lines(t, 1, wait)[0]), &probe); err != nil {
		t.Fatal(err)
	}
	if probe.Ticket != 200 || probe.Publish != 200 || probe.Stream != "stream:ready" {
		t.Errorf("uid %d beside uid %d at its shares: %+v, want a ticket, a new session and a stream", strangerUID, otherUID, probe)
	}
	root := d.Client()
	if r := do(t, root, d.url(false, "/api/v1/tickets"), request{method: "POST", body: `{"path":"/api/v1/sessions/shared/events"}`}); r.status != http.StatusOK {
		t.Errorf("root ticket = %d %s", r.status, r.body)
	}
	if st, _ := publishAsRoot(t, d, "root-new"); st != http.StatusOK {
		t.Errorf("root publish to a new session = %d", st)
	}
	s := openSSE(t, root, d.url(false, "/api/v1/sessions/shared/events"))
	if f := s.next(t); f.event != "stream:ready" {
		t.Errorf("root stream beside the hog = %s %s", f.event, f.data)
	}
	metrics := do(t, root, d.url(false, "/metrics"), request{}).body
	for _, m := range []string{
		`localbus_share_refusals_total{pool="tickets",share="peer"} 1`,
		`localbus_share_refusals_total{pool="auto_sessions",share="peer"} 1`,
		`localbus_share_refusals_total{pool="subscribers",share="peer"} 1`,
	} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// TestSharesHoldAfterARestart: the sessions uid 65534 created by a publish
// stay on its share across a restart (the journal stores the creating
// peer), while another uid still creates its own.
func TestSharesHoldAfterARestart(t *testing.T) {
	needRoot(t)
	d := start(t, setup{config: "socket_mode = \"0666\"\nmax_sessions = 40\n", otherUIDCanConnect: true, durable: true})
	publish := func(uid int, id string) reply {
		return d.curlAs(t, uid, uid, request{method: "POST", path: "/api/v1/sessions/" + id + "/events", body: `{"type":"t:a","data":1}`})
	}
	for i := range 5 {
		if r := publish(otherUID, fmt.Sprintf("hog-%d", i)); r.status != http.StatusOK {
			t.Fatalf("session %d of uid %d = %d %s", i, otherUID, r.status, r.body)
		}
	}
	if r := publish(otherUID, "hog-5"); r.status != http.StatusTooManyRequests {
		t.Fatalf("sixth session of uid %d = %d %s, want 429 past its share of 5", otherUID, r.status, r.body)
	}
	d.restart(t)
	if r := publish(otherUID, "hog-5"); r.status != http.StatusTooManyRequests || !strings.Contains(r.body, "share") {
		t.Errorf("after a restart, a sixth session of uid %d = %d %s, want 429 naming its share", otherUID, r.status, r.body)
	}
	if r := publish(otherUID, "hog-0"); r.status != http.StatusOK {
		t.Errorf("after a restart, a publish to a session uid %d has = %d %s", otherUID, r.status, r.body)
	}
	if r := publish(strangerUID, "other-0"); r.status != http.StatusOK {
		t.Errorf("after a restart, uid %d's first session = %d %s", strangerUID, r.status, r.body)
	}
}

// TestMaxSessions20KeepsHalfForAdmins: with max_sessions = 20 and the
// default max_auto_sessions (1024), publishes create at most 10 sessions
// (the daemon logs the lowered limit), and an admin creates the other 10.
func TestMaxSessions20KeepsHalfForAdmins(t *testing.T) {
	d := start(t, setup{config: "max_sessions = 20\n"})
	d.WaitStderr(t, "max_auto_sessions is above half of max_sessions; lowered to that half", wait)
	if !strings.Contains(d.Stderr(), "max_auto_sessions=1024 max_sessions=20 limit=10") {
		t.Errorf("the lowered limit is not logged with its values:\n%s", d.Stderr())
	}
	for i := range 10 {
		if st, _ := publishAsRoot(t, d, fmt.Sprintf("auto-%d", i)); st != http.StatusOK {
			t.Fatalf("session %d by a publish = %d", i, st)
		}
	}
	if st, _ := publishAsRoot(t, d, "auto-10"); st != http.StatusTooManyRequests {
		t.Fatalf("eleventh session by a publish = %d, want 429", st)
	}
	for i := range 10 {
		if r := do(t, d.Client(), d.url(false, "/api/v1/sessions"), request{method: "POST", body: fmt.Sprintf(`{"id":"made-%d"}`, i)}); r.status != s201 {
			t.Fatalf("admin session %d beside 10 by publish = %d %s", i, r.status, r.body)
		}
	}
	if r := do(t, d.Client(), d.url(false, "/api/v1/sessions"), request{method: "POST", body: `{"id":"made-10"}`}); r.status != http.StatusTooManyRequests {
		t.Errorf("twenty-first session = %d %s, want 429", r.status, r.body)
	}
}

// TestMalformedLastEventIDCannotFloodTheLog: 5,000 stream requests with a
// malformed Last-Event-ID, with the daemon logging at debug level, add a
// bounded number of bytes to its log, and what is logged names the peer.
func TestMalformedLastEventIDCannotFloodTheLog(t *testing.T) {
	d := start(t, setup{config: "log_level = \"debug\"\n"})
	if r := do(t, d.Client(), d.url(false, "/api/v1/sessions"), request{method: "POST", body: `{"id":"s"}`}); r.status != s201 {
		t.Fatalf("create = %d %s", r.status, r.body)
	}
	before := len(d.Stderr())
	client := &http.Client{Transport: d.Client().Transport}
	for i := range 5000 {
		// An unknown session answers at once: the request is parsed, its
		// header logged, and refused with 404.
		r := do(t, client, d.url(false, "/api/v1/sessions/nope/events"), request{header: []string{"Last-Event-ID", "not-a-number-" + strconv.Itoa(i)}})
		if r.status != http.StatusNotFound {
			t.Fatalf("request %d = %d %s", i, r.status, r.body)
		}
	}
	log := d.Stderr()[before:]
	const bound = 64 << 10
	if len(log) > bound {
		t.Errorf("5,000 malformed Last-Event-ID requests logged %d bytes, want at most %d", len(log), bound)
	}
	if !strings.Contains(log, "ignoring malformed Last-Event-ID") || !strings.Contains(log, "peer_uid=0") {
		t.Errorf("the malformed header is not logged at debug with the peer:\n%.2000s", log)
	}
	if !strings.Contains(log, "suppressed=") {
		t.Errorf("the limiter does not say how many lines it left out:\n%.2000s", log)
	}
	// A stream opening and closing is logged at debug too, with the peer.
	s := openSSE(t, d.Client(), d.url(false, "/api/v1/sessions/s/events"))
	s.next(t)
	s.close()
	d.WaitStderr(t, "stream closed", wait)
	if !strings.Contains(d.Stderr(), "msg=\"stream opened\" path=/api/v1/sessions/s/events transport=sse session=s peer_uid=0") {
		t.Errorf("no stream opened line naming the peer:\n%s", d.Stderr()[len(d.Stderr())-2000:])
	}
}

package ipc_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// presenceServer is the router with the daemon's access policy on a Unix
// socket (peer credentials read at accept) and on loopback TCP (keys).
type presenceServer struct {
	hub    *hub.Hub
	h      *ipc.Handler
	socket string
	tcp    string // host:port
	keys   map[string]string
	unix   *http.Client
}

func newPresenceServer(t *testing.T) *presenceServer {
	t.Helper()
	hb, err := hub.New(hub.Options{AutoCreate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ring := &access.Keyring{}
	keys := map[string]string{}
	for name, sc := range map[string]access.Scope{"alice": access.Read, "bob": access.Read, "boss": access.Admin} {
		k, err := ring.Add(name, []access.Scope{sc})
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = k
	}
	a := &ipc.Auth{Keys: ring, DaemonUID: uint32(os.Geteuid()), PeerScopes: access.DefaultPeerScopes()}
	h := ipc.New(ipc.Options{Hub: hb, Logger: slog.New(slog.DiscardHandler), Settings: ipc.Settings{Authenticate: a.Authenticate}})
	dir := t.TempDir()
	ps := &presenceServer{hub: hb, h: h, socket: filepath.Join(dir, "lb.sock"), keys: keys}
	ul, err := net.Listen("unix", ps.socket)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps.tcp = tl.Addr().String()
	srv := &http.Server{Handler: h, ConnContext: ipc.ConnContext, ReadHeaderTimeout: wait}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ul) }()
	go func() { served <- srv.Serve(tl) }()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", ps.socket)
	}}
	ps.unix = &http.Client{Transport: tr}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		h.Drain()
		hb.EndStreams(bus.EndShutdown)
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := h.Wait(ctx); err != nil {
			t.Errorf("streams still running: %v", err)
		}
		for range 2 {
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve = %v", err)
			}
		}
		tr.CloseIdleConnections()
		hb.Close()
	})
	return ps
}

// get fetches path over the socket (key "" for none) or over TCP with a
// key, and decodes a 200 into v. It returns the status and body.
func (ps *presenceServer) get(t *testing.T, tcp bool, key, path string, v any) (int, string) {
	t.Helper()
	base, c := "http://localbus", ps.unix
	if tcp {
		base, c = "http://"+ps.tcp, http.DefaultClient
	}
	req, err := http.NewRequestWithContext(testCtx(t), "GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+ps.keys[key])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

// openSSE opens an SSE stream and waits for its stream:ready.
func (ps *presenceServer) openSSE(t *testing.T, tcp bool, key, path string) io.Closer {
	t.Helper()
	base, c := "http://localbus", ps.unix
	if tcp {
		base, c = "http://"+ps.tcp, &http.Client{Transport: &http.Transport{}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+ps.keys[key])
	}
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET %s = %d", path, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: "+bus.TypeReady) {
			break
		}
	}
	closer := closerFunc(func() error { cancel(); return resp.Body.Close() })
	t.Cleanup(func() { closer.Close() })
	return closer
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func subscribersOf(t *testing.T, ps *presenceServer, path string) []wire.Subscriber {
	t.Helper()
	var l wire.SubscriberList
	if st, body := ps.get(t, false, "", path, &l); st != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, st, body)
	}
	return l.Subscribers
}

// waitSubscribers waits until path lists n streams and returns them.
func waitSubscribers(t *testing.T, ps *presenceServer, path string, n int) []wire.Subscriber {
	t.Helper()
	var got []wire.Subscriber
	bustest.Eventually(t, wait, "subscribers listed", func() bool {
		got = subscribersOf(t, ps, path)
		return len(got) == n
	})
	return got
}

func TestSubscribersAppearAndDisappearWithStreams(t *testing.T) {
	t.Parallel()
	ps := newPresenceServer(t)
	if _, err := ps.hub.Create(bustest.SessionID("a"), 0); err != nil {
		t.Fatal(err)
	}
	if got := subscribersOf(t, ps, wire.SessionSubscribersPath("a")); len(got) != 0 {
		t.Fatalf("no stream yet: %v", got)
	}
	sse := ps.openSSE(t, false, "", wire.SessionEventsPath("a")+"?types=build:*")
	ws, _, err := websocket.Dial(testCtx(t), "ws://localbus"+wire.SessionWSPath("a"), &websocket.DialOptions{HTTPClient: ps.unix})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ipctest.ReadEnvelope(testCtx(t), ws); err != nil {
		t.Fatal(err)
	}
	fam := ps.openSSE(t, false, "", wire.FamilyEventsPath("build"))
	glob := ps.openSSE(t, false, "", wire.PathEvents)
	tcp := ps.openSSE(t, true, "alice", wire.SessionEventsPath("a"))

	sess := waitSubscribers(t, ps, wire.SessionSubscribersPath("a"), 3)
	if sess[0].Transport != "sse" || sess[1].Transport != "ws" || sess[2].Transport != "sse" {
		t.Errorf("transports %s %s %s, want sse ws sse (oldest first)", sess[0].Transport, sess[1].Transport, sess[2].Transport)
	}
	if len(sess[0].Types) != 1 || sess[0].Types[0] != "build:*" || sess[1].Types != nil {
		t.Errorf("types %v and %v, want [build:*] and null", sess[0].Types, sess[1].Types)
	}
	me := uint32(os.Geteuid())
	if p := sess[0].Peer; p == nil || !p.Unix || p.UID != me || p.PID != int32(os.Getpid()) || p.Comm == "" {
		t.Errorf("socket peer %+v, want uid %d, pid %d and a comm", p, me, os.Getpid())
	}
	if p := sess[2].Peer; p == nil || p.Unix || p.Key != "alice" || !strings.HasPrefix(p.Addr, "127.0.0.1:") {
		t.Errorf("TCP peer %+v, want addr 127.0.0.1:… and key alice", p)
	}
	if sess[0].Consumer != nil || sess[0].Since.IsZero() || time.Since(sess[0].Since) > time.Minute {
		t.Errorf("entry %+v: want no consumer and since a moment ago", sess[0])
	}
	ids := map[string]bool{}
	for _, s := range sess {
		ids[s.ID] = true
	}
	if len(ids) != 3 {
		t.Errorf("stream ids not unique: %v", ids)
	}

	all := waitSubscribers(t, ps, wire.PathSubscribers, 5)
	var buses []wire.SubscriberBus
	for _, s := range all {
		if s.Bus == nil {
			t.Fatalf("entry %+v of /api/v1/subscribers has no bus", s)
		}
		buses = append(buses, *s.Bus)
	}
	want := []wire.SubscriberBus{{Session: "a"}, {Session: "a"}, {Family: "build"}, {Global: true}, {Session: "a"}}
	for i := range want {
		if buses[i] != want[i] {
			t.Errorf("buses %v, want %v", buses, want)
			break
		}
	}
	// The raw shapes: bus objects and the peers' fields as SPEC §6 names them.
	_, body := ps.get(t, false, "", wire.PathSubscribers, nil)
	for _, frag := range []string{`"bus":{"family":"build"}`, `"bus":{"global":true}`, `"bus":{"session":"a"}`, `"peer":{"uid":`, `"comm":`, `"key":"alice"`, `"consumer":null`, `"types":null`} {
		if !strings.Contains(body, frag) {
			t.Errorf("/api/v1/subscribers lacks %s: %s", frag, body)
		}
	}
	if strings.Contains(body, ps.keys["alice"]) {
		t.Errorf("the list shows a key itself: %s", body)
	}

	for _, c := range []io.Closer{sse, fam, glob, tcp} {
		c.Close()
	}
	ws.Close(websocket.StatusNormalClosure, "")
	waitSubscribers(t, ps, wire.PathSubscribers, 0)
	waitSubscribers(t, ps, wire.SessionSubscribersPath("a"), 0)
}

func TestSubscribersCountWhatTheWriterDelivered(t *testing.T) {
	t.Parallel()
	ps := newPresenceServer(t)
	if _, err := ps.hub.Create(bustest.SessionID("a"), 0); err != nil {
		t.Fatal(err)
	}
	ps.openSSE(t, false, "", wire.SessionEventsPath("a")+"?types=x:keep")
	for i := range 5 {
		typ := "x:keep"
		if i == 4 {
			typ = "x:drop"
		}
		if _, _, err := ps.hub.Publish(bustest.SessionID("a"), []bus.Event{{Type: bustest.Type(typ), Data: json.RawMessage(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []wire.Subscriber
	bustest.Eventually(t, wait, "4 delivered", func() bool {
		got = subscribersOf(t, ps, wire.SessionSubscribersPath("a"))
		return len(got) == 1 && got[0].Delivered == 4
	})
	if got[0].LastDeliveredID != 4 || got[0].Queued != 0 || got[0].Slow {
		t.Errorf("entry %+v, want lastDeliveredId 4, nothing queued, not slow", got[0])
	}
}

func TestSubscribersShowAStreamThatDoesNotReadAsSlow(t *testing.T) {
	t.Parallel()
	ps := newPresenceServer(t)
	if _, err := ps.hub.Create(bustest.SessionID("a"), 0); err != nil {
		t.Fatal(err)
	}
	// A client that opens a stream and never reads: the socket's buffers
	// fill, then the queue.
	conn, err := net.Dial("unix", ps.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET "+wire.SessionEventsPath("a")+"?maxQueued=2048 HTTP/1.1\r\nHost: localbus\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitSubscribers(t, ps, wire.SessionSubscribersPath("a"), 1)
	payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 16<<10) + `"}`)
	var got []wire.Subscriber
	bustest.Eventually(t, wait, "the stream listed as slow", func() bool {
		if _, _, err := ps.hub.Publish(bustest.SessionID("a"), []bus.Event{{Type: bustest.Type("x:big"), Data: payload}}); err != nil {
			t.Fatal(err)
		}
		got = subscribersOf(t, ps, wire.SessionSubscribersPath("a"))
		return len(got) == 1 && got[0].Slow
	})
	if got[0].Queued == 0 || got[0].QueuedBytes == 0 {
		t.Errorf("slow entry %+v, want frames and bytes queued", got[0])
	}
}

func TestSubscribersMaskPeersOfOtherKeys(t *testing.T) {
	t.Parallel()
	ps := newPresenceServer(t)
	if _, err := ps.hub.Create(bustest.SessionID("a"), 0); err != nil {
		t.Fatal(err)
	}
	ps.openSSE(t, true, "alice", wire.SessionEventsPath("a"))
	ps.openSSE(t, true, "bob", wire.SessionEventsPath("a"))
	waitSubscribers(t, ps, wire.SessionSubscribersPath("a"), 2)
	for _, tt := range []struct {
		key        string
		alice, bob bool // whose peer the key sees
	}{{"alice", true, false}, {"bob", false, true}, {"boss", true, true}} {
		var l wire.SubscriberList
		if st, body := ps.get(t, true, tt.key, wire.SessionSubscribersPath("a"), &l); st != http.StatusOK || len(l.Subscribers) != 2 {
			t.Fatalf("%s: GET = %d %s", tt.key, st, body)
		}
		if got := l.Subscribers[0].Peer != nil; got != tt.alice {
			t.Errorf("%s sees alice's peer: %v, want %v", tt.key, got, tt.alice)
		}
		if got := l.Subscribers[1].Peer != nil; got != tt.bob {
			t.Errorf("%s sees bob's peer: %v, want %v", tt.key, got, tt.bob)
		}
		if l.Subscribers[0].Delivered != 0 || l.Subscribers[0].Transport != "sse" {
			t.Errorf("%s: the masked entry loses its other fields: %+v", tt.key, l.Subscribers[0])
		}
	}
}

func TestSubscribersRefusals(t *testing.T) {
	t.Parallel()
	ps := newPresenceServer(t)
	if _, err := ps.hub.Create(bustest.SessionID("a"), 0); err != nil {
		t.Fatal(err)
	}
	ps.openSSE(t, false, "", wire.SessionEventsPath("a"))
	for _, tt := range []struct {
		key, path string
		status    int
		code      string
	}{
		{"alice", wire.PathSubscribers, http.StatusForbidden, wire.CodeForbidden},
		{"", wire.PathSubscribers, http.StatusUnauthorized, wire.CodeUnauthorized},
		{"", wire.SessionSubscribersPath("a"), http.StatusUnauthorized, wire.CodeUnauthorized},
		{"alice", wire.SessionSubscribersPath("nope"), http.StatusNotFound, wire.CodeNotFound},
		{"alice", wire.SessionSubscribersPath("bad id!"), http.StatusBadRequest, wire.CodeInvalidSession},
	} {
		st, body := ps.get(t, true, tt.key, tt.path, nil)
		var eb wire.ErrorBody
		if err := json.Unmarshal([]byte(body), &eb); st != tt.status || err != nil || eb.Error.Code != tt.code {
			t.Errorf("key %q GET %s = %d %s, want %d %s", tt.key, tt.path, st, body, tt.status, tt.code)
		}
	}
	// The bus is unaffected: the stream is still there, the session too.
	if got := subscribersOf(t, ps, wire.SessionSubscribersPath("a")); len(got) != 1 {
		t.Errorf("after the refusals: %d streams, want 1", len(got))
	}
	if _, ok := ps.hub.Session("nope"); ok {
		t.Errorf("a refused lookup created session nope")
	}
}

// TestSubscribersMaskPeersOfAnotherUID runs a real second user's curl
// against the socket: it sees its own stream's peer and not root's.
func TestSubscribersMaskPeersOfAnotherUID(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process as a second uid")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("needs curl")
	}
	ps := newPresenceServer(t)
	if _, err := ps.hub.Create(bustest.SessionID("a"), 0); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(ps.socket); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(ps.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	as := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, curl, append([]string{"-sS", "--unix-socket", ps.socket}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		cmd.Dir = "/"
		return cmd
	}
	ps.openSSE(t, false, "", wire.SessionEventsPath("a"))
	ctx, cancel := context.WithCancel(testCtx(t))
	stream := as(ctx, "-N", "http://localbus"+wire.SessionEventsPath("a"))
	if err := stream.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() { cancel(); _ = stream.Wait() }()
	all := waitSubscribers(t, ps, wire.SessionSubscribersPath("a"), 2)
	if p := all[1].Peer; p == nil || p.UID != nobody || p.GID != nobody || p.PID != int32(stream.Process.Pid) || p.Comm != "curl" {
		t.Errorf("root sees the second stream's peer as %+v, want uid/gid %d, pid %d, comm curl", p, nobody, stream.Process.Pid)
	}
	out, err := as(testCtx(t), "http://localbus"+wire.SessionSubscribersPath("a")).Output()
	if err != nil {
		t.Fatalf("curl as uid %d: %v", nobody, err)
	}
	var l wire.SubscriberList
	if err := json.Unmarshal(out, &l); err != nil || len(l.Subscribers) != 2 {
		t.Fatalf("uid %d lists %s (%v)", nobody, out, err)
	}
	if l.Subscribers[0].Peer != nil {
		t.Errorf("uid %d sees root's peer: %s", nobody, out)
	}
	if p := l.Subscribers[1].Peer; p == nil || p.UID != nobody {
		t.Errorf("uid %d does not see its own stream's peer: %s", nobody, out)
	}
	out, _ = as(testCtx(t), "-o", "/dev/null", "-w", "%{http_code}", "http://localbus"+wire.PathSubscribers).Output()
	if string(out) != "403" {
		t.Errorf("uid %d GET /api/v1/subscribers = %s, want 403", nobody, out)
	}
}

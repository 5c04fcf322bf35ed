package ipc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/wire"
)

// These tests drive Auth and the route table in process: a request's
// transport and peer are put in its context as ConnContext would, so a peer
// of any uid can be tested without a second user. The e2e package runs the
// same matrix against the built daemon with a real second uid.

// testDaemonUID is the daemon's uid in these tests: not root, so "the
// daemon's own uid gets admin" is tested apart from "root gets admin".
const testDaemonUID = 1000

// authKeys are the keys of authFixture, by role.
type authKeys struct {
	read, family, publish, admin string
	// wrong is shaped like a key but in no keyring.
	wrong string
}

// every returns every key value, for leak checks.
func (k authKeys) every() []string { return []string{k.read, k.family, k.publish, k.admin, k.wrong} }

// newAuthKeys makes a keyring with one key per role: read; read:build and
// publish:build ("family"); publish; admin.
func newAuthKeys(t *testing.T) (*access.Keyring, authKeys) {
	t.Helper()
	ring := &access.Keyring{}
	add := func(name string, scopes ...access.Scope) string {
		k, err := ring.Add(name, scopes)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	var k authKeys
	k.read = add("reader", access.Read)
	k.family = add("builder", "read:build", "publish:build")
	k.publish = add("publisher", access.Publish)
	k.admin = add("root-key", access.Admin)
	var err error
	if k.wrong, err = access.Generate(); err != nil {
		t.Fatal(err)
	}
	return ring, k
}

// via says how a request arrives.
type via struct {
	unix bool
	// peer is the Unix socket peer; nil with unix means its credentials
	// could not be read.
	peer *access.Peer
}

var (
	viaTCP    = via{}
	viaRoot   = via{unix: true, peer: &access.Peer{UID: 0, GID: 0, PID: 4001}}
	viaOwner  = via{unix: true, peer: &access.Peer{UID: testDaemonUID, GID: testDaemonUID, PID: 4002}}
	viaOther  = via{unix: true, peer: &access.Peer{UID: 65534, GID: 65534, PID: 4003}}
	viaNoCred = via{unix: true}
)

// withConn returns r with the connection information ConnContext would
// have recorded.
func (v via) withConn(r *http.Request) *http.Request {
	ci := &connInfo{}
	if v.unix {
		ci.unix = true
		ci.peer = v.peer
		if v.peer == nil {
			ci.peerErr = access.ErrNotUnix
		}
		r.Host = "localbus"
	} else {
		r.Host = "127.0.0.1:8001"
		r.RemoteAddr = "127.0.0.1:50000"
	}
	return r.WithContext(context.WithValue(r.Context(), connKey{}, ci))
}

// upgradeHeaders are those of a real WebSocket upgrade request.
func upgradeHeaders(h http.Header) {
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", "websocket")
	h.Set("Sec-WebSocket-Version", "13")
	h.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
}

func TestAuthenticateByTransportAndCredentials(t *testing.T) {
	ring, k := newAuthKeys(t)
	base := Auth{
		Keys: ring, DaemonUID: testDaemonUID, PeerScopes: access.DefaultPeerScopes(),
		AllowedOrigins: []string{"http://app.example:3000"}, AllowedHosts: []string{"bus.example"},
	}
	keyMode := base
	keyMode.RequireKeyOnUnix = true
	readOnlyPeers := base
	readOnlyPeers.PeerScopes = access.NewScopes(access.Read)

	tests := []struct {
		name   string
		auth   *Auth
		via    via
		method string // default GET
		target string // default /api/v1/sessions
		hdr    []string
		ws     bool // send the headers of a real upgrade

		wantStatus int    // 0: Authenticate succeeds
		wantCode   string // the error code, when it fails
		wantAuth   bool
		wantScopes string
		wantKey    string
	}{
		{name: "tcp without credentials", via: viaTCP},
		{name: "tcp admin key", via: viaTCP, hdr: []string{"Authorization", "Bearer " + k.admin}, wantAuth: true, wantScopes: "admin", wantKey: "root-key"},
		{name: "tcp scheme in any case", via: viaTCP, hdr: []string{"Authorization", "bEARER " + k.read}, wantAuth: true, wantScopes: "read", wantKey: "reader"},
		{name: "tcp wrong key", via: viaTCP, hdr: []string{"Authorization", "Bearer " + k.wrong}, wantStatus: 401, wantCode: "invalid_credentials"},
		{name: "tcp basic auth", via: viaTCP, hdr: []string{"Authorization", "Basic dXNlcjpwYXNz"}, wantStatus: 401, wantCode: "invalid_credentials"},
		{name: "tcp bare key", via: viaTCP, hdr: []string{"Authorization", k.admin}, wantStatus: 401, wantCode: "invalid_credentials"},
		{name: "tcp two authorization headers", via: viaTCP, hdr: []string{"Authorization", "Bearer " + k.read, "Authorization", "Bearer " + k.admin}, wantStatus: 401, wantCode: "invalid_credentials"},
		{name: "tcp empty bearer", via: viaTCP, hdr: []string{"Authorization", "Bearer "}, wantStatus: 401, wantCode: "invalid_credentials"},
		{name: "tcp subprotocol key on an upgrade", via: viaTCP, ws: true, target: "/api/v1/sessions/s1/ws",
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.read + ", localbus-key"}, wantAuth: true, wantScopes: "read", wantKey: "reader"},
		{name: "tcp subprotocol key on a plain request", via: viaTCP,
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.admin + ", localbus-key"}},
		{name: "tcp subprotocol key on a POST with upgrade headers", via: viaTCP, ws: true, method: "POST", target: "/api/v1/sessions",
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.admin + ", localbus-key"}},
		{name: "tcp subprotocol key on an upgrade of a REST route", via: viaTCP, ws: true,
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.admin + ", localbus-key"}},
		{name: "tcp subprotocol key on an upgrade of /metrics", via: viaTCP, ws: true, target: "/metrics",
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.admin + ", localbus-key"}},
		{name: "tcp subprotocol key on an upgrade of an SSE route", via: viaTCP, ws: true, target: "/api/v1/sessions/s1/events",
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.admin + ", localbus-key"}},
		{name: "tcp subprotocol key on an upgrade of the global ws route", via: viaTCP, ws: true, target: "/api/v1/events/ws",
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.admin + ", localbus-key"}, wantAuth: true, wantScopes: "admin", wantKey: "root-key"},
		{name: "tcp subprotocol key on an upgrade of a family ws route", via: viaTCP, ws: true, target: "/api/v1/families/build/ws",
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.family + ", localbus-key"}, wantAuth: true, wantScopes: "read:build,publish:build", wantKey: "builder"},
		{name: "tcp subprotocol key without localbus-key offered", via: viaTCP, ws: true, target: "/api/v1/sessions/s1/ws",
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.admin}},
		{name: "tcp wrong subprotocol key", via: viaTCP, ws: true, target: "/api/v1/sessions/s1/ws",
			hdr: []string{"Sec-WebSocket-Protocol", "localbus-key." + k.wrong + ", localbus-key"}, wantStatus: 401, wantCode: "invalid_credentials"},
		{name: "tcp bearer wins over subprotocol", via: viaTCP, ws: true, target: "/api/v1/sessions/s1/ws",
			hdr: []string{"Authorization", "Bearer " + k.read, "Sec-WebSocket-Protocol", "localbus-key." + k.admin + ", localbus-key"}, wantAuth: true, wantScopes: "read", wantKey: "reader"},
		{name: "tcp key in the query", via: viaTCP, target: "/api/v1/sessions?access_token=" + k.admin, wantStatus: 401, wantCode: "credentials_in_query"},
		{name: "tcp key in the query beside a header", via: viaTCP, target: "/api/v1/sessions?API-Key=x", hdr: []string{"Authorization", "Bearer " + k.admin}, wantStatus: 401, wantCode: "credentials_in_query"},
		{name: "tcp foreign host", via: viaTCP, hdr: []string{"Host", "evil.example"}, wantStatus: 421, wantCode: "host_not_allowed"},
		{name: "tcp allowed host", via: viaTCP, hdr: []string{"Host", "bus.example:8001", "Authorization", "Bearer " + k.read}, wantAuth: true, wantScopes: "read", wantKey: "reader"},
		{name: "tcp localhost host", via: viaTCP, hdr: []string{"Host", "localhost:8001"}},
		{name: "tcp same-host origin", via: viaTCP, hdr: []string{"Origin", "http://127.0.0.1:8001"}},
		{name: "tcp allowed origin", via: viaTCP, hdr: []string{"Origin", "http://app.example:3000"}},
		{name: "tcp foreign origin", via: viaTCP, hdr: []string{"Origin", "http://evil.example", "Authorization", "Bearer " + k.admin}, wantStatus: 403, wantCode: "origin_not_allowed"},
		{name: "tcp origin null", via: viaTCP, hdr: []string{"Origin", "null"}, wantStatus: 403, wantCode: "origin_not_allowed"},
		{name: "tcp allowed origin on another port", via: viaTCP, hdr: []string{"Origin", "http://app.example:3001"}, wantStatus: 403, wantCode: "origin_not_allowed"},

		{name: "unix root", via: viaRoot, wantAuth: true, wantScopes: "admin"},
		{name: "unix daemon's uid", via: viaOwner, wantAuth: true, wantScopes: "admin"},
		{name: "unix other uid", via: viaOther, wantAuth: true, wantScopes: "read,publish"},
		{name: "unix other uid, configured scopes", auth: &readOnlyPeers, via: viaOther, wantAuth: true, wantScopes: "read"},
		{name: "unix other uid adds a key's scopes", via: viaOther, hdr: []string{"Authorization", "Bearer " + k.family},
			wantAuth: true, wantScopes: "read,read:build,publish,publish:build", wantKey: "builder"},
		{name: "unix other uid with a wrong key", via: viaOther, hdr: []string{"Authorization", "Bearer " + k.wrong}, wantStatus: 401, wantCode: "invalid_credentials"},
		{name: "unix other uid, key in the query", via: viaOther, target: "/api/v1/sessions?token=abc", wantStatus: 401, wantCode: "credentials_in_query"},
		{name: "unix root with a wrong key", via: viaRoot, hdr: []string{"Authorization", "Bearer " + k.wrong}, wantStatus: 401, wantCode: "invalid_credentials"},
		{name: "unix unreadable peer credentials", via: viaNoCred},
		{name: "unix host and origin are not checked", via: viaOther, hdr: []string{"Host", "evil.example", "Origin", "http://evil.example"}, wantAuth: true, wantScopes: "read,publish"},
		{name: "unix key mode, root without a key", auth: &keyMode, via: viaRoot},
		{name: "unix key mode, root with a read key", auth: &keyMode, via: viaRoot, hdr: []string{"Authorization", "Bearer " + k.read}, wantAuth: true, wantScopes: "read", wantKey: "reader"},
		{name: "unix key mode, other uid with the admin key", auth: &keyMode, via: viaOther, hdr: []string{"Authorization", "Bearer " + k.admin}, wantAuth: true, wantScopes: "admin", wantKey: "root-key"},
		{name: "no keyring refuses every key", auth: &Auth{DaemonUID: testDaemonUID}, via: viaTCP, hdr: []string{"Authorization", "Bearer " + k.admin}, wantStatus: 401, wantCode: "invalid_credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.auth
			if a == nil {
				a = &base
			}
			method, target := tt.method, tt.target
			if method == "" {
				method = http.MethodGet
			}
			if target == "" {
				target = "/api/v1/sessions"
			}
			r := tt.via.withConn(httptest.NewRequest(method, target, nil))
			if tt.ws {
				upgradeHeaders(r.Header)
			}
			for i := 0; i+1 < len(tt.hdr); i += 2 {
				if tt.hdr[i] == "Host" {
					r.Host = tt.hdr[i+1]
					continue
				}
				r.Header.Add(tt.hdr[i], tt.hdr[i+1])
			}
			c, err := a.Authenticate(r)
			if tt.wantStatus != 0 {
				e := asError(err)
				if err == nil || e.Status != tt.wantStatus || e.Code != tt.wantCode {
					t.Fatalf("Authenticate = %+v, %v; want %d %s", c, err, tt.wantStatus, tt.wantCode)
				}
				// A refusal of a header names the header, its value and
				// the setting that would admit it.
				names := map[string][]string{
					"host_not_allowed":   {"the Host header ", "allowed_hosts"},
					"origin_not_allowed": {"the Origin header ", "allowed_origins"},
				}[tt.wantCode]
				for _, want := range names {
					if !strings.Contains(e.Message, want) {
						t.Errorf("message %q does not say %q", e.Message, want)
					}
				}
				for _, secret := range k.every() {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("the error quotes a key: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Authenticate: %v, want success", err)
			}
			if c.Authenticated != tt.wantAuth || c.Scopes.String() != tt.wantScopes || c.KeyName != tt.wantKey {
				t.Errorf("Authenticate = authenticated %v, scopes %q, key %q; want %v, %q, %q",
					c.Authenticated, c.Scopes, c.KeyName, tt.wantAuth, tt.wantScopes, tt.wantKey)
			}
			if tt.via.unix && (c.Peer == nil) != (tt.via.peer == nil) {
				t.Errorf("Caller.Peer = %v, want %v", c.Peer, tt.via.peer)
			}
		})
	}
}

// routeFixture is a Handler with the Auth of the daemon's defaults, a
// session s1 and a log buffer.
type routeFixture struct {
	h    *Handler
	hub  *hub.Hub
	keys authKeys
	log  *authLogBuffer
	// lastTicketReply is the body of the last ticket the fixture got.
	lastTicketReply string
}

// authLogBuffer is a bytes.Buffer safe for the handler's concurrent logging.
type authLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *authLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *authLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newRouteFixture makes the fixture; mod, if not nil, changes the Auth and
// opts the router's options before they are used.
func newRouteFixture(t *testing.T, mod func(*Auth), opts ...func(*Options)) *routeFixture {
	t.Helper()
	ring, k := newAuthKeys(t)
	hb, err := hub.New(hub.Options{AutoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	a := &Auth{Keys: ring, DaemonUID: testDaemonUID, PeerScopes: access.DefaultPeerScopes()}
	if mod != nil {
		mod(a)
	}
	f := &routeFixture{hub: hb, keys: k, log: &authLogBuffer{}}
	o := Options{
		Hub:      hb,
		Reload:   func(context.Context) ([]string, error) { return nil, nil },
		Logger:   slog.New(slog.NewTextHandler(f.log, nil)),
		Settings: Settings{Authenticate: a.Authenticate},
	}
	for _, opt := range opts {
		opt(&o)
	}
	f.h = New(o)
	t.Cleanup(func() {
		f.h.Drain()
		hb.EndStreams(bus.EndShutdown)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.h.Wait(ctx); err != nil {
			t.Errorf("streams still open: %v", err)
		}
		hb.Close()
	})
	if _, err := hb.Create(bustest.SessionID("s1"), 0); err != nil {
		t.Fatal(err)
	}
	return f
}

// do serves one request in process and returns the recorded reply. A
// stream that is allowed starts and ends at once: the request's context is
// already cancelled, so the SSE writer returns after its headers.
func (f *routeFixture) do(t *testing.T, v via, method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	var r *http.Request
	if rd != nil {
		r = httptest.NewRequest(method, target, rd)
		r.Header.Set("Content-Type", "application/json")
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if http.CanonicalHeaderKey(hdr[i]) == "Content-Type" {
			r.Header.Set(hdr[i], hdr[i+1])
			continue
		}
		r.Header.Add(hdr[i], hdr[i+1])
	}
	r = v.withConn(r)
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	r = r.WithContext(ctx)
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// caller is one column of the route matrix: how a request arrives and
// which key it carries.
type matrixCaller struct {
	name string
	via  via
	key  func(authKeys) string
}

var matrixCallers = []matrixCaller{
	{"none", viaTCP, nil},
	{"wrong", viaTCP, func(k authKeys) string { return k.wrong }},
	{"read", viaTCP, func(k authKeys) string { return k.read }},
	{"family", viaTCP, func(k authKeys) string { return k.family }},
	{"publish", viaTCP, func(k authKeys) string { return k.publish }},
	{"admin", viaTCP, func(k authKeys) string { return k.admin }},
	{"root", viaRoot, nil},
	{"owner", viaOwner, nil},
	{"other", viaOther, nil},
	{"nocred", viaNoCred, nil},
}

// The success statuses of the matrix. A WebSocket route answers a request
// without upgrade headers with 400 websocket_required once the caller is
// authorized, which tells "allowed" from 401/403 without a connection.
const (
	stOK      = http.StatusOK
	stCreated = http.StatusCreated
	stDeleted = http.StatusNoContent
	stWSOK    = http.StatusBadRequest
	st401     = http.StatusUnauthorized
	st403     = http.StatusForbidden
	st404     = http.StatusNotFound
)

func TestEveryRouteEnforcesItsScope(t *testing.T) {
	// One row per route of SPEC §6, in the order of matrixCallers:
	//   none wrong read family publish admin | root owner other nocred
	// "family" holds read:build and publish:build; "other" is a peer of
	// another uid (read, publish); "nocred" a peer whose credentials could
	// not be read.
	matrix := []struct {
		method, pattern, target, body string
		want                          [10]int
	}{
		{"GET", "/api/v1/events", "/api/v1/events", "",
			[10]int{st401, st401, st403, st403, st403, stOK, stOK, stOK, st403, st401}},
		{"GET", "/api/v1/events/ws", "/api/v1/events/ws", "",
			[10]int{st401, st401, st403, st403, st403, stWSOK, stWSOK, stWSOK, st403, st401}},
		{"GET", "/api/v1/families/{family}/events", "/api/v1/families/build/events", "",
			[10]int{st401, st401, stOK, stOK, st403, stOK, stOK, stOK, stOK, st401}},
		{"GET", "/api/v1/families/{family}/ws", "/api/v1/families/build/ws", "",
			[10]int{st401, st401, stWSOK, stWSOK, st403, stWSOK, stWSOK, stWSOK, stWSOK, st401}},
		{"GET", "/api/v1/sessions/{id}/events", "/api/v1/sessions/s1/events", "",
			[10]int{st401, st401, stOK, st403, st403, stOK, stOK, stOK, stOK, st401}},
		{"GET", "/api/v1/sessions/{id}/ws", "/api/v1/sessions/s1/ws", "",
			[10]int{st401, st401, stWSOK, st403, st403, stWSOK, stWSOK, stWSOK, stWSOK, st401}},
		{"POST", "/api/v1/sessions/{id}/events", "/api/v1/sessions/s1/events", `{"type":"build:step","data":1}`,
			[10]int{st401, st401, st403, stOK, stOK, stOK, stOK, stOK, stOK, st401}},
		{"POST", "/api/v1/sessions", "/api/v1/sessions", `{"id":"new-CALLER"}`,
			[10]int{st401, st401, st403, st403, st403, stCreated, stCreated, stCreated, st403, st401}},
		// Any caller with an identity may ask; the ticket's scopes must
		// open the path: family and publish cannot read a session.
		{"POST", "/api/v1/tickets", "/api/v1/tickets", `{"path":"/api/v1/sessions/s1/events"}`,
			[10]int{st401, st401, stOK, st403, st403, stOK, stOK, stOK, stOK, st401}},
		{"GET", "/api/v1/sessions", "/api/v1/sessions", "",
			[10]int{st401, st401, stOK, st403, st403, stOK, stOK, stOK, stOK, st401}},
		{"GET", "/api/v1/sessions/{id}", "/api/v1/sessions/s1", "",
			[10]int{st401, st401, stOK, st403, st403, stOK, stOK, stOK, stOK, st401}},
		{"GET", "/api/v1/sessions/{id}/subscribers", "/api/v1/sessions/s1/subscribers", "",
			[10]int{st401, st401, stOK, st403, st403, stOK, stOK, stOK, stOK, st401}},
		// No consumer in this fixture: an authorized ack or delete gets 404.
		{"GET", "/api/v1/sessions/{id}/consumers", "/api/v1/sessions/s1/consumers", "",
			[10]int{st401, st401, stOK, st403, st403, stOK, stOK, stOK, stOK, st401}},
		{"POST", "/api/v1/sessions/{id}/consumers/{name}/ack", "/api/v1/sessions/s1/consumers/c1/ack", `{"id":0}`,
			[10]int{st401, st401, st404, st403, st403, st404, st404, st404, st404, st401}},
		{"DELETE", "/api/v1/sessions/{id}/consumers/{name}", "/api/v1/sessions/s1/consumers/c1", "",
			[10]int{st401, st401, st403, st403, st403, st404, st404, st404, st403, st401}},
		{"GET", "/api/v1/status", "/api/v1/status", "",
			[10]int{st401, st401, stOK, st403, st403, stOK, stOK, stOK, stOK, st401}},
		{"GET", "/api/v1/subscribers", "/api/v1/subscribers", "",
			[10]int{st401, st401, st403, st403, st403, stOK, stOK, stOK, st403, st401}},
		{"DELETE", "/api/v1/sessions/{id}", "/api/v1/sessions/del-CALLER", "",
			[10]int{st401, st401, st403, st403, st403, stDeleted, stDeleted, stDeleted, st403, st401}},
		{"POST", "/api/v1/reload", "/api/v1/reload", "",
			[10]int{st401, st401, st403, st403, st403, stOK, stOK, stOK, st403, st401}},
		// No bridge in this handler: an authorized caller gets 404 no_upstream.
		{"GET", "/api/v1/upstream", "/api/v1/upstream", "",
			[10]int{st401, st401, st404, st403, st403, st404, st404, st404, st404, st401}},
		{"GET", "/api/v1/caps", "/api/v1/caps", "",
			[10]int{stOK, st401, stOK, stOK, stOK, stOK, stOK, stOK, stOK, stOK}},
		{"GET", "/healthz", "/healthz", "",
			[10]int{stOK, st401, stOK, stOK, stOK, stOK, stOK, stOK, stOK, stOK}},
		{"GET", "/readyz", "/readyz", "",
			[10]int{stOK, st401, stOK, stOK, stOK, stOK, stOK, stOK, stOK, stOK}},
		{"GET", "/metrics", "/metrics", "",
			[10]int{st401, st401, st403, st403, st403, stOK, stOK, stOK, st403, st401}},
	}

	covered := map[string]bool{}
	for _, row := range matrix {
		covered[row.method+" "+row.pattern] = true
	}
	for _, rt := range routes {
		if !covered[rt.method+" "+rt.pattern] {
			t.Errorf("route %s %s has no row in the matrix", rt.method, rt.pattern)
		}
	}

	f := newRouteFixture(t, nil)
	for _, c := range matrixCallers {
		if _, err := f.hub.Create(bustest.SessionID("del-"+c.name), 0); err != nil {
			t.Fatal(err)
		}
	}
	var bodies strings.Builder
	for _, row := range matrix {
		for i, c := range matrixCallers {
			t.Run(row.method+" "+row.target+" as "+c.name, func(t *testing.T) {
				var hdr []string
				if c.key != nil {
					hdr = []string{"Authorization", "Bearer " + c.key(f.keys)}
				}
				target := strings.ReplaceAll(row.target, "CALLER", c.name)
				body := strings.ReplaceAll(row.body, "CALLER", c.name)
				w := f.do(t, c.via, row.method, target, body, hdr...)
				bodies.WriteString(w.Body.String())
				if w.Code != row.want[i] {
					t.Fatalf("%s %s as %s = %d %s, want %d", row.method, target, c.name, w.Code, w.Body, row.want[i])
				}
				if w.Code == stWSOK && !strings.Contains(w.Body.String(), "websocket_required") {
					t.Errorf("WebSocket route as %s = %d %s, want websocket_required once authorized", c.name, w.Code, w.Body)
				}
				if w.Code >= 400 && w.Header().Get("Content-Type") != "application/json" {
					t.Errorf("refusal Content-Type = %q, want application/json", w.Header().Get("Content-Type"))
				}
			})
		}
	}
	assertNoKeys(t, "response bodies", bodies.String(), f.keys)
	assertNoKeys(t, "the log", f.log.String(), f.keys)
}

// assertNoKeys fails if s holds any key of k.
func assertNoKeys(t *testing.T, where, s string, k authKeys) {
	t.Helper()
	for _, secret := range k.every() {
		if strings.Contains(s, secret) {
			t.Errorf("%s hold a key (%.8s…)", where, secret)
		}
	}
}

func TestPublishOfAFamilyTheCallerMayNotPublishStoresNothing(t *testing.T) {
	f := newRouteFixture(t, nil)
	bearer := []string{"Authorization", "Bearer " + f.keys.family}
	s1, _ := f.hub.Session("s1")
	tests := []struct {
		name, body, ctype string
		want              int
	}{
		{"another family", `{"type":"deploy:start"}`, "", st403},
		{"batch with one foreign event last", `[{"type":"build:a"},{"type":"build:b"},{"type":"deploy:c"}]`, "", st403},
		{"batch with one foreign event first", `[{"type":"deploy:c"},{"type":"build:a"}]`, "", st403},
		{"ndjson batch", "{\"type\":\"build:a\"}\n{\"type\":\"deploy:c\"}\n", "application/x-ndjson", st403},
		{"reserved family is a 400 first", `[{"type":"build:a"},{"type":"localbus:x"}]`, "", http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, globalBefore := s1.Bus.LastID(), f.hub.Global().LastID()
			hdr := bearer
			if tt.ctype != "" {
				hdr = append(hdr[:2:2], "Content-Type", tt.ctype)
			}
			w := f.do(t, viaTCP, "POST", "/api/v1/sessions/s1/events", tt.body, hdr...)
			if w.Code != tt.want {
				t.Fatalf("publish = %d %s, want %d", w.Code, w.Body, tt.want)
			}
			if s1.Bus.LastID() != before || f.hub.Global().LastID() != globalBefore {
				t.Errorf("lastId %d → %d, global %d → %d: a refused batch stored events",
					before, s1.Bus.LastID(), globalBefore, f.hub.Global().LastID())
			}
		})
	}
	t.Run("to a session that does not exist creates nothing", func(t *testing.T) {
		w := f.do(t, viaTCP, "POST", "/api/v1/sessions/fresh/events", `{"type":"deploy:x"}`, bearer...)
		if w.Code != st403 {
			t.Fatalf("publish = %d %s, want 403", w.Code, w.Body)
		}
		if _, ok := f.hub.Session("fresh"); ok {
			t.Error("a refused publish auto-created its session")
		}
	})
	t.Run("its own family is published", func(t *testing.T) {
		w := f.do(t, viaTCP, "POST", "/api/v1/sessions/s1/events", `[{"type":"build:a"},{"type":"build:b"}]`, bearer...)
		if w.Code != stOK {
			t.Fatalf("publish = %d %s, want 200", w.Code, w.Body)
		}
	})
}

func TestFamilyRoutesCheckTheCallersFamilies(t *testing.T) {
	f := newRouteFixture(t, nil)
	tests := []struct {
		name   string
		key    func(authKeys) string
		target string
		want   int
	}{
		{"own family", func(k authKeys) string { return k.family }, "/api/v1/families/build/events", stOK},
		{"own family, types within it", func(k authKeys) string { return k.family }, "/api/v1/families/build/events?types=build:step,build:*", stOK},
		{"own family, a type outside it", func(k authKeys) string { return k.family }, "/api/v1/families/build/events?types=build:step,deploy:x", http.StatusBadRequest},
		{"own family, a reserved type", func(k authKeys) string { return k.family }, "/api/v1/families/build/events?types=stream:ready", http.StatusBadRequest},
		{"another family", func(k authKeys) string { return k.family }, "/api/v1/families/deploy/events", st403},
		{"another family over WebSocket", func(k authKeys) string { return k.family }, "/api/v1/families/deploy/ws", st403},
		{"another family named in types of its own", func(k authKeys) string { return k.family }, "/api/v1/families/deploy/events?types=deploy:x", st403},
		{"an invalid family", func(k authKeys) string { return k.family }, "/api/v1/families/Build/events", http.StatusBadRequest},
		{"read reads every family", func(k authKeys) string { return k.read }, "/api/v1/families/deploy/events", stOK},
		{"publish reads none", func(k authKeys) string { return k.publish }, "/api/v1/families/build/events", st403},
		{"a family key cannot filter a session stream into its family", func(k authKeys) string { return k.family }, "/api/v1/sessions/s1/events?types=build:*", st403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := f.do(t, viaTCP, "GET", tt.target, "", "Authorization", "Bearer "+tt.key(f.keys))
			if w.Code != tt.want {
				t.Errorf("GET %s = %d %s, want %d", tt.target, w.Code, w.Body, tt.want)
			}
		})
	}
}

func TestQueryCredentialsAreRefusedOnEveryPath(t *testing.T) {
	f := newRouteFixture(t, nil)
	const secret = "s3cr3t-value-never-logged"
	tests := []struct{ method, target string }{
		{"GET", "/api/v1/sessions?token=" + secret},
		{"GET", "/healthz?access_token=" + secret},
		{"GET", "/api/v1/caps?apiKey=" + secret},
		{"GET", "/api/v1/sessions/s1/events?since=0&Api-Key=" + secret},
		{"GET", "/api/v1/sessions/s1/ws?auth=" + secret},
		{"GET", "/no/such/route?key=" + secret},
		{"PUT", "/api/v1/sessions?password=" + secret},
		{"GET", "//api/v1//sessions?bearer=" + secret},
		{"GET", "/api/v1/sessions?x=1;jwt=" + secret},
		{"GET", "/api/v1/sessions?acc%65ss_token=" + secret},
		{"GET", "/api/v1/sessions?since=" + f.keys.admin},
	}
	for _, tt := range tests {
		for _, v := range []via{viaTCP, viaRoot} {
			w := f.do(t, v, tt.method, tt.target, "", "Authorization", "Bearer "+f.keys.admin)
			if w.Code != st401 || !strings.Contains(w.Body.String(), "credentials_in_query") {
				t.Errorf("%s %s (unix %v) = %d %s, want 401 credentials_in_query", tt.method, tt.target, v.unix, w.Code, w.Body)
			}
			if loc := w.Header().Get("Location"); loc != "" {
				t.Errorf("%s %s answered with Location %q", tt.method, tt.target, loc)
			}
			if strings.Contains(w.Body.String(), secret) {
				t.Errorf("%s %s: the reply quotes the value: %s", tt.method, tt.target, w.Body)
			}
		}
	}
	if strings.Contains(f.log.String(), secret) {
		t.Errorf("the log holds a query credential's value:\n%s", f.log)
	}
	assertNoKeys(t, "the log", f.log.String(), f.keys)
}

func TestRefusalsLogWhoWithoutSecrets(t *testing.T) {
	tests := []struct {
		name string
		do   func(f *routeFixture)
		want []string
	}{
		{"peer without scope", func(f *routeFixture) { f.do(t, viaOther, "GET", "/api/v1/events", "") },
			[]string{"msg=refused", "reason=auth", "status=403", "path=/api/v1/events", "peer_uid=65534", "peer_pid=4003"}},
		{"key without scope", func(f *routeFixture) {
			f.do(t, viaTCP, "GET", "/api/v1/events", "", "Authorization", "Bearer "+f.keys.read)
		}, []string{"msg=refused", "status=403", "key=reader", "remote=127.0.0.1:50000"}},
		{"unknown key", func(f *routeFixture) {
			f.do(t, viaTCP, "GET", "/api/v1/sessions", "", "Authorization", "Bearer "+f.keys.wrong)
		}, []string{"msg=refused", "status=401", "code=invalid_credentials", "remote=127.0.0.1:50000"}},
		{"malformed header", func(f *routeFixture) {
			f.do(t, viaTCP, "GET", "/api/v1/sessions", "", "Authorization", f.keys.admin)
		}, []string{"msg=refused", "status=401", "code=invalid_credentials"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newRouteFixture(t, nil)
			tt.do(f)
			lines := strings.Split(strings.TrimSpace(f.log.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("log has %d lines, want one for the refusal:\n%s", len(lines), f.log)
			}
			for _, w := range tt.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("log line %q lacks %q", lines[0], w)
				}
			}
			assertNoKeys(t, "the log", f.log.String(), f.keys)
		})
	}
}

// tcpServer serves the fixture's handler on loopback TCP with the
// daemon's ConnContext.
func (f *routeFixture) tcpServer(t *testing.T) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(f.h)
	ts.Config.ConnContext = ConnContext
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

func TestWebSocketSubprotocolCarriesTheKeyAndIsSelected(t *testing.T) {
	f := newRouteFixture(t, nil)
	ts := f.tcpServer(t)
	wsURL := "ws" + strings.TrimPrefix(ts.URL, "http") + "/api/v1/sessions/s1/ws"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{
		Subprotocols: []string{access.SubprotocolKeyPrefix + f.keys.read, access.SubprotocolName},
	})
	if err != nil {
		t.Fatalf("dial with the subprotocol key: %v", err)
	}
	defer c.CloseNow()
	if got := c.Subprotocol(); got != wire.Subprotocol {
		t.Errorf("selected subprotocol = %q, want %q", got, wire.Subprotocol)
	}
	if got := resp.Header.Get("Sec-WebSocket-Protocol"); strings.Contains(got, f.keys.read) {
		t.Errorf("the server echoed the key in Sec-WebSocket-Protocol: %q", got)
	}
	_, msg, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var env bus.Envelope
	if err := json.Unmarshal(msg, &env); err != nil || env.Type != "stream:ready" {
		t.Errorf("first frame = %s (%v), want stream:ready", msg, err)
	}
	c.Close(websocket.StatusNormalClosure, "")

	refused := []struct {
		name   string
		protos []string
		want   int
	}{
		{"no key", nil, st401},
		{"wrong key", []string{access.SubprotocolKeyPrefix + f.keys.wrong, access.SubprotocolName}, st401},
		{"a key without scope for the route", []string{access.SubprotocolKeyPrefix + f.keys.publish, access.SubprotocolName}, st403},
	}
	for _, tt := range refused {
		_, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: tt.protos})
		if err == nil || resp == nil || resp.StatusCode != tt.want {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Errorf("%s: dial = %v, status %d; want %d", tt.name, err, status, tt.want)
		}
	}

	// The subprotocol key is no second way to authenticate REST, with or
	// without the headers of an upgrade.
	for _, path := range []string{"/api/v1/sessions", "/metrics"} {
		for _, upgrade := range []bool{false, true} {
			req, err := http.NewRequestWithContext(ctx, "GET", ts.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if upgrade {
				upgradeHeaders(req.Header)
			}
			req.Header.Set("Sec-WebSocket-Protocol", access.SubprotocolKeyPrefix+f.keys.admin+", "+access.SubprotocolName)
			r, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			if r.StatusCode != st401 {
				t.Errorf("GET %s with the subprotocol key (upgrade headers %v) = %d, want 401", path, upgrade, r.StatusCode)
			}
		}
	}
	ts.Client().CloseIdleConnections()
}

func TestOversizedHeadersAreRefusedWithJSON(t *testing.T) {
	f := newRouteFixture(t, nil, func(o *Options) { o.MaxHeaderBytes = 2048 })
	tests := []struct {
		name string
		pad  int
		want int
	}{
		{"small", 100, stOK},
		{"just under", 1700, stOK},
		{"over", 2100, http.StatusRequestHeaderFieldsTooLarge},
		{"far over", 64 << 10, http.StatusRequestHeaderFieldsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := f.do(t, viaRoot, "GET", "/api/v1/sessions", "", "X-Pad", strings.Repeat("a", tt.pad))
			if w.Code != tt.want {
				t.Fatalf("GET with %d bytes of padding = %d %s, want %d", tt.pad, w.Code, w.Body, tt.want)
			}
			if w.Code != stOK && !strings.Contains(w.Body.String(), `"code":"headers_too_large"`) {
				t.Errorf("body = %s, want a JSON headers_too_large error", w.Body)
			}
		})
	}
}

func TestSlowRequestBodyIsCutWith408(t *testing.T) {
	const timeout = 300 * time.Millisecond
	f := newRouteFixture(t, nil, func(o *Options) { o.BodyTimeout = timeout })
	ts := f.tcpServer(t)
	s1, _ := f.hub.Session("s1")

	conn, err := net.DialTimeout("tcp", ts.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	body := `{"type":"build:slow","data":"` + strings.Repeat("x", 64) + `"}`
	fmt.Fprintf(conn, "POST /api/v1/sessions/s1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", f.keys.admin, len(body))

	// Trickle the body a byte at a time, far slower than the timeout
	// allows in all, until the server answers.
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < len(body); i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	began := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	close(stop)
	<-trickled
	if err != nil {
		t.Fatalf("no answer to the slow body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"code":"body_timeout"`) {
		t.Errorf("slow body = %d %s, want 408 body_timeout", resp.StatusCode, b)
	}
	if took := time.Since(began); took > timeout+2*time.Second {
		t.Errorf("the slow body was cut after %v, want about %v", took, timeout)
	}
	if s1.Bus.LastID() != 0 {
		t.Errorf("lastId = %d after a cut body, want 0", s1.Bus.LastID())
	}

	// A body sent at once is not affected.
	req, err := http.NewRequest("POST", ts.URL+"/api/v1/sessions/s1/events", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.keys.admin)
	r, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != stOK {
		t.Errorf("a prompt publish = %d, want 200", r.StatusCode)
	}
	ts.Client().CloseIdleConnections()
}

func TestCapsReportTheKeysFileToAdminOnly(t *testing.T) {
	f := newRouteFixture(t, nil, func(o *Options) { o.KeysFile = "/var/lib/localbus/keys.json" })
	tests := []struct {
		name  string
		via   via
		hdr   []string
		admin bool
	}{
		{"tcp without a key", viaTCP, nil, false},
		{"tcp read key", viaTCP, []string{"Authorization", "Bearer " + f.keys.read}, false},
		{"tcp admin key", viaTCP, []string{"Authorization", "Bearer " + f.keys.admin}, true},
		{"root on the socket", viaRoot, nil, true},
		{"the daemon's user on the socket", viaOwner, nil, true},
		{"another user on the socket", viaOther, nil, false},
		{"another user with an admin key", viaOther, []string{"Authorization", "Bearer " + f.keys.admin}, true},
	}
	for _, tt := range tests {
		w := f.do(t, tt.via, http.MethodGet, "/api/v1/caps", "", tt.hdr...)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: caps = %d %s", tt.name, w.Code, w.Body)
		}
		var caps wire.Caps
		if err := json.Unmarshal(w.Body.Bytes(), &caps); err != nil {
			t.Fatal(err)
		}
		switch {
		case tt.admin && (caps.Admin == nil || caps.Admin.KeysFile != "/var/lib/localbus/keys.json"):
			t.Errorf("%s: caps admin = %+v, want the keys file", tt.name, caps.Admin)
		case !tt.admin && (caps.Admin != nil || strings.Contains(w.Body.String(), "keys.json")):
			t.Errorf("%s: caps = %s, want no admin part", tt.name, w.Body)
		}
	}
}

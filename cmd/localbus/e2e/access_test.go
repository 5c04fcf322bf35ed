package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/access"
)

// routeKind is how a route is called.
type routeKind int

const (
	rest routeKind = iota
	sse            // allowed: 200 and a stream that does not end
	ws             // allowed: 101
)

// column is one kind of caller of the access matrix.
type column struct {
	name string
	tcp  bool
	key  func(keySet) string // nil: no credentials
	// asOther runs the client as otherUID on the socket.
	asOther bool
}

var columns = []column{
	{name: "none", tcp: true},
	{name: "wrong key", tcp: true, key: func(k keySet) string { return k.wrong }},
	{name: "read key", tcp: true, key: func(k keySet) string { return k.read }},
	{name: "family key", tcp: true, key: func(k keySet) string { return k.family }},
	{name: "publish key", tcp: true, key: func(k keySet) string { return k.publish }},
	{name: "admin key", tcp: true, key: func(k keySet) string { return k.admin }},
	{name: "unix owner"},
	{name: "unix other uid", asOther: true},
}

// Statuses of the matrix.
const (
	s200 = http.StatusOK
	s201 = http.StatusCreated
	s204 = http.StatusNoContent
	s101 = http.StatusSwitchingProtocols
	s401 = http.StatusUnauthorized
	s403 = http.StatusForbidden
)

// TestAccessMatrix calls every route of SPEC §6 as every kind of caller of
// the issue: over TCP with no credentials, a wrong key and a key of each
// role ("family" holds read:build and publish:build); on the Unix socket as
// the daemon's owner (root, which runs the daemon here) and as another uid
// (nobody, with curl through setpriv; the socket's group is nogroup, so it
// may connect). It checks each status, that no key shows in any reply or in
// the daemon's log, that refusals are JSON errors, and that the refusals of
// the other uid are logged with its uid and pid.
func TestAccessMatrix(t *testing.T) {
	needRoot(t)
	d := start(t, setup{
		config:             "socket_group = \"65534\"\n",
		tcp:                true,
		otherUIDCanConnect: true,
	})
	root := d.client(false)
	for _, id := range []string{"s1", "del-0", "del-1", "del-2", "del-3", "del-4", "del-5", "del-6", "del-7"} {
		if r := do(t, root, d.url(false, "/api/v1/sessions"), request{method: "POST", body: `{"id":"` + id + `"}`}); r.status != s201 {
			t.Fatalf("create %s = %d %s", id, r.status, r.body)
		}
	}

	//                                        none  wrong read  family publish admin owner other
	matrix := []struct {
		kind routeKind
		req  request
		want [8]int
	}{
		{sse, request{path: "/api/v1/events"}, [8]int{s401, s401, s403, s403, s403, s200, s200, s403}},
		{ws, request{path: "/api/v1/events/ws"}, [8]int{s401, s401, s403, s403, s403, s101, s101, s403}},
		{sse, request{path: "/api/v1/families/build/events"}, [8]int{s401, s401, s200, s200, s403, s200, s200, s200}},
		{ws, request{path: "/api/v1/families/build/ws"}, [8]int{s401, s401, s101, s101, s403, s101, s101, s101}},
		{sse, request{path: "/api/v1/families/deploy/events"}, [8]int{s401, s401, s200, s403, s403, s200, s200, s200}},
		{sse, request{path: "/api/v1/families/build/events?types=deploy:x"}, [8]int{s401, s401, 400, 400, s403, 400, 400, 400}},
		{sse, request{path: "/api/v1/sessions/s1/events"}, [8]int{s401, s401, s200, s403, s403, s200, s200, s200}},
		{ws, request{path: "/api/v1/sessions/s1/ws"}, [8]int{s401, s401, s101, s403, s403, s101, s101, s101}},
		{rest, request{method: "POST", path: "/api/v1/sessions/s1/events", body: `{"type":"build:step","data":{"n":1}}`}, [8]int{s401, s401, s403, s200, s200, s200, s200, s200}},
		{rest, request{method: "POST", path: "/api/v1/sessions/s1/events", body: `{"type":"deploy:start"}`}, [8]int{s401, s401, s403, s403, s200, s200, s200, s200}},
		{rest, request{method: "POST", path: "/api/v1/sessions", body: `{"id":"new-COL"}`}, [8]int{s401, s401, s403, s403, s403, s201, s201, s403}},
		{rest, request{path: "/api/v1/sessions"}, [8]int{s401, s401, s200, s403, s403, s200, s200, s200}},
		{rest, request{path: "/api/v1/sessions/s1"}, [8]int{s401, s401, s200, s403, s403, s200, s200, s200}},
		{rest, request{method: "DELETE", path: "/api/v1/sessions/del-COL"}, [8]int{s401, s401, s403, s403, s403, s204, s204, s403}},
		{sse, request{path: "/api/v1/sessions/s1/events?consumer=c-COL"}, [8]int{s401, s401, s200, s403, s403, s200, s200, s200}},
		{rest, request{path: "/api/v1/sessions/s1/consumers"}, [8]int{s401, s401, s200, s403, s403, s200, s200, s200}},
		{rest, request{method: "POST", path: "/api/v1/sessions/s1/consumers/c-COL/ack", body: `{"id":0}`}, [8]int{s401, s401, 409, s403, s403, 409, 409, 409}},
		{rest, request{method: "DELETE", path: "/api/v1/sessions/s1/consumers/c-COL"}, [8]int{s401, s401, s403, s403, s403, s204, s204, s403}},
		{rest, request{method: "POST", path: "/api/v1/reload"}, [8]int{s401, s401, s403, s403, s403, s200, s200, s403}},
		{rest, request{path: "/api/v1/caps"}, [8]int{s200, s401, s200, s200, s200, s200, s200, s200}},
		{rest, request{path: "/healthz"}, [8]int{s200, s401, s200, s200, s200, s200, s200, s200}},
		{rest, request{path: "/readyz"}, [8]int{s200, s401, s200, s200, s200, s200, s200, s200}},
		{rest, request{path: "/metrics"}, [8]int{s401, s401, s403, s403, s403, s200, s200, s403}},
	}

	var bodies strings.Builder
	for _, row := range matrix {
		for i, col := range columns {
			req := row.req
			req.path = strings.ReplaceAll(req.path, "COL", strconv.Itoa(i))
			req.body = strings.ReplaceAll(req.body, "COL", strconv.Itoa(i))
			req.stream = row.kind != rest
			name := fmt.Sprintf("%s %s as %s", methodOf(req), req.path, col.name)
			t.Run(name, func(t *testing.T) {
				var hdr []string
				if col.key != nil {
					hdr = bearer(col.key(d.keys))
				}
				var r reply
				switch {
				case col.asOther:
					if row.kind == ws {
						hdr = append(hdr, upgradeHeader...)
					}
					req.header = hdr
					r = d.curlAs(t, otherUID, otherUID, req)
				case row.kind == ws:
					r = dialWS(t, d.client(col.tcp), d.url(col.tcp, req.path), hdr)
				default:
					req.header = hdr
					r = do(t, d.client(col.tcp), d.url(col.tcp, req.path), req)
				}
				bodies.WriteString(r.body)
				if r.status != row.want[i] {
					t.Fatalf("%s = %d %s, want %d", name, r.status, r.body, row.want[i])
				}
				if r.status >= 400 {
					checkErrorBody(t, r)
				}
			})
		}
	}

	for _, k := range d.keys.all() {
		if strings.Contains(bodies.String(), k) {
			t.Errorf("a response body holds a key (%.8s…)", k)
		}
	}
	// The other uid's refusals name it; the daemon's log is checked for
	// keys when the test ends.
	log := d.Stderr()
	if !strings.Contains(log, "status=403 code=forbidden peer_uid=65534 peer_pid=") {
		t.Errorf("no refusal of uid 65534 logged with its uid and pid:\n%s", log)
	}
	if !strings.Contains(log, "status=401 code=invalid_credentials remote=127.0.0.1:") {
		t.Errorf("no refusal of a wrong key over TCP logged with its address:\n%s", log)
	}
}

func methodOf(r request) string {
	if r.method == "" {
		return "GET"
	}
	return r.method
}

// checkErrorBody fails unless r's body is {"error":{"code","message"}}.
// Bodies of refused WebSocket dials may be cut short by the client library,
// so those only need to start like one.
func checkErrorBody(t *testing.T, r reply) {
	t.Helper()
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
		if !strings.HasPrefix(r.body, `{"error":{"code":"`) {
			t.Errorf("refusal %d body = %q, want a JSON error", r.status, r.body)
		}
	}
}

func TestPublishOfAForbiddenFamilyStoresNothingOfTheBatch(t *testing.T) {
	d := start(t, setup{tcp: true})
	root := d.client(false)
	tcp := d.client(true)
	pub := func(body string, hdr ...string) reply {
		return do(t, tcp, d.url(true, "/api/v1/sessions/s1/events"), request{method: "POST", body: body, header: append(bearer(d.keys.family), hdr...)})
	}
	if r := pub(`{"type":"build:one"}`); r.status != s200 {
		t.Fatalf("publish of its own family = %d %s", r.status, r.body)
	}
	lastID := func() float64 {
		var info struct {
			LastID float64 `json:"lastId"`
		}
		r := do(t, root, d.url(false, "/api/v1/sessions/s1"), request{})
		if err := json.Unmarshal([]byte(r.body), &info); err != nil {
			t.Fatalf("GET /api/v1/sessions/s1 = %d %s: %v", r.status, r.body, err)
		}
		return info.LastID
	}
	before := lastID()
	for _, body := range []string{
		`[{"type":"build:a"},{"type":"build:b"},{"type":"deploy:c"}]`,
		`[{"type":"deploy:c"},{"type":"build:a"}]`,
		`{"type":"deploy:c"}`,
	} {
		r := pub(body)
		if r.status != s403 || !strings.Contains(r.body, "nothing was published") {
			t.Errorf("publish %s = %d %s, want 403 saying nothing was published", body, r.status, r.body)
		}
	}
	if after := lastID(); after != before {
		t.Errorf("lastId went from %v to %v: a refused batch stored events", before, after)
	}
}

// pyWebSocket is a client localbus did not write: Python's websockets
// connects with the browser's subprotocol list and prints what it got as
// JSON: the selected subprotocol and the first frame's type, or the status
// of a refused handshake.
const pyWebSocket = `
import asyncio, json, sys
import websockets

async def main(uri, key, origin):
    protos = ["localbus-key." + key, "localbus-key"] if key else None
    try:
        async with websockets.connect(uri, subprotocols=protos, origin=origin or None, open_timeout=5) as ws:
            first = json.loads(await asyncio.wait_for(ws.recv(), 5))
            print(json.dumps({"subprotocol": ws.subprotocol, "first": first["type"]}))
    except websockets.exceptions.InvalidStatusCode as e:
        print(json.dumps({"status": e.status_code}))

asyncio.run(main(*sys.argv[1:4]))
`

func TestBrowserSubprotocolKeyWithPythonWebsockets(t *testing.T) {
	needPython(t, true)
	d := start(t, setup{tcp: true, config: "allowed_origins = [\"http://app.example:3000\"]\n"})
	if r := do(t, d.client(false), d.url(false, "/api/v1/sessions"), request{method: "POST", body: `{"id":"s1"}`}); r.status != s201 {
		t.Fatalf("create s1 = %d %s", r.status, r.body)
	}
	uri := "ws://" + d.tcp + "/api/v1/sessions/s1/ws"
	tests := []struct {
		name, key, origin string
		want              map[string]any
	}{
		{"read key", d.keys.read, "", map[string]any{"subprotocol": "localbus-key", "first": "stream:ready"}},
		{"admin key from an allowed origin", d.keys.admin, "http://app.example:3000", map[string]any{"subprotocol": "localbus-key", "first": "stream:ready"}},
		{"same-host origin", d.keys.read, "http://" + d.tcp, map[string]any{"subprotocol": "localbus-key", "first": "stream:ready"}},
		{"no key", "", "", map[string]any{"status": float64(401)}},
		{"wrong key", d.keys.wrong, "", map[string]any{"status": float64(401)}},
		{"key without read", d.keys.publish, "", map[string]any{"status": float64(403)}},
		{"foreign origin", d.keys.admin, "http://evil.example", map[string]any{"status": float64(403)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runAs(t, 0, 0, python, "-c", pyWebSocket, uri, tt.key, tt.origin)
			if code != 0 {
				t.Fatalf("python: exit %d: %s", code, errOut)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("python printed %q: %v", out, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("python websockets got %v, want %v", got, tt.want)
			}
		})
	}

	// The subprotocol key is read only on a real upgrade: it does not
	// authenticate REST, with or without WebSocket-looking headers on a
	// POST.
	proto := []string{"Sec-WebSocket-Protocol", "localbus-key." + d.keys.admin + ", localbus-key"}
	for _, req := range []request{
		{path: "/api/v1/sessions", header: proto},
		{path: "/api/v1/sessions/s1", header: proto},
		{method: "POST", path: "/api/v1/sessions", body: `{"id":"x"}`, header: append(append([]string{}, proto...), upgradeHeader...)},
		{path: "/api/v1/sessions/s1/events", header: proto, stream: true},
	} {
		if r := do(t, d.client(true), d.url(true, req.path), req); r.status != s401 {
			t.Errorf("%s %s with the key in Sec-WebSocket-Protocol = %d %s, want 401", methodOf(req), req.path, r.status, r.body)
		}
	}
}

func TestTCPChecksHostAndOrigin(t *testing.T) {
	d := start(t, setup{tcp: true, config: "allowed_hosts = [\"bus.example\"]\nallowed_origins = [\"http://app.example:3000\"]\n"})
	tcp := d.client(true)
	tests := []struct {
		name   string
		header []string
		want   int
	}{
		{"loopback host", nil, s200},
		{"localhost", []string{"Host", "localhost"}, s200},
		{"allowed host", []string{"Host", "bus.example"}, s200},
		{"foreign host", []string{"Host", "evil.example"}, http.StatusMisdirectedRequest},
		{"same-host origin", []string{"Origin", "http://" + d.tcp}, s200},
		{"allowed origin", []string{"Origin", "http://app.example:3000"}, s200},
		{"foreign origin", []string{"Origin", "http://evil.example"}, s403},
		{"opaque origin", []string{"Origin", "null"}, s403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, tcp, d.url(true, "/api/v1/sessions"), request{header: append(bearer(d.keys.read), tt.header...)})
			if r.status != tt.want {
				t.Errorf("GET /api/v1/sessions with %q = %d %s, want %d", tt.header, r.status, r.body, tt.want)
			}
		})
	}
}

func TestQueryCredentialsAreRefusedAndNeverLogged(t *testing.T) {
	d := start(t, setup{tcp: true})
	const secret = "query-secret-value-42"
	paths := []string{
		"/api/v1/sessions?token=" + secret,
		"/api/v1/sessions/s1/events?since=0&access_token=" + secret,
		"/api/v1/events/ws?API_KEY=" + secret,
		"/healthz?apikey=" + secret,
		"/nowhere?auth=" + secret,
		"/api/v1/sessions?x=1&Bearer=" + secret,
		"/api/v1/sessions?since=" + d.keys.admin,
	}
	for _, p := range paths {
		for _, tcp := range []bool{true, false} {
			r := do(t, d.client(tcp), d.url(tcp, p), request{header: bearer(d.keys.admin)})
			if r.status != s401 || !strings.Contains(r.body, "credentials_in_query") {
				t.Errorf("GET %s (tcp %v) = %d %s, want 401 credentials_in_query", p, tcp, r.status, r.body)
			}
			if strings.Contains(r.body, secret) || strings.Contains(r.body, d.keys.admin) {
				t.Errorf("GET %s: the reply quotes the credential: %s", p, r.body)
			}
		}
	}
	if strings.Contains(d.Stderr(), secret) {
		t.Errorf("the daemon logged a query credential's value:\n%s", d.Stderr())
	}
}

func TestUnixAuthKeyRequiresKeysOnTheSocket(t *testing.T) {
	needRoot(t)
	d := start(t, setup{config: "unix_auth = \"key\"\nsocket_mode = \"0666\"\n", otherUIDCanConnect: true})
	root := d.client(false)
	tests := []struct {
		name   string
		path   string
		header []string
		want   int
	}{
		{"root without a key", "/api/v1/sessions", nil, s401},
		{"root with a read key", "/api/v1/sessions", bearer(d.keys.read), s200},
		{"root with a read key on an admin route", "/metrics", bearer(d.keys.read), s403},
		{"root with a wrong key", "/api/v1/sessions", bearer(d.keys.wrong), s401},
		{"health needs no key", "/healthz", nil, s200},
	}
	for _, tt := range tests {
		if r := do(t, root, d.url(false, tt.path), request{header: tt.header}); r.status != tt.want {
			t.Errorf("%s: GET %s = %d %s, want %d", tt.name, tt.path, r.status, r.body, tt.want)
		}
	}
	if r := d.curlAs(t, otherUID, otherUID, request{path: "/api/v1/sessions"}); r.status != s401 {
		t.Errorf("uid %d without a key = %d %s, want 401", otherUID, r.status, r.body)
	}
	if r := d.curlAs(t, otherUID, otherUID, request{path: "/metrics", header: bearer(d.keys.admin)}); r.status != s200 {
		t.Errorf("uid %d with the admin key = %d %s, want 200", otherUID, r.status, r.body)
	}
}

// pyConnect connects to a Unix socket and prints "ok" or the errno name.
const pyConnect = `
import errno, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
`

func TestSocketModeAndGroupDecideWhoCanConnect(t *testing.T) {
	needRoot(t)
	needPython(t, false)
	tests := []struct {
		name, config string
		mode         os.FileMode
		gid          uint32
		// can says, by uid (gid the same), whether a connect succeeds.
		can map[int]bool
	}{
		{"default mode, group by id", "socket_group = \"65534\"\n", 0o660, otherUID,
			map[int]bool{otherUID: true, strangerUID: false}},
		{"group by name", "socket_group = \"" + groupName(t, otherUID) + "\"\n", 0o660, otherUID,
			map[int]bool{otherUID: true, strangerUID: false}},
		{"owner only", "socket_mode = \"0600\"\nsocket_group = \"65534\"\n", 0o600, otherUID,
			map[int]bool{otherUID: false, strangerUID: false}},
		{"everyone", "socket_mode = \"0666\"\n", 0o666, 0,
			map[int]bool{otherUID: true, strangerUID: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := start(t, setup{config: tt.config})
			runDir := filepath.Dir(d.Socket)
			st, err := os.Stat(runDir)
			if err != nil {
				t.Fatal(err)
			}
			if perm := st.Mode().Perm(); perm != 0o750 {
				t.Errorf("socket directory mode = %04o, want 0750", perm)
			}
			fi, err := os.Lstat(d.Socket)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != tt.mode {
				t.Errorf("socket mode = %v, want a socket with %04o", fi.Mode(), tt.mode)
			}
			if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != tt.gid {
				t.Errorf("socket group = %d, want %d", gid, tt.gid)
			}

			// Only the socket's own mode and group may decide: open the
			// directories on the way to it (the daemon made its own 0750,
			// checked above, which alone would keep every other uid out).
			for _, p := range []string{filepath.Dir(filepath.Dir(runDir)), filepath.Dir(runDir), runDir} {
				if err := os.Chmod(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for uid, can := range tt.can {
				out, errOut, code := runAs(t, uid, uid, python, "-c", pyConnect, d.Socket)
				if code != 0 {
					t.Fatalf("python as %d: exit %d: %s", uid, code, errOut)
				}
				want := "EACCES"
				if can {
					want = "ok"
				}
				if got := strings.TrimSpace(out); got != want {
					t.Errorf("connect as uid %d = %s, want %s", uid, got, want)
				}
				if can {
					if r := d.curlAs(t, uid, uid, request{path: "/healthz"}); r.status != s200 {
						t.Errorf("healthz as uid %d = %d, want 200", uid, r.status)
					}
				}
			}
		})
	}
}

func TestTCPListenerIsLoopbackOnlyUnlessAllowRemote(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, daemontest.Options{Dir: dir, NoWait: true, Args: []string{"--listen-tcp", "0.0.0.0:0"}})
	if err := d.Wait(t, wait); err == nil {
		t.Fatal("the daemon started on 0.0.0.0 without allow_remote")
	}
	if log := d.Stderr(); !strings.Contains(log, "allow_remote") {
		t.Errorf("the refusal does not name allow_remote:\n%s", log)
	}
}

func TestAKeysFileOthersCanReadIsRefused(t *testing.T) {
	d := start(t, setup{tcp: true})
	keysFile := filepath.Join(d.Dir, "keys.json")
	if err := os.Chmod(keysFile, 0o644); err != nil {
		t.Fatal(err)
	}

	// A reload keeps the running keys and says why it refused.
	r := do(t, d.client(false), d.url(false, "/api/v1/reload"), request{method: "POST"})
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "0644") {
		t.Errorf("reload with a 0644 keys file = %d %s, want 400 naming the mode", r.status, r.body)
	}
	if r := do(t, d.client(true), d.url(true, "/api/v1/sessions"), request{header: bearer(d.keys.read)}); r.status != s200 {
		t.Errorf("the read key after a refused reload = %d %s, want 200", r.status, r.body)
	}

	// A daemon does not start on it.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second := daemontest.Start(t, daemontest.Options{Dir: dir, NoWait: true, Args: []string{"--keys-file", keysFile}})
	if err := second.Wait(t, wait); err == nil {
		t.Fatal("the daemon started with a keys file others can read")
	}
	if log := second.Stderr(); !strings.Contains(log, "0644") {
		t.Errorf("the refusal does not name the mode:\n%s", log)
	}
}

// groupName returns the name of the group gid (nogroup on Debian).
func groupName(t *testing.T, gid int) string {
	t.Helper()
	g, err := user.LookupGroupId(strconv.Itoa(gid))
	if err != nil {
		t.Fatalf("group %d: %v", gid, err)
	}
	return g.Name
}

// TestSocketGroupReachesASocketInADirectoryTheDaemonMade leaves the socket
// directory to the daemon (SPEC §7): it makes it 0750 with socket_group, so
// a member of that group reaches the socket and nobody else does.
func TestSocketGroupReachesASocketInADirectoryTheDaemonMade(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is needed: %v", python, err)
	}
	d := start(t, setup{config: "socket_group = \"65534\"\n"})
	runDir := filepath.Dir(d.Socket)
	st, err := os.Stat(runDir)
	if err != nil {
		t.Fatal(err)
	}
	if gid := st.Sys().(*syscall.Stat_t).Gid; st.Mode().Perm() != 0o750 || gid != otherUID {
		t.Errorf("socket directory: mode %04o group %d, want 0750 group %d", st.Mode().Perm(), gid, otherUID)
	}
	// Open the temporary directories above it, which t.TempDir makes 0700;
	// the socket directory stays as the daemon made it.
	for _, p := range []string{filepath.Dir(d.Dir), d.Dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for uid, want := range map[int]string{otherUID: "ok", strangerUID: "EACCES"} {
		out, errOut, code := runAs(t, uid, uid, python, "-c", pyConnect, d.Socket)
		if code != 0 {
			t.Fatalf("python as %d: exit %d: %s", uid, code, errOut)
		}
		if got := strings.TrimSpace(out); got != want {
			t.Errorf("connect as uid %d = %s, want %s", uid, got, want)
		}
	}
	if r := d.curlAs(t, otherUID, otherUID, request{path: "/healthz"}); r.status != s200 {
		t.Errorf("healthz as uid %d = %d, want 200", otherUID, r.status)
	}
}

// TestTheSubprotocolKeyAuthenticatesOnlyAWebSocketUpgrade sends the browser
// key subprotocol with the headers of a WebSocket upgrade to routes that are
// not WebSocket routes: it changes nothing, they answer 401 as without it
// (SPEC §7), while the same key opens a WebSocket stream.
func TestTheSubprotocolKeyAuthenticatesOnlyAWebSocketUpgrade(t *testing.T) {
	d := start(t, setup{tcp: true})
	if r := do(t, d.client(false), d.url(false, "/api/v1/sessions"), request{method: "POST", body: `{"id":"s1"}`}); r.status != s201 {
		t.Fatalf("create s1 = %d %s", r.status, r.body)
	}
	proto := []string{"Sec-WebSocket-Protocol", "localbus-key." + d.keys.admin + ", localbus-key"}
	for _, req := range []request{
		{path: "/metrics"},
		{path: "/api/v1/sessions"},
		{path: "/api/v1/sessions/s1"},
		{path: "/api/v1/events", stream: true},
		{method: "POST", path: "/api/v1/sessions/s1/events", body: `{"type":"x:y"}`},
		{method: "POST", path: "/api/v1/reload"},
	} {
		req.header = append(append([]string{}, upgradeHeader...), proto...)
		r := do(t, d.client(true), d.url(true, req.path), req)
		if r.status != s401 {
			t.Errorf("%s %s with upgrade headers and the subprotocol key = %d %s, want 401", methodOf(req), req.path, r.status, r.body)
		}
		if r.status >= 400 {
			checkErrorBody(t, r)
		}
	}
	if r := do(t, d.client(false), d.url(false, "/api/v1/sessions/s1"), request{}); r.status != s200 || !strings.Contains(r.body, `"lastId":0`) {
		t.Errorf("session s1 after the refusals = %d %s, want it untouched", r.status, r.body)
	}
	if r := dialWS(t, d.client(true), d.url(true, "/api/v1/sessions/s1/ws"), nil, "localbus-key."+d.keys.admin, "localbus-key"); r.status != s101 {
		t.Errorf("WebSocket upgrade with the subprotocol key = %d %s, want 101", r.status, r.body)
	}
}

// TestAKeysFileThatIsNotTheDaemonsIsRefused puts at keys_file what the
// daemon must not trust or must not wait on (SPEC §7): a FIFO, a symbolic
// link, a file another uid owns. A reload is refused at once with the path
// and the reason, the running keys stay in force, and the daemon still
// stops on SIGTERM; a daemon does not start on them.
func TestAKeysFileThatIsNotTheDaemonsIsRefused(t *testing.T) {
	tests := []struct {
		name   string
		root   bool
		plant  func(t *testing.T, path string)
		reason string
	}{
		{"fifo", false, func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "FIFO"},
		{"symbolic link", false, func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "real-keys.json")
			if err := (&access.Keyring{}).Save(target); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"owned by another uid", true, func(t *testing.T, path string) {
			if err := (&access.Keyring{}).Save(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, otherUID, otherUID); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Geteuid() != 0 {
				t.Skip("giving the keys file to another uid needs root")
			}
			d := start(t, setup{tcp: true})
			keysFile := filepath.Join(d.Dir, "keys.json")
			if err := os.Remove(keysFile); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, keysFile)

			r := do(t, d.client(false), d.url(false, "/api/v1/reload"), request{method: "POST"})
			if r.status != http.StatusBadRequest || !strings.Contains(r.body, keysFile) || !strings.Contains(r.body, tt.reason) {
				t.Errorf("reload = %d %s, want 400 naming %s and %q", r.status, r.body, keysFile, tt.reason)
			}
			if r := do(t, d.client(true), d.url(true, "/api/v1/sessions"), request{header: bearer(d.keys.read)}); r.status != s200 {
				t.Errorf("the read key after a refused reload = %d %s, want 200", r.status, r.body)
			}
			refusals := strings.Count(d.Stderr(), "reload refused")
			d.Signal(t, syscall.SIGHUP)
			eventually(t, wait, "the daemon to log the refused reload", func() bool { return strings.Count(d.Stderr(), "reload refused") > refusals })
			d.Signal(t, syscall.SIGTERM)
			if err := d.Wait(t, wait); err != nil {
				t.Errorf("SIGTERM after the refused reloads: %v, want a clean exit", err)
			}

			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "config.toml"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			second := daemontest.Start(t, daemontest.Options{Dir: dir, NoWait: true, Args: []string{"--keys-file", keysFile}})
			if err := second.Wait(t, wait); err == nil {
				t.Fatal("the daemon started on it")
			}
			if log := second.Stderr(); !strings.Contains(log, keysFile) || !strings.Contains(log, tt.reason) {
				t.Errorf("the refusal does not name %s and %q:\n%s", keysFile, tt.reason, log)
			}
		})
	}
}

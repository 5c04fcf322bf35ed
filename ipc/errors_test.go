package ipc_test

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// errCase is one request the router must refuse.
type errCase struct {
	name   string
	method string
	path   string
	header http.Header
	body   []byte
	status int
	code   string
	allow  []string // the Allow header of a 405, sorted
}

// upgrade is the header of a WebSocket upgrade request, enough for the
// router to treat it as one.
func upgrade() http.Header {
	return header("Connection", "Upgrade", "Upgrade", "websocket",
		"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
}

// errorCases are every 4xx of SPEC §6 that the router makes, on a server
// with sessions "watch" and "target", at most two sessions, auto-create
// off, max_event_bytes 1024 and a 64 KiB body limit.
func errorCases() []errCase {
	const (
		s  = "/api/v1/sessions/"
		ns = "/api/v1/sessions/nosuch"
	)
	get := func(name, path string, status int, code string) errCase {
		return errCase{name: name, method: http.MethodGet, path: path, status: status, code: code}
	}
	pub := func(name, body string, status int, code string) errCase {
		return errCase{name: name, method: http.MethodPost, path: s + "target/events", body: []byte(body), status: status, code: code}
	}
	ndjson := func(name, body string, status int, code string) errCase {
		c := pub(name, body, status, code)
		c.header = header("Content-Type", "application/x-ndjson")
		return c
	}
	create := func(name, body string, status int, code string) errCase {
		return errCase{name: name, method: http.MethodPost, path: "/api/v1/sessions", body: []byte(body), status: status, code: code}
	}
	method := func(m, path string, allow ...string) errCase {
		return errCase{name: "method " + m + " " + path, method: m, path: path, status: http.StatusMethodNotAllowed, code: "method_not_allowed", allow: allow}
	}
	clientID := func(name, id string) errCase {
		c := pub(name, `{"type":"a:b"}`, http.StatusBadRequest, "invalid_client_id")
		c.header = header(wire.HeaderClientID, id)
		return c
	}

	var cases []errCase
	// Bad session ids, on every route that takes one.
	for _, id := range []string{"-lead", "bad$id", "a%20b", "a%2Fb", strings.Repeat("x", 129)} {
		cases = append(cases,
			get("bad id "+id+" sse", s+id+"/events", 400, "invalid_session"),
			get("bad id "+id+" ws", s+id+"/ws", 400, "invalid_session"),
			get("bad id "+id+" show", s+id, 400, "invalid_session"),
			errCase{name: "bad id " + id + " delete", method: http.MethodDelete, path: s + id, status: 400, code: "invalid_session"},
			errCase{name: "bad id " + id + " publish", method: http.MethodPost, path: s + id + "/events", body: []byte(`{"type":"a:b"}`), status: 400, code: "invalid_session"},
		)
	}
	cases = append(cases,
		// Unknown sessions.
		get("unknown session sse", ns+"/events", 404, "not_found"),
		get("unknown session show", ns, 404, "not_found"),
		errCase{name: "unknown session delete", method: http.MethodDelete, path: ns, status: 404, code: "not_found"},
		errCase{name: "unknown session ws upgrade", method: http.MethodGet, path: ns + "/ws", header: upgrade(), status: 404, code: "not_found"},
		errCase{name: "auto-create off publish", method: http.MethodPost, path: ns + "/events", body: []byte(`{"type":"a:b"}`), status: 404, code: "not_found"},
	)
	// Stream parameters are validated before the session is looked up: the
	// session is unknown in every one of these, and each is still a 400.
	params := []struct {
		name, query, code string
	}{
		{"since letters", "since=abc", "invalid_since"},
		{"since negative", "since=-1", "invalid_since"},
		{"since plus", "since=+1", "invalid_since"},
		{"since hex", "since=0x10", "invalid_since"},
		{"since empty", "since=", "invalid_since"},
		{"since space", "since=%201", "invalid_since"},
		{"since above 2^53-1", "since=9007199254740992", "invalid_since"},
		{"since twice", "since=1&since=2", "invalid_since"},
		{"sinceTime word", "sinceTime=yesterday", "invalid_sinceTime"},
		{"sinceTime negative duration", "sinceTime=-10m", "invalid_sinceTime"},
		{"sinceTime a date alone", "sinceTime=2026-12-01", "invalid_sinceTime"},
		{"sinceTime an id", "sinceTime=17", "invalid_sinceTime"},
		{"sinceTime empty", "sinceTime=", "invalid_sinceTime"},
		{"sinceTime twice", "sinceTime=1m&sinceTime=2m", "invalid_sinceTime"},
		{"since and sinceTime", "since=3&sinceTime=10m", "invalid_sinceTime"},
		{"since a duration", "since=10m", "invalid_since"},
		{"maxQueued below", "maxQueued=15", "invalid_maxQueued"},
		{"maxQueued above", "maxQueued=2049", "invalid_maxQueued"},
		{"maxQueued zero", "maxQueued=0", "invalid_maxQueued"},
		{"maxQueued hex", "maxQueued=0x20", "invalid_maxQueued"},
		{"maxQueued plus", "maxQueued=%2B20", "invalid_maxQueued"},
		{"maxQueued decimal point", "maxQueued=20.0", "invalid_maxQueued"},
		{"maxQueued empty", "maxQueued=", "invalid_maxQueued"},
		{"maxQueued twice", "maxQueued=20&maxQueued=30", "invalid_maxQueued"},
		{"types empty", "types=", "invalid_types"},
		{"types empty element", "types=a:b,", "invalid_types"},
		{"types empty middle", "types=a:b,,c:d", "invalid_types"},
		{"types bad name", "types=nocolon", "invalid_types"},
		{"types bad family", "types=Build:x", "invalid_types"},
		{"types bad name chars", "types=a:b%20c", "invalid_types"},
		{"types reserved stream:ready", "types=stream:ready", "invalid_types"},
		{"types reserved stream family", "types=stream:*", "invalid_types"},
		{"types reserved localbus", "types=localbus:session-opened", "invalid_types"},
		{"types twice", "types=a:b&types=c:d", "invalid_types"},
	}
	for _, p := range params {
		cases = append(cases,
			get("unknown session sse "+p.name, ns+"/events?"+p.query, 400, p.code),
			get("unknown session ws "+p.name, ns+"/ws?"+p.query, 400, p.code),
			errCase{name: "unknown session ws upgrade " + p.name, method: http.MethodGet, path: ns + "/ws?" + p.query, header: upgrade(), status: 400, code: p.code},
			get("global "+p.name, "/api/v1/events?"+p.query, 400, p.code),
			get("family "+p.name, "/api/v1/families/build/events?"+p.query, 400, p.code),
		)
	}
	cases = append(cases,
		// Family routes: the family itself, and types outside it.
		get("family outside types sse", "/api/v1/families/build/events?types=deploy:x", 400, "invalid_types"),
		get("family outside family:* sse", "/api/v1/families/build/events?types=build:a,deploy:*", 400, "invalid_types"),
		get("family outside types ws", "/api/v1/families/build/ws?types=deploy:x", 400, "invalid_types"),
		errCase{name: "family outside types ws upgrade", method: http.MethodGet, path: "/api/v1/families/build/ws?types=deploy:x", header: upgrade(), status: 400, code: "invalid_types"},
		get("family reserved stream", "/api/v1/families/stream/events", 400, "invalid_family"),
		get("family bad name", "/api/v1/families/Build/events", 400, "invalid_family"),
		get("family bad name ws", "/api/v1/families/9x/ws", 400, "invalid_family"),

		// Publish bodies.
		pub("publish reserved stream", `{"type":"stream:x"}`, 400, "invalid_type"),
		pub("publish reserved localbus", `{"type":"localbus:x"}`, 400, "invalid_type"),
		pub("publish reserved in a batch", `[{"type":"a:b"},{"type":"localbus:session-opened"}]`, 400, "invalid_type"),
		pub("publish no colon", `{"type":"nocolon"}`, 400, "invalid_type"),
		pub("publish no type", `{"data":1}`, 400, "invalid_type"),
		pub("publish bad name", `{"type":"a:b c"}`, 400, "invalid_type"),
		pub("publish bad JSON", `{"type":`, 400, "invalid_event"),
		pub("publish bad JSON data", `{"type":"a:b","data":{bad}}`, 400, "invalid_event"),
		pub("publish bad JSON array", `[{"type":"a:b"},`, 400, "invalid_body"),
		pub("publish trailing data", `{"type":"a:b"} {"type":"a:c"}`, 400, "invalid_event"),
		pub("publish not an object", `"a:b"`, 400, "invalid_event"),
		pub("publish unknown field", `{"type":"a:b","data":1,"id":7}`, 400, "invalid_event"),
		pub("publish unknown field in a batch", `[{"type":"a:b"},{"type":"a:c","session":"x"}]`, 400, "invalid_event"),
		pub("publish empty array", `[]`, 400, "invalid_body"),
		pub("publish empty body", ``, 400, "invalid_body"),
		pub("publish blank body", " \n\t", 400, "invalid_body"),
		pub("publish data not UTF-8", "{\"type\":\"a:b\",\"data\":\"\xff\"}", 400, "invalid_data"),
		ndjson("ndjson blank lines only", "\n\n  \n", 400, "invalid_body"),
		ndjson("ndjson bad line", "{\"type\":\"a:b\"}\n{\"type\":\n", 400, "invalid_event"),
		ndjson("ndjson reserved type", "{\"type\":\"a:b\"}\n{\"type\":\"stream:x\"}\n", 400, "invalid_type"),
		pub("publish batch over 1000", batchBody(1001), 413, "batch_too_large"),
		ndjson("ndjson batch over 1000", ndjsonBody(1001), 413, "batch_too_large"),
		pub("publish event over max_event_bytes", `{"type":"a:b","data":"`+strings.Repeat("x", 1100)+`"}`, 413, "event_too_large"),
		pub("publish batch with one event over max", `[{"type":"a:b"},{"type":"a:b","data":"`+strings.Repeat("x", 1100)+`"}]`, 413, "event_too_large"),
		pub("publish body over max", `[`+strings.Repeat(`{"type":"a:b","data":"`+strings.Repeat("x", 900)+`"},`, 80)+`{"type":"a:b"}]`, 413, "body_too_large"),
		clientID("client id empty", ""),
		clientID("client id too long", strings.Repeat("c", 129)),
		clientID("client id not ASCII", "clé"),
		clientID("client id tab", "a\tb"),

		// Sessions.
		create("create existing", `{"id":"target"}`, 409, "session_exists"),
		create("create past the session limit", `{"id":"third"}`, 429, "session_limit"),
		create("create generated id past the limit", ``, 429, "session_limit"),
		create("create bad id", `{"id":"-x"}`, 400, "invalid_session"),
		create("create ring size negative", `{"id":"r","ringSize":-1}`, 400, "invalid_ringSize"),
		create("create ring size too big", `{"id":"r","ringSize":1000001}`, 400, "invalid_ringSize"),
		create("create unknown field", `{"id":"r","ring":5}`, 400, "invalid_body"),
		create("create bad JSON", `{"id":`, 400, "invalid_body"),
		create("create body too big", `{"id":"`+strings.Repeat("x", 70<<10)+`"}`, 413, "body_too_large"),

		// Methods and paths.
		method(http.MethodPut, s+"target", "DELETE", "GET"),
		method(http.MethodPost, s+"target", "DELETE", "GET"),
		method(http.MethodPatch, s+"target/events", "GET", "POST"),
		method(http.MethodDelete, "/api/v1/sessions", "GET", "POST"),
		method(http.MethodPost, s+"target/ws", "GET"),
		method(http.MethodPost, "/api/v1/events", "GET"),
		method(http.MethodPut, "/api/v1/families/build/events", "GET"),
		method(http.MethodGet, "/api/v1/reload", "POST"),
		method(http.MethodPost, "/healthz", "GET"),
		method(http.MethodDelete, "/readyz", "GET"),
		method(http.MethodPost, "/api/v1/caps", "GET"),
		get("unknown path", "/nope", 404, "not_found"),
		get("unknown path under a session", s+"target/nope", 404, "not_found"),
		get("unknown api version", "/api/v2/events", 404, "not_found"),
		get("unknown path root", "/", 404, "not_found"),

		// WebSocket routes without an upgrade.
		get("session ws without upgrade", s+"target/ws", 400, "websocket_required"),
		get("global ws without upgrade", "/api/v1/events/ws", 400, "websocket_required"),
		get("family ws without upgrade", "/api/v1/families/build/ws", 400, "websocket_required"),
	)
	return cases
}

func batchBody(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"type":"a:b"}`)
	}
	b.WriteString("]")
	return b.String()
}

func ndjsonBody(n int) string {
	return strings.Repeat("{\"type\":\"a:b\"}\n", n)
}

// TestErrorsAreJSONAndHarmless sends every refused request of the table and
// checks the status, the JSON error body and its code; and that none of them
// disturbed anyone: an SSE subscriber of another session receives an event
// published after each refusal, and a refused publish stored nothing.
func TestErrorsAreJSONAndHarmless(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{
		Hub:     hub.Options{MaxSessions: 2, AutoCreate: false},
		Handler: ipc.Options{Settings: ipc.Settings{MaxEventBytes: 1024, MaxBodyBytes: 64 << 10}},
	})
	createSession(t, srv, "watch")
	createSession(t, srv, "target")
	srv.Publish(t, "target", ev("a:b", `"before"`))

	watch := srv.OpenSSE(t, "/api/v1/sessions/watch/events", nil)
	expectSSE(t, watch, "stream:ready")

	for i, tc := range errorCases() {
		t.Run(tc.name, func(t *testing.T) {
			targetBefore := lastID(t, srv, "target")
			r := srv.Do(t, tc.method, tc.path, tc.header, tc.body)
			if r.Status != tc.status {
				t.Errorf("%s %s = %d %s, want %d", tc.method, tc.path, r.Status, r.Body, tc.status)
			}
			body := r.ErrorBody(t)
			if body.Error.Code != tc.code {
				t.Errorf("%s %s: code = %q, want %q (message %q)", tc.method, tc.path, body.Error.Code, tc.code, body.Error.Message)
			}
			if !bytes.HasSuffix(r.Body, []byte("\n")) || bytes.Count(r.Body, []byte("\n")) != 1 {
				t.Errorf("body %q: want one line of JSON", r.Body)
			}
			if tc.allow != nil {
				allow := slices.Clone(r.Header.Values("Allow"))
				slices.Sort(allow)
				if !slices.Equal(allow, tc.allow) {
					t.Errorf("Allow = %v, want %v", allow, tc.allow)
				}
			}

			// Nobody else noticed.
			if got := lastID(t, srv, "target"); got != targetBefore {
				t.Errorf("target lastId = %d after a refused request, want %d", got, targetBefore)
			}
			if n := srv.Hub.Len(); n != 2 {
				t.Errorf("sessions = %d after a refused request, want 2", n)
			}
			marker := fmt.Sprintf(`{"case":%d}`, i)
			reply := srv.Publish(t, "watch", ev("probe:after", marker))
			got := watch.MustNext(t)
			if got.ID != reply.LastID || got.Type != "probe:after" || string(got.Data) != marker {
				t.Fatalf("watcher got %d %s %s, want %d probe:after %s", got.ID, got.Type, got.Data, reply.LastID, marker)
			}
		})
	}
	if got := lastID(t, srv, "target"); got != 1 {
		t.Errorf("target lastId = %d at the end, want 1", got)
	}
}

package ipc

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/wire"
)

// ticketClock is a clock the test moves.
type ticketClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *ticketClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *ticketClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// ticketFixture is a route fixture whose ticket store has a fake clock and
// holds at most max tickets (0: the default), with allowed_origins set.
func ticketFixture(t *testing.T, max int) (*routeFixture, *ticketClock) {
	t.Helper()
	clock := &ticketClock{now: time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)}
	origins := []string{"http://app.example:3000"}
	f := newRouteFixture(t, func(a *Auth) { a.AllowedOrigins = origins }, func(o *Options) {
		o.Tickets = access.NewTicketStore(access.TicketOptions{Max: max, Now: clock.Now})
		o.AllowedOrigins = origins
	})
	return f, clock
}

// ticket asks for a ticket over TCP with key and fails unless it gets one.
func (f *routeFixture) ticket(t *testing.T, key, body string) string {
	t.Helper()
	w := f.do(t, viaTCP, "POST", wire.PathTickets, body, "Authorization", "Bearer "+key)
	if w.Code != http.StatusOK {
		t.Fatalf("POST %s %s = %d %s, want 200", wire.PathTickets, body, w.Code, w.Body)
	}
	var rep wire.TicketReply
	if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if !access.WellFormedTicket(rep.Ticket) || rep.ExpiresAt.IsZero() {
		t.Fatalf("ticket reply %s: want lbt_… and expiresAt", w.Body)
	}
	f.lastTicketReply = w.Body.String()
	return rep.Ticket
}

// wantRefusal fails unless w is the given status and JSON error code.
func wantRefusal(t *testing.T, what string, w interface {
	Result() *http.Response
}, status int, code string) {
	t.Helper()
	resp := w.Result()
	var body wire.ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != status || body.Error.Code != code {
		t.Errorf("%s = %d %+v (%v), want %d %s", what, resp.StatusCode, body, err, status, code)
	}
}

const s1Events = "/api/v1/sessions/s1/events"

func TestTicketOpensItsStreamOnceAndNeverAgain(t *testing.T) {
	f, _ := ticketFixture(t, 0)
	tk := f.ticket(t, f.keys.read, `{"path":"`+s1Events+`"}`)
	if !strings.Contains(f.lastTicketReply, `"expiresAt":"2026-08-22T10:00:30Z"`) {
		t.Errorf("ticket reply %s: want expiresAt in RFC 3339, 30 s from now", f.lastTicketReply)
	}
	if w := f.do(t, viaTCP, "GET", s1Events+"?since=0&ticket="+tk, ""); w.Code != http.StatusOK {
		t.Fatalf("first use = %d %s, want 200", w.Code, w.Body)
	}
	wantRefusal(t, "replay", f.do(t, viaTCP, "GET", s1Events+"?ticket="+tk, ""), 401, wire.CodeInvalidTicket)
	// The bus and other callers are unaffected.
	if w := f.do(t, viaTCP, "GET", s1Events, "", "Authorization", "Bearer "+f.keys.read); w.Code != http.StatusOK {
		t.Errorf("a key's stream after the replay = %d, want 200", w.Code)
	}
}

func TestTicketExpiresAfterThirtySeconds(t *testing.T) {
	f, clock := ticketFixture(t, 0)
	body := `{"path":"` + s1Events + `"}`
	fresh := f.ticket(t, f.keys.read, body)
	stale := f.ticket(t, f.keys.read, body)
	clock.Advance(29 * time.Second)
	if w := f.do(t, viaTCP, "GET", s1Events+"?ticket="+fresh, ""); w.Code != http.StatusOK {
		t.Errorf("use after 29 s = %d %s, want 200", w.Code, w.Body)
	}
	clock.Advance(time.Second)
	wantRefusal(t, "use after 30 s", f.do(t, viaTCP, "GET", s1Events+"?ticket="+stale, ""), 401, wire.CodeInvalidTicket)
}

func TestTicketOpensOnlyItsPath(t *testing.T) {
	f, _ := ticketFixture(t, 0)
	if _, err := f.hub.Create(bustest.SessionID("s2"), 0); err != nil {
		t.Fatal(err)
	}
	body := `{"path":"` + s1Events + `"}`
	tk := f.ticket(t, f.keys.read, body)
	wantRefusal(t, "on another session", f.do(t, viaTCP, "GET", "/api/v1/sessions/s2/events?ticket="+tk, ""), 401, wire.CodeInvalidTicket)
	wantRefusal(t, "on its path after a wrong one", f.do(t, viaTCP, "GET", s1Events+"?ticket="+tk, ""), 401, wire.CodeInvalidTicket)

	// Anywhere but a GET stream route, a ticket is a credential in the
	// query string, refused before it is looked at.
	tk = f.ticket(t, f.keys.read, body)
	for _, tt := range []struct{ method, target string }{
		{"GET", "/api/v1/sessions?ticket=" + tk},
		{"GET", "/api/v1/sessions/s1?ticket=" + tk},
		{"POST", s1Events + "?ticket=" + tk},
		{"GET", "/metrics?ticket=" + tk},
		{"GET", "/healthz?ticket=" + tk},
		{"GET", s1Events + "?Ticket=" + tk},
		{"GET", s1Events + "?ticket=" + tk + "&ticket=" + tk},
		{"GET", s1Events + "?ticket=" + tk + "&token=x"},
	} {
		wantRefusal(t, tt.method+" "+tt.target, f.do(t, viaTCP, tt.method, tt.target, ""), 401, wire.CodeCredentialsInQuery)
	}
	if w := f.do(t, viaTCP, "GET", s1Events+"?ticket="+tk, ""); w.Code != http.StatusOK {
		t.Errorf("the ticket on its route after the refusals elsewhere = %d %s, want 200 (not consumed there)", w.Code, w.Body)
	}
}

func TestTicketCarriesAtMostTheCallersScopes(t *testing.T) {
	f, _ := ticketFixture(t, 0)
	wantRefusal(t, "read key asking for admin",
		f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"`+s1Events+`","scopes":["admin"]}`, "Authorization", "Bearer "+f.keys.read),
		403, wire.CodeForbidden)
	wantRefusal(t, "read key asking for the global bus",
		f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"/api/v1/events"}`, "Authorization", "Bearer "+f.keys.read),
		403, wire.CodeForbidden)
	wantRefusal(t, "admin key asking read for the global bus",
		f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"/api/v1/events","scopes":["read"]}`, "Authorization", "Bearer "+f.keys.admin),
		403, wire.CodeForbidden)
	wantRefusal(t, "a bad scope",
		f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"`+s1Events+`","scopes":["root"]}`, "Authorization", "Bearer "+f.keys.admin),
		400, wire.CodeInvalidScopes)
	wantRefusal(t, "no credentials",
		f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"`+s1Events+`"}`), 401, wire.CodeUnauthorized)

	// A family key's ticket opens its family, and only with its scopes.
	fam := "/api/v1/families/build/events"
	tk := f.ticket(t, f.keys.family, `{"path":"`+fam+`","scopes":["read:build"]}`)
	if w := f.do(t, viaTCP, "GET", fam+"?ticket="+tk, ""); w.Code != http.StatusOK {
		t.Errorf("family ticket = %d %s, want 200", w.Code, w.Body)
	}
	// An admin's ticket narrowed to read:build cannot open a session.
	wantRefusal(t, "admin key's read:build ticket for a session",
		f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"`+s1Events+`","scopes":["read:build"]}`, "Authorization", "Bearer "+f.keys.admin),
		403, wire.CodeForbidden)
	// The ticket, not the key sent with it, authorizes the stream.
	tk = f.ticket(t, f.keys.admin, `{"path":"/api/v1/families/build/ws","scopes":["read:build"]}`)
	if w := f.do(t, viaTCP, "GET", "/api/v1/families/build/ws?ticket="+tk, "", "Authorization", "Bearer "+f.keys.admin); w.Code != stWSOK {
		t.Errorf("ws ticket = %d %s, want 400 websocket_required once authorized", w.Code, w.Body)
	}
}

func TestTicketPathMustBeAStreamRoute(t *testing.T) {
	f, _ := ticketFixture(t, 0)
	for _, p := range []string{
		"", "/api/v1/sessions", "/api/v1/sessions/s1", "/api/v1/tickets", "/metrics",
		s1Events + "?since=1", s1Events + "#x", "http://127.0.0.1:8001" + s1Events,
		"/api/v1/sessions/s1/../s1/events", "api/v1/sessions/s1/events", "/api/v1/upstream",
	} {
		body, _ := json.Marshal(wire.TicketRequest{Path: p})
		wantRefusal(t, "path "+p, f.do(t, viaTCP, "POST", wire.PathTickets, string(body), "Authorization", "Bearer "+f.keys.admin), 400, wire.CodeInvalidPath)
	}
	wantRefusal(t, "bad family", f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"/api/v1/families/Build!/events"}`, "Authorization", "Bearer "+f.keys.admin), 400, wire.CodeInvalidFamily)
	wantRefusal(t, "unknown field", f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"`+s1Events+`","ttl":60}`, "Authorization", "Bearer "+f.keys.admin), 400, wire.CodeInvalidBody)
	for _, p := range []string{"/api/v1/events", "/api/v1/events/ws", "/api/v1/families/build/ws", "/api/v1/sessions/s1/ws", "/api/v1/sessions/s%2D1/events"} {
		f.ticket(t, f.keys.admin, `{"path":"`+p+`"}`)
	}
}

func TestOutstandingTicketsAreCappedWith429(t *testing.T) {
	f, clock := ticketFixture(t, 2)
	body := `{"path":"` + s1Events + `"}`
	tk := f.ticket(t, f.keys.read, body)
	f.ticket(t, f.keys.read, body)
	wantRefusal(t, "third ticket", f.do(t, viaTCP, "POST", wire.PathTickets, body, "Authorization", "Bearer "+f.keys.read), 429, wire.CodeTicketLimit)
	f.do(t, viaTCP, "GET", s1Events+"?ticket="+tk, "")
	f.ticket(t, f.keys.read, body) // a used one frees its place
	clock.Advance(30 * time.Second)
	f.ticket(t, f.keys.read, body) // expired ones are pruned
	f.ticket(t, f.keys.read, body)
}

func TestReloadVoidsOutstandingTickets(t *testing.T) {
	f, _ := ticketFixture(t, 0)
	tk := f.ticket(t, f.keys.read, `{"path":"`+s1Events+`"}`)
	f.h.SetSettings(f.h.options().Settings)
	wantRefusal(t, "a ticket from before the reload", f.do(t, viaTCP, "GET", s1Events+"?ticket="+tk, ""), 401, wire.CodeInvalidTicket)
}

func TestTicketsAreNeverLogged(t *testing.T) {
	f, _ := ticketFixture(t, 0)
	body := `{"path":"` + s1Events + `"}`
	var tks []string
	for range 4 {
		tks = append(tks, f.ticket(t, f.keys.read, body))
	}
	f.do(t, viaTCP, "GET", s1Events+"?ticket="+tks[0], "")
	f.do(t, viaTCP, "GET", s1Events+"?ticket="+tks[0], "")                  // replay
	f.do(t, viaTCP, "GET", "/api/v1/sessions/s9/events?ticket="+tks[1], "") // wrong path
	f.do(t, viaTCP, "GET", "/api/v1/sessions?ticket="+tks[2], "")           // wrong route
	f.do(t, viaTCP, "GET", s1Events+"?ticket="+tks[3]+"&api_key=x", "")     // with a credential
	f.do(t, viaTCP, "GET", s1Events+"?ticket="+tks[3], "", "Last-Event-ID", "junk")
	log := f.log.String()
	if !strings.Contains(log, "invalid_ticket") || !strings.Contains(log, "credentials_in_query") {
		t.Fatalf("the refusals were not logged:\n%s", log)
	}
	for _, tk := range tks {
		if strings.Contains(log, tk) || strings.Contains(log, tk[4:20]) {
			t.Errorf("the log holds a ticket (%.8s…):\n%s", tk, log)
		}
	}
	assertNoKeys(t, "the log", log, f.keys)
}

func TestCORSHeadersOnlyForAllowedOriginsOnTicketAndStreamRoutes(t *testing.T) {
	f, _ := ticketFixture(t, 0)
	const allowed, other = "http://app.example:3000", "http://evil.example"
	preflight := func(path, origin, method string) *http.Response {
		return f.do(t, viaTCP, "OPTIONS", path, "", "Origin", origin,
			"Access-Control-Request-Method", method, "Access-Control-Request-Headers", "authorization,content-type").Result()
	}
	for _, tt := range []struct{ path, method, methods string }{
		{wire.PathTickets, "POST", "POST, OPTIONS"},
		{s1Events, "GET", "GET, OPTIONS"},
		{"/api/v1/families/build/events", "GET", "GET, OPTIONS"},
		{"/api/v1/events/ws", "GET", "GET, OPTIONS"},
	} {
		r := preflight(tt.path, allowed, tt.method)
		h := r.Header
		if r.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != allowed ||
			h.Get("Access-Control-Allow-Methods") != tt.methods ||
			h.Get("Access-Control-Allow-Headers") != "Authorization, Content-Type, Last-Event-ID, Localbus-Epoch" ||
			!strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
			t.Errorf("preflight of %s from an allowed origin = %d %v", tt.path, r.StatusCode, h)
		}
		if r := preflight(tt.path, other, tt.method); hasCORS(r.Header) {
			t.Errorf("preflight of %s from another origin has CORS headers: %v", tt.path, r.Header)
		}
	}
	if r := preflight("/api/v1/sessions", allowed, "POST"); hasCORS(r.Header) || r.StatusCode < 400 {
		t.Errorf("preflight of a route without CORS = %d %v, want a refusal without CORS headers", r.StatusCode, r.Header)
	}

	// Actual requests: the ticket, a stream, and a refusal a page must be
	// able to read.
	w := f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"`+s1Events+`"}`, "Authorization", "Bearer "+f.keys.read, "Origin", allowed)
	if w.Code != 200 || w.Header().Get("Access-Control-Allow-Origin") != allowed || w.Header().Get("Vary") != "Origin" {
		t.Errorf("ticket from an allowed origin = %d %v", w.Code, w.Header())
	}
	var rep wire.TicketReply
	json.Unmarshal(w.Body.Bytes(), &rep)
	if w := f.do(t, viaTCP, "GET", s1Events+"?ticket="+rep.Ticket, "", "Origin", allowed); w.Code != 200 || w.Header().Get("Access-Control-Allow-Origin") != allowed {
		t.Errorf("stream from an allowed origin = %d %v", w.Code, w.Header())
	}
	if w := f.do(t, viaTCP, "GET", s1Events+"?ticket="+rep.Ticket, "", "Origin", allowed); w.Code != 401 || w.Header().Get("Access-Control-Allow-Origin") != allowed {
		t.Errorf("replay from an allowed origin = %d %v, want 401 with CORS headers", w.Code, w.Header())
	}
	if w := f.do(t, viaTCP, "POST", wire.PathTickets, `{"path":"`+s1Events+`"}`, "Authorization", "Bearer "+f.keys.read, "Origin", other); w.Code != 403 || hasCORS(w.Header()) {
		t.Errorf("ticket from another origin = %d %v, want 403 origin_not_allowed without CORS headers", w.Code, w.Header())
	}
	if w := f.do(t, viaTCP, "GET", "/api/v1/sessions", "", "Authorization", "Bearer "+f.keys.read, "Origin", allowed); hasCORS(w.Header()) {
		t.Errorf("a REST route from an allowed origin has CORS headers: %v", w.Header())
	}
}

func hasCORS(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			return true
		}
	}
	return false
}

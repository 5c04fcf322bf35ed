package ipc

import (
	"net/http"
	"strings"

	"github.com/localbus/localbus/ipc/access"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/wire"
)

// route is one line of the route table: SPEC §6 in code.
type route struct {
	method  string
	pattern string
	scope   scope
	serve   func(h *Handler, w http.ResponseWriter, r *http.Request, c Caller)
	// serveFamily, instead of serve, takes the family of the path, which
	// the scope check (scopeReadFamily) parsed.
	serveFamily func(h *Handler, w http.ResponseWriter, r *http.Request, c Caller, fam bus.Family)
}

// routes is every route the daemon serves. Authorization happens in
// Handler.wrap, by the scope column, before the route's function runs.
var routes = []route{
	{"GET", "/api/v1/events", scopeAdmin, (*Handler).serveGlobalSSE, nil},
	{"GET", "/api/v1/events/ws", scopeAdmin, (*Handler).serveGlobalWS, nil},
	{method: "GET", pattern: "/api/v1/families/{family}/events", scope: scopeReadFamily, serveFamily: (*Handler).serveFamilySSE},
	{method: "GET", pattern: "/api/v1/families/{family}/ws", scope: scopeReadFamily, serveFamily: (*Handler).serveFamilyWS},
	{"GET", "/api/v1/sessions/{id}/events", scopeRead, (*Handler).serveSessionSSE, nil},
	{"GET", "/api/v1/sessions/{id}/ws", scopeRead, (*Handler).serveSessionWS, nil},
	{"POST", "/api/v1/sessions/{id}/events", scopePublish, (*Handler).servePublish, nil},
	{"POST", "/api/v1/sessions", scopeAdmin, (*Handler).serveCreateSession, nil},
	{"POST", wire.PathTickets, scopeAny, (*Handler).serveTicket, nil},
	{"GET", "/api/v1/sessions", scopeRead, (*Handler).serveListSessions, nil},
	{"GET", "/api/v1/sessions/{id}", scopeRead, (*Handler).serveShowSession, nil},
	{"DELETE", "/api/v1/sessions/{id}", scopeAdmin, (*Handler).serveDeleteSession, nil},
	{"POST", "/api/v1/reload", scopeAdmin, (*Handler).serveReload, nil},
	{"GET", wire.PathUpstream, scopeRead, (*Handler).serveUpstream, nil},
	{"GET", "/api/v1/caps", scopeNone, (*Handler).serveCaps, nil},
	{"GET", "/healthz", scopeNone, (*Handler).serveHealthz, nil},
	{"GET", "/readyz", scopeNone, (*Handler).serveReadyz, nil},
	{"GET", "/metrics", scopeAdmin, (*Handler).serveMetrics, nil},
}

// isWebSocketRoute reports whether path is that of a WebSocket route (a
// GET pattern ending in /ws): the only requests whose subprotocol may carry
// a key.
func isWebSocketRoute(path string) bool {
	for _, rt := range routes {
		if rt.method == http.MethodGet && strings.HasSuffix(rt.pattern, "/ws") && matchPattern(rt.pattern, path) {
			return true
		}
	}
	return false
}

// scope is what a route requires of its caller.
type scope int

const (
	scopeNone       scope = iota // anyone, no credentials needed
	scopeAdmin                   // admin
	scopeRead                    // read (every session)
	scopeReadFamily              // read:{family} of the path, or read
	scopePublish                 // publish or some publish:{family}; each event's family is checked again
	scopeAny                     // any authenticated caller
)

// check refuses a caller that lacks the route's scope: 401 without an
// identity, 403 with one. For scopeReadFamily it parses the path's family,
// once for the request (400 when it is not one), and returns it.
func (s scope) check(c Caller, r *http.Request) (fam bus.Family, err error) {
	if s == scopeNone {
		return fam, nil
	}
	if !c.Authenticated {
		return fam, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "credentials required: send Authorization: Bearer <key>")
	}
	ok := false
	switch s {
	case scopeAdmin:
		ok = c.Scopes.CanAdmin()
	case scopeRead:
		ok = c.Scopes.CanRead("")
	case scopeReadFamily:
		if fam, err = bus.ParseFamily(r.PathValue("family")); err != nil {
			return fam, err
		}
		ok = c.Scopes.CanReadFamily(fam)
	case scopePublish:
		ok = canPublishAny(c.Scopes)
	case scopeAny:
		ok = true
	}
	if !ok {
		return fam, errorf(http.StatusForbidden, wire.CodeForbidden, "this caller may not %s", s.verb())
	}
	return fam, nil
}

func (s scope) verb() string {
	switch s {
	case scopeAdmin:
		return "do this (admin scope required)"
	case scopeRead:
		return "read sessions (read scope required)"
	case scopeReadFamily:
		return "read this family (read or read:FAMILY scope required)"
	case scopePublish:
		return "publish (publish or publish:FAMILY scope required)"
	}
	return "do this"
}

// canPublishAny reports whether s may publish anything at all: publish,
// admin, or some publish:{family}.
func canPublishAny(s access.Scopes) bool {
	if s.CanPublish("") {
		return true
	}
	for _, sc := range s.List() {
		if strings.HasPrefix(string(sc), "publish:") {
			return true
		}
	}
	return false
}

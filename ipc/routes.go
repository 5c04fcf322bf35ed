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
}

// routes is every route the daemon serves. Authorization happens in
// Handler.wrap, by the scope column, before the route's function runs.
var routes = []route{
	{"GET", "/api/v1/events", scopeAdmin, (*Handler).serveGlobalSSE},
	{"GET", "/api/v1/events/ws", scopeAdmin, (*Handler).serveGlobalWS},
	{"GET", "/api/v1/families/{family}/events", scopeReadFamily, (*Handler).serveFamilySSE},
	{"GET", "/api/v1/families/{family}/ws", scopeReadFamily, (*Handler).serveFamilyWS},
	{"GET", "/api/v1/sessions/{id}/events", scopeRead, (*Handler).serveSessionSSE},
	{"GET", "/api/v1/sessions/{id}/ws", scopeRead, (*Handler).serveSessionWS},
	{"POST", "/api/v1/sessions/{id}/events", scopePublish, (*Handler).servePublish},
	{"POST", "/api/v1/sessions", scopeAdmin, (*Handler).serveCreateSession},
	{"POST", wire.PathTickets, scopeAny, (*Handler).serveTicket},
	{"GET", "/api/v1/sessions", scopeRead, (*Handler).serveListSessions},
	{"GET", "/api/v1/sessions/{id}", scopeRead, (*Handler).serveShowSession},
	{"DELETE", "/api/v1/sessions/{id}", scopeAdmin, (*Handler).serveDeleteSession},
	{"POST", "/api/v1/reload", scopeAdmin, (*Handler).serveReload},
	{"GET", wire.PathUpstream, scopeRead, (*Handler).serveUpstream},
	{"GET", "/api/v1/caps", scopeNone, (*Handler).serveCaps},
	{"GET", "/healthz", scopeNone, (*Handler).serveHealthz},
	{"GET", "/readyz", scopeNone, (*Handler).serveReadyz},
	{"GET", "/metrics", scopeAdmin, (*Handler).serveMetrics},
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
// identity, 403 with one.
func (s scope) check(c Caller, r *http.Request) error {
	if s == scopeNone {
		return nil
	}
	if !c.Authenticated {
		return errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "credentials required: send Authorization: Bearer <key>")
	}
	ok := false
	switch s {
	case scopeAdmin:
		ok = c.Scopes.CanAdmin()
	case scopeRead:
		ok = c.Scopes.CanRead("")
	case scopeReadFamily:
		fam := r.PathValue("family")
		if err := bus.ValidateFamily(fam); err != nil {
			return err
		}
		ok = c.Scopes.CanReadFamily(fam)
	case scopePublish:
		ok = canPublishAny(c.Scopes)
	case scopeAny:
		ok = true
	}
	if !ok {
		return errorf(http.StatusForbidden, wire.CodeForbidden, "this caller may not %s", s.verb())
	}
	return nil
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

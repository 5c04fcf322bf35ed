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
	kind    routeKind
	// cors marks the routes answered with CORS headers for the origins in
	// AllowedOrigins (SPEC §7; see cors.go): the ticket route and the GET
	// streams.
	cors  bool
	scope scope
	serve func(h *Handler, w http.ResponseWriter, r *http.Request, c Caller)
	// serveFamily, instead of serve, takes the family of the path, which
	// the scope check (scopeReadFamily) parsed.
	serveFamily func(h *Handler, w http.ResponseWriter, r *http.Request, c Caller, fam bus.Family)
}

// routeKind is what a route answers with.
type routeKind int

const (
	routeREST routeKind = iota // one reply
	routeSSE                   // a Server-Sent Events stream
	routeWS                    // a WebSocket stream
)

// routes is every route the daemon serves. Authorization happens in
// Handler.wrap, by the scope column, before the route's function runs.
var routes = []route{
	{"GET", wire.PathEvents, routeSSE, true, scopeAdmin, (*Handler).serveGlobalSSE, nil},
	{"GET", wire.PathEventsWS, routeWS, true, scopeAdmin, (*Handler).serveGlobalWS, nil},
	{"GET", wire.PatternFamilyEvents, routeSSE, true, scopeReadFamily, nil, (*Handler).serveFamilySSE},
	{"GET", wire.PatternFamilyWS, routeWS, true, scopeReadFamily, nil, (*Handler).serveFamilyWS},
	{"GET", wire.PatternSessionEvents, routeSSE, true, scopeRead, (*Handler).serveSessionSSE, nil},
	{"GET", wire.PatternSessionWS, routeWS, true, scopeRead, (*Handler).serveSessionWS, nil},
	{"POST", wire.PatternSessionEvents, routeREST, false, scopePublish, (*Handler).servePublish, nil},
	{"POST", wire.PathSessions, routeREST, false, scopeAdmin, (*Handler).serveCreateSession, nil},
	{"POST", wire.PathTickets, routeREST, true, scopeAny, (*Handler).serveTicket, nil},
	{"GET", wire.PathSessions, routeREST, false, scopeRead, (*Handler).serveListSessions, nil},
	{"GET", wire.PatternSession, routeREST, false, scopeRead, (*Handler).serveShowSession, nil},
	{"GET", wire.PatternSessionSubscribers, routeREST, false, scopeRead, (*Handler).serveSessionSubscribers, nil},
	{"GET", wire.PathSubscribers, routeREST, false, scopeAdmin, (*Handler).serveSubscribers, nil},
	{"DELETE", wire.PatternSession, routeREST, false, scopeAdmin, (*Handler).serveDeleteSession, nil},
	{"GET", wire.PatternSessionConsumers, routeREST, false, scopeRead, (*Handler).serveListConsumers, nil},
	{"POST", wire.PatternConsumerAck, routeREST, false, scopeRead, (*Handler).serveAckConsumer, nil},
	{"DELETE", wire.PatternConsumer, routeREST, false, scopeAdmin, (*Handler).serveDeleteConsumer, nil},
	{"GET", wire.PathStatus, routeREST, false, scopeRead, (*Handler).serveStatus, nil},
	{"POST", wire.PathReload, routeREST, false, scopeAdmin, (*Handler).serveReload, nil},
	{"GET", wire.PathUpstream, routeREST, false, scopeRead, (*Handler).serveUpstream, nil},
	{"GET", wire.PathCaps, routeREST, false, scopeNone, (*Handler).serveCaps, nil},
	{"GET", wire.PathHealthz, routeREST, false, scopeNone, (*Handler).serveHealthz, nil},
	{"GET", wire.PathReadyz, routeREST, false, scopeNone, (*Handler).serveReadyz, nil},
	{"GET", wire.PathMetrics, routeREST, false, scopeAdmin, (*Handler).serveMetrics, nil},
}

// table is routes, set by init: the ticket route's function looks routes
// up, so reading routes itself would be an initialization cycle.
var table []route

func init() { table = routes }

// findRoute returns the first route that path matches and keep accepts.
func findRoute(path string, keep func(route) bool) (route, bool) {
	for _, rt := range table {
		if keep(rt) && matchPattern(rt.pattern, path) {
			return rt, true
		}
	}
	return route{}, false
}

// isWebSocketRoute reports whether path is that of a WebSocket route: the
// only requests whose subprotocol may carry a key.
func isWebSocketRoute(path string) bool {
	_, ok := findRoute(path, func(rt route) bool { return rt.kind == routeWS })
	return ok
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

package ipc

import (
	"testing"

	"github.com/localbus/localbus/ipc/wire"
)

// TestWirePathsAreTheRoutesPaths pins that the paths clients build with
// package wire are the router's: every one matches a route, and every route
// is reachable by one.
func TestWirePathsAreTheRoutesPaths(t *testing.T) {
	paths := []string{
		wire.PathEvents, wire.PathEventsWS, wire.PathSessions, wire.PathReload, wire.PathCaps,
		wire.PathHealthz, wire.PathReadyz, wire.PathMetrics, wire.PathUpstream, wire.PathTickets,
		wire.PathSubscribers, wire.SessionSubscribersPath("s-1"), wire.PathStatus,
		wire.SessionPath("s-1"), wire.SessionEventsPath("s-1"), wire.SessionWSPath("s-1"),
		wire.FamilyEventsPath("build"), wire.FamilyWSPath("build"),
		wire.SessionConsumersPath("s-1"), wire.ConsumerPath("s-1", "backup"), wire.ConsumerAckPath("s-1", "backup"),
	}
	reached := map[string]bool{}
	for _, p := range paths {
		found := false
		for _, rt := range routes {
			if matchPattern(rt.pattern, p) {
				found, reached[rt.pattern] = true, true
			}
		}
		if !found {
			t.Errorf("wire path %s matches no route", p)
		}
	}
	for _, rt := range routes {
		if !reached[rt.pattern] {
			t.Errorf("route %s %s has no path in package wire", rt.method, rt.pattern)
		}
	}
}

// TestMatchPatternMatchesSegmentBySegment pins matchPattern against the
// definition it implements without allocating: the same number of
// non-empty segments, each equal or a {wildcard}.
func TestMatchPatternMatchesSegmentBySegment(t *testing.T) {
	byDefinition := func(pattern, path string) bool {
		ps, xs := splitPath(pattern), splitPath(path)
		if len(ps) != len(xs) {
			return false
		}
		for i := range ps {
			if ps[i][0] != '{' && ps[i] != xs[i] {
				return false
			}
		}
		return true
	}
	paths := []string{
		"", "/", "//", "/api", "/api/v1/sessions", "/api/v1/sessions/", "/api/v1/sessions/s1",
		"/api/v1/sessions/s1/", "/api/v1/sessions/s1/ws", "/api/v1/sessions//s1/ws", "/api/v1/sessions/s1/ws/x",
		"/api/v1/families/app/ws", "/api/v1/events", "/metrics", "api/v1/sessions/s1/events",
	}
	for _, rt := range routes {
		for _, p := range append(paths, rt.pattern) {
			if got, want := matchPattern(rt.pattern, p), byDefinition(rt.pattern, p); got != want {
				t.Errorf("matchPattern(%q, %q) = %v, want %v", rt.pattern, p, got, want)
			}
		}
	}
	if !matchPattern("/api/v1/sessions/{id}/ws", "/api/v1/sessions/s1/ws") || matchPattern("/api/v1/sessions/{id}/ws", "/api/v1/sessions/s1/sse") {
		t.Error("a session's ws path and its sse path are told apart wrongly")
	}
	if n := testing.AllocsPerRun(100, func() { matchPattern("/api/v1/sessions/{id}/ws", "/api/v1/sessions/s1/ws") }); n != 0 {
		t.Errorf("matchPattern allocates %v times, want 0", n)
	}
}

// TestPatternValueNamesTheWildcardsSegment pins patternValue, which the
// ticket route reads a stream path's session id and family with.
func TestPatternValueNamesTheWildcardsSegment(t *testing.T) {
	for _, tc := range []struct {
		pattern, path, name, want string
		ok                        bool
	}{
		{wire.PatternSessionEvents, wire.SessionEventsPath("s-1"), "id", "s-1", true},
		{wire.PatternFamilyWS, wire.FamilyWSPath("build"), "family", "build", true},
		{wire.PatternFamilyWS, wire.FamilyWSPath("build"), "id", "", false},
		{wire.PathEvents, wire.PathEvents, "family", "", false},
	} {
		if got, ok := patternValue(tc.pattern, tc.path, tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("patternValue(%q, %q, %q) = %q, %v; want %q, %v", tc.pattern, tc.path, tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestRouteColumnsAgreeWithSPEC pins the route table's kind and cors
// columns to what SPEC §6 and §7 say of each route: a GET …/events is SSE,
// a GET …/ws is WebSocket, and CORS is answered on exactly the GET
// streams and the ticket route.
func TestRouteColumnsAgreeWithSPEC(t *testing.T) {
	want := map[string]routeKind{
		"GET " + wire.PathEvents: routeSSE, "GET " + wire.PathEventsWS: routeWS,
		"GET " + wire.PatternSessionEvents: routeSSE, "GET " + wire.PatternSessionWS: routeWS,
		"GET " + wire.PatternFamilyEvents: routeSSE, "GET " + wire.PatternFamilyWS: routeWS,
	}
	for _, rt := range routes {
		key := rt.method + " " + rt.pattern
		if got := rt.kind; got != want[key] {
			t.Errorf("%s: kind %d, want %d", key, got, want[key])
		}
		if wantCORS := want[key] != routeREST || key == "POST "+wire.PathTickets; rt.cors != wantCORS {
			t.Errorf("%s: cors %v, want %v", key, rt.cors, wantCORS)
		}
		if (rt.serve == nil) == (rt.serveFamily == nil) {
			t.Errorf("%s: want exactly one of serve and serveFamily", key)
		}
	}
}

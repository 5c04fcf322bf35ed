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
		wire.SessionPath("s-1"), wire.SessionEventsPath("s-1"), wire.SessionWSPath("s-1"),
		wire.FamilyEventsPath("build"), wire.FamilyWSPath("build"),
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

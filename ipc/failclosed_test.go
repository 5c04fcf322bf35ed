package ipc

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc/wire"
)

// TestNoAuthenticatorRefusesEveryScopedRoute pins that the router fails
// closed: with no Authenticate, every route that needs a scope answers 401
// with the JSON error, whoever asks (even the daemon's own uid on the
// socket), and nothing happens to the hub; only the scope-free routes
// answer.
func TestNoAuthenticatorRefusesEveryScopedRoute(t *testing.T) {
	f := newRouteFixture(t, nil, func(o *Options) { o.Authenticate = nil })
	if _, err := f.hub.Create(bustest.SessionID("keep"), 0); err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{
		"POST /api/v1/sessions/{id}/events": `{"type":"build:step","data":1}`,
		"POST /api/v1/sessions":             `{"id":"made"}`,
	}
	for _, rt := range routes {
		target := strings.NewReplacer("{id}", "keep", "{family}", "build").Replace(rt.pattern)
		if rt.method == "POST" && rt.pattern == "/api/v1/sessions/{id}/events" {
			target = "/api/v1/sessions/auto/events" // would be auto-created
		}
		for _, c := range []struct {
			name string
			via  via
		}{{"tcp", viaTCP}, {"owner", viaOwner}, {"root", viaRoot}} {
			v := c.via
			t.Run(rt.method+" "+rt.pattern+" via "+c.name, func(t *testing.T) {
				w := f.do(t, v, rt.method, target, bodies[rt.method+" "+rt.pattern])
				if rt.scope == scopeNone {
					if w.Code != http.StatusOK {
						t.Errorf("%s %s = %d %s, want 200: it needs no credentials", rt.method, target, w.Code, w.Body)
					}
					return
				}
				if w.Code != http.StatusUnauthorized {
					t.Fatalf("%s %s = %d %s, want 401", rt.method, target, w.Code, w.Body)
				}
				if ct := w.Header().Get("Content-Type"); ct != wire.ContentTypeJSON {
					t.Errorf("Content-Type = %q, want %q", ct, wire.ContentTypeJSON)
				}
				var body wire.ErrorBody
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Code != wire.CodeUnauthorized || body.Error.Message == "" {
					t.Errorf("body = %s (%v), want {\"error\":{\"code\":%q,\"message\":…}}", w.Body, err, wire.CodeUnauthorized)
				}
			})
		}
	}

	var ids []string
	for _, s := range f.hub.Sessions() {
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, ",") != "keep,s1" && strings.Join(ids, ",") != "s1,keep" {
		t.Errorf("sessions after the refusals = %v, want s1 and keep only: nothing created or deleted", ids)
	}
	if s, ok := f.hub.Session("keep"); !ok || s.Bus.LastID() != 0 {
		t.Errorf("session keep after the refusals: present %v, want present with nothing published", ok)
	}
}

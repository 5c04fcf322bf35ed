package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/client"
)

func TestUnreachableDaemonIsTyped(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(shortDir(t), "nobody.sock")
	c := newClient(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	calls := map[string]func() error{
		"Publish": func() error { _, err := c.Publish(ctx, "s", "a:b", 1); return err },
		"Caps":    func() error { _, err := c.Caps(ctx); return err },
		"Reload":  func() error { _, err := c.Reload(ctx); return err },
		"Stream": func() error {
			st, err := c.Stream(ctx, client.StreamOptions{Session: "s"})
			if err == nil {
				st.Close()
			}
			return err
		},
		"Stream ws": func() error {
			st, err := c.Stream(ctx, client.StreamOptions{Session: "s", Transport: client.WebSocket})
			if err == nil {
				st.Close()
			}
			return err
		},
	}
	for name, call := range calls {
		err := call()
		var ue *client.UnreachableError
		if !errors.As(err, &ue) || ue.Addr != "unix:"+sock {
			t.Errorf("%s with no daemon = %v, want *UnreachableError for unix:%s", name, err, sock)
		}
	}
}

func TestAPIErrorsCarryStatusCodeAndSentinel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		body     string
		wantCode string
		wantMsg  string
		sentinel error
		refused  bool
	}{
		{"unauthorized", 401, `{"error":{"code":"unauthorized","message":"credentials required"}}`, "unauthorized", "credentials required", client.ErrUnauthorized, true},
		{"forbidden", 403, `{"error":{"code":"forbidden","message":"admin scope required"}}`, "forbidden", "admin scope required", client.ErrForbidden, true},
		{"not found", 404, `{"error":{"code":"not_found","message":"no such session"}}`, "not_found", "no such session", client.ErrNotFound, false},
		{"conflict", 409, `{"error":{"code":"session_exists","message":"exists"}}`, "session_exists", "exists", client.ErrConflict, false},
		{"not the daemon's JSON", 502, "<html>bad gateway</html>", "bad_gateway", "<html>bad gateway</html>", nil, false},
		{"empty body", 503, "", "service_unavailable", "Service Unavailable", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sock := fakeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			c := newClient(t, sock)
			_, err := c.Caps(context.Background())
			var ae *client.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("Caps = %v, want *APIError", err)
			}
			got := client.APIError{Status: ae.Status, Code: ae.Code, Message: ae.Message}
			want := client.APIError{Status: tt.status, Code: tt.wantCode, Message: tt.wantMsg}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("APIError (-want +got):\n%s", diff)
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.sentinel)
			}
			if ae.Refused() != tt.refused {
				t.Errorf("Refused() = %v, want %v", ae.Refused(), tt.refused)
			}
		})
	}
}

// recorded is a request a fake server saw.
type recorded struct {
	Method, Path, ContentType, ClientID, Auth, Body string
}

func recorder(t *testing.T, reply string) (http.Handler, func() []recorded) {
	var mu sync.Mutex
	var reqs []recorded
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, recorded{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Localbus-Client-Id"), r.Header.Get("Authorization"), string(b)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, reply)
	})
	return h, func() []recorded {
		mu.Lock()
		defer mu.Unlock()
		return append([]recorded(nil), reqs...)
	}
}

func TestPublishRequests(t *testing.T) {
	t.Parallel()
	h, reqs := recorder(t, `{"ids":[7],"lastId":7}`)
	c := &client.Client{Socket: fakeServer(t, h), ClientID: "cli-9", Key: "k1"}
	t.Cleanup(c.CloseIdleConnections)
	ctx := context.Background()
	if id, err := c.Publish(ctx, "b-17", "build:step", map[string]int{"n": 3}); err != nil || id != 7 {
		t.Fatalf("Publish = %d, %v; want 7, nil", id, err)
	}
	c.PublishBatch(ctx, "b-17", []client.Event{{Type: "a:b"}, {Type: "a:c", Data: "x"}})
	c.PublishNDJSON(ctx, "b-17", strings.NewReader("{\"type\":\"a:b\"}\n"))
	want := []recorded{
		{"POST", "/api/v1/sessions/b-17/events", "application/json", "cli-9", "Bearer k1", `{"type":"build:step","data":{"n":3}}`},
		{"POST", "/api/v1/sessions/b-17/events", "application/json", "cli-9", "Bearer k1", `[{"type":"a:b","data":null},{"type":"a:c","data":"x"}]`},
		{"POST", "/api/v1/sessions/b-17/events", "application/x-ndjson", "cli-9", "Bearer k1", "{\"type\":\"a:b\"}\n"},
	}
	if diff := cmp.Diff(want, reqs()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestURLClientUsesPathPrefixAndKey(t *testing.T) {
	t.Parallel()
	h, reqs := recorder(t, `{"version":"x","schemaVersion":1}`)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := &client.Client{URL: srv.URL + "/bus/", Key: "secret"}
	t.Cleanup(c.CloseIdleConnections)
	caps, err := c.Caps(context.Background())
	if err != nil || caps.Version != "x" {
		t.Fatalf("Caps = %+v, %v", caps, err)
	}
	if got := reqs(); len(got) != 1 || got[0].Path != "/bus/api/v1/caps" || got[0].Auth != "Bearer secret" {
		t.Errorf("request = %+v, want GET /bus/api/v1/caps with the key", got)
	}
	if want := "tcp:" + strings.TrimPrefix(srv.URL, "http://"); c.Addr() != want {
		t.Errorf("Addr() = %q, want %q", c.Addr(), want)
	}
}

// An id is escaped once in the path, on the socket and over a URL with a
// prefix, so the daemon reads the id the caller gave (and names it so in
// a refusal), never its escaped form.
func TestIDsAreEscapedOnce(t *testing.T) {
	t.Parallel()
	h, reqs := recorder(t, `{"id":"x"}`)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, c := range []*client.Client{{Socket: fakeServer(t, h)}, {URL: srv.URL + "/b%20us/"}} {
		t.Cleanup(c.CloseIdleConnections)
		c.Session(context.Background(), "bad id!%2F")
	}
	got := reqs()
	if len(got) != 2 || got[0].Path != "/api/v1/sessions/bad id!%2F" || got[1].Path != "/b us/api/v1/sessions/bad id!%2F" {
		t.Errorf("requests = %+v; want the id as given, under the URL's prefix", got)
	}
}

func TestMalformedURLIsAnError(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"127.0.0.1:8001", "ftp://host", "http://"} {
		c := &client.Client{URL: u}
		var ue *client.URLError
		if _, err := c.Caps(context.Background()); !errors.As(err, &ue) || ue.URL != u {
			t.Errorf("Caps with URL %q = %v, want a *URLError", u, err)
		}
	}
}

func TestSessionCalls(t *testing.T) {
	t.Parallel()
	_, c := startDaemonClient(t, bus.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	s, err := c.CreateSession(ctx, "b-17", 10)
	if err != nil || s.ID != "b-17" || s.Ring.MaxCount != 10 {
		t.Fatalf("CreateSession = %+v, %v; want b-17 with a ring of 10", s, err)
	}
	if _, err := c.CreateSession(ctx, "b-17", 0); !errors.Is(err, client.ErrConflict) {
		t.Errorf("CreateSession of an existing id = %v, want ErrConflict", err)
	}
	gen, err := c.CreateSession(ctx, "", 0)
	if err != nil || gen.ID == "" {
		t.Fatalf("CreateSession without id = %+v, %v; want a generated id", gen, err)
	}
	publishN(t, c, "b-17", "t:e", 2)
	s, err = c.Session(ctx, "b-17")
	if err != nil || s.LastID != 2 || s.Ring.Count != 2 {
		t.Errorf("Session = %+v, %v; want lastId 2 and 2 events in the ring", s, err)
	}
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("Sessions = %+v, %v; want 2 sessions", list, err)
	}
	if err := c.DeleteSession(ctx, "b-17"); err != nil {
		t.Errorf("DeleteSession = %v", err)
	}
	if _, err := c.Session(ctx, "b-17"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Session after delete = %v, want ErrNotFound", err)
	}
	if err := c.DeleteSession(ctx, "b-17"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("DeleteSession twice = %v, want ErrNotFound", err)
	}
	caps, err := c.Caps(ctx)
	if err != nil || caps.SchemaVersion != bus.SchemaVersion || len(caps.Features) == 0 {
		t.Errorf("Caps = %+v, %v", caps, err)
	}
	if r, err := c.Reload(ctx); err != nil || !r.Reloaded || r.RestartNeeded == nil || len(r.RestartNeeded) != 0 {
		t.Errorf("Reload = %+v, %v; want reloaded with an empty restartNeeded", r, err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Errorf("Ready = %v", err)
	}
}

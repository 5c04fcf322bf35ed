package ipc_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// rawPost sends a POST's headers, with Content-Length n, and the first
// bytes of its body, on a connection of its own; the caller sends the rest
// or reads the reply.
func rawPost(t *testing.T, srv *ipctest.Server, path string, n int, first []byte) (*bufio.Reader, func([]byte)) {
	t.Helper()
	conn, err := srv.Dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(ipctest.Wait))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, ipctest.Host, n)
	conn.Write(first)
	return bufio.NewReader(conn), func(b []byte) { conn.Write(b) }
}

func readHTTPReply(t *testing.T, br *bufio.Reader) *ipctest.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return &ipctest.Response{Status: resp.StatusCode, Header: resp.Header, Body: b.Bytes()}
}

// TestBodyOverLimitIsRefusedBeforeReading: a Content-Length over
// max_body_bytes gets 413 at once, though the body never comes; other
// publishes go on.
func TestBodyOverLimitIsRefusedBeforeReading(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{Settings: ipc.Settings{MaxBodyBytes: 1 << 20, BodyTimeout: time.Minute}}})
	br, _ := rawPost(t, srv, "/api/v1/sessions/s/events", 100<<20, []byte(`[`))
	r := readHTTPReply(t, br) // the body never comes: only a refusal before reading answers
	if r.Status != http.StatusRequestEntityTooLarge || r.ErrorBody(t).Error.Code != wire.CodeBodyTooLarge {
		t.Fatalf("100 MB Content-Length = %d %s, want 413 %s", r.Status, r.Body, wire.CodeBodyTooLarge)
	}
	if _, ok := srv.Hub.Session("s"); ok {
		t.Error("the refused publish created its session")
	}
	srv.Publish(t, "s", ipctest.Event{Type: "t:a", Data: "1"})
}

// TestInflightBodiesAreCapped: a body's bytes count once read, never
// reserved from its Content-Length; while one body holds most of
// max_inflight_body_bytes, another large one is refused with 503 busy and
// Retry-After as its bytes arrive, a small one goes through, and once the
// first is done the large one is taken again.
func TestInflightBodiesAreCapped(t *testing.T) {
	const limit = 1 << 20
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{Settings: ipc.Settings{MaxBodyBytes: limit, MaxInflightBodyBytes: limit, BodyTimeout: time.Minute}}})
	big := 600 << 10
	// An array of big-2 bytes of padding around one event: valid JSON.
	payload := []byte(`[{"type":"t:a","data":"` + strings.Repeat("x", big-26) + `"}]`)
	if len(payload) != big {
		t.Fatalf("payload is %d bytes", len(payload))
	}
	held, rest := rawPost(t, srv, "/api/v1/sessions/s/events", big, payload[:1])
	other := func() *ipctest.Response {
		ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
		defer cancel()
		r, err := srv.Request(ctx, http.MethodPost, "/api/v1/sessions/other/events", nil, payload)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	bustest.Eventually(t, ipctest.Wait, "the held body's first byte counted", func() bool {
		return srv.Handler.InflightBodyBytes() == 1
	})
	rest(payload[1 : big-1])
	bustest.Eventually(t, ipctest.Wait, "the held body in flight", func() bool {
		return srv.Handler.InflightBodyBytes() == int64(big-1)
	})
	br, _ := rawPost(t, srv, "/api/v1/sessions/other/events", big, payload)
	refused := readHTTPReply(t, br)
	if refused.Status != http.StatusServiceUnavailable || refused.ErrorBody(t).Error.Code != wire.CodeBusy || refused.Header.Get("Retry-After") == "" {
		t.Fatalf("second large body = %d %s (Retry-After %q), want 503 busy with Retry-After", refused.Status, refused.Body, refused.Header.Get("Retry-After"))
	}
	if _, ok := srv.Hub.Session("other"); ok {
		t.Error("the refused publish created its session")
	}
	srv.Publish(t, "small", ipctest.Event{Type: "t:a", Data: "1"})
	rest(payload[big-1:])
	if r := readHTTPReply(t, held); r.Status != http.StatusOK {
		t.Fatalf("held publish = %d %s", r.Status, r.Body)
	}
	bustest.Eventually(t, ipctest.Wait, "the bodies' bytes given back", func() bool {
		return srv.Handler.InflightBodyBytes() == 0
	})
	if r := other(); r.Status != http.StatusOK {
		t.Fatalf("large body once the first is done = %d %s, want 200", r.Status, r.Body)
	}
}

// TestPublishersCannotTakeTheSessionsAdminsNeed: sessions created by a
// publish stop at MaxAutoSessions with 429, while an admin still creates
// sessions and existing sessions still take publishes.
func TestPublishersCannotTakeTheSessionsAdminsNeed(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true, MaxSessions: 4, MaxAutoSessions: 2}})
	srv.Publish(t, "a", ipctest.Event{Type: "t:a", Data: "1"})
	srv.Publish(t, "b", ipctest.Event{Type: "t:a", Data: "1"})
	r := srv.Do(t, http.MethodPost, "/api/v1/sessions/c/events", nil, []byte(`{"type":"t:a","data":1}`))
	if r.Status != http.StatusTooManyRequests || r.ErrorBody(t).Error.Code != wire.CodeSessionLimit {
		t.Fatalf("third session by publish = %d %s, want 429 %s", r.Status, r.Body, wire.CodeSessionLimit)
	}
	if _, ok := srv.Hub.Session("c"); ok {
		t.Error("the refused publish created its session")
	}
	createSession(t, srv, "admin-1")
	createSession(t, srv, "admin-2")
	srv.Publish(t, "a", ipctest.Event{Type: "t:a", Data: "2"})
	// A deleted auto session frees its place.
	if r := srv.Do(t, http.MethodDelete, "/api/v1/sessions/b", nil, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete b = %d %s", r.Status, r.Body)
	}
	if r := srv.Do(t, http.MethodDelete, "/api/v1/sessions/admin-2", nil, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete admin-2 = %d %s", r.Status, r.Body)
	}
	srv.Publish(t, "c", ipctest.Event{Type: "t:a", Data: "1"})
}

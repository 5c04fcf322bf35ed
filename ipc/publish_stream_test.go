package ipc_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// pubStream is a streaming publish in progress: a chunked NDJSON body
// written through a pipe.
type pubStream struct {
	t    *testing.T
	pw   *io.PipeWriter
	resp chan *http.Response
	errs chan error
}

// openPublishStream starts POST path with a chunked NDJSON body.
func openPublishStream(t *testing.T, srv *ipctest.Server, path string, hdr http.Header) *pubStream {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, ipctest.URL(path), pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	ps := &pubStream{t: t, pw: pw, resp: make(chan *http.Response, 1), errs: make(chan error, 1)}
	go func() {
		resp, err := srv.Client.Do(req)
		if err != nil {
			ps.errs <- err
			return
		}
		ps.resp <- resp
	}()
	t.Cleanup(func() { pw.CloseWithError(io.ErrClosedPipe) })
	return ps
}

// send writes lines to the body; a failed write (the server stopped
// reading) is ignored: the reply says why.
func (ps *pubStream) send(lines ...string) {
	for _, l := range lines {
		ps.pw.Write([]byte(l + "\n"))
	}
}

// response waits for the reply's headers.
func (ps *pubStream) response() *http.Response {
	ps.t.Helper()
	select {
	case r := <-ps.resp:
		ps.t.Cleanup(func() { r.Body.Close() })
		return r
	case err := <-ps.errs:
		ps.t.Fatalf("streaming publish: %v", err)
	case <-time.After(wait):
		ps.t.Fatalf("streaming publish: no reply within %v", wait)
	}
	return nil
}

// end closes the body and returns the reply, read in full.
func (ps *pubStream) end() (int, []byte) {
	ps.t.Helper()
	ps.pw.Close()
	r := ps.response()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		ps.t.Fatalf("reading the reply: %v", err)
	}
	return r.StatusCode, b
}

// streamErr is the error reply of a streaming publish.
type streamErr struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Published *wire.StreamReply `json:"published"`
}

func line(typ string, n int) string {
	b, _ := json.Marshal(map[string]any{"type": typ, "data": map[string]int{"n": n}})
	return string(b)
}

// TestStreamingPublishPublishesLinesAsTheyArrive: each line of a chunked
// NDJSON body reaches subscribers before the body ends, and the reply at
// the end acknowledges every one.
func TestStreamingPublishPublishesLinesAsTheyArrive(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	st := srv.OpenSSE(t, "/api/v1/sessions/s/events", nil)
	st.MustNext(t) // stream:ready

	ps := openPublishStream(t, srv, "/api/v1/sessions/s/events", nil)
	for i := 1; i <= 3; i++ {
		ps.send(line("a:b", i), "") // a blank line is skipped
		if env := st.MustNext(t); env.ID != uint64(i) || env.Type != "a:b" {
			t.Fatalf("event %d: got id %d type %s while the body is open", i, env.ID, env.Type)
		}
	}
	ps.send(line("a:c", 4) + "\n" + line("a:c", 5)) // two lines that arrive together
	status, body := ps.end()
	if status != http.StatusOK {
		t.Fatalf("reply = %d %s, want 200", status, body)
	}
	var got wire.StreamReply
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("reply %s: %v", body, err)
	}
	want := wire.StreamReply{Count: 5, FirstID: 1, LastID: 5, IDs: seq(1, 5)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}

// TestStreamingPublishStopsAtABadLine: the lines before a bad one stay
// published, the reply is the error with what was published, and nothing
// after it is read.
func TestStreamingPublishStopsAtABadLine(t *testing.T) {
	cases := []struct {
		name   string
		bad    string
		status int
		code   string
	}{
		{"malformed", `{"type":`, http.StatusBadRequest, "invalid_event"},
		{"reserved type", `{"type":"stream:ready"}`, http.StatusBadRequest, "invalid_type"},
		{"too large", `{"type":"a:b","data":"` + strings.Repeat("x", 300) + `"}`, http.StatusRequestEntityTooLarge, "event_too_large"},
		{"forbidden family", `{"type":"secret:x"}`, http.StatusForbidden, "forbidden"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{
				Settings: ipc.Settings{
					MaxEventBytes: 256,
					Authenticate: func(*http.Request) (ipc.Caller, error) {
						return ipc.Caller{Authenticated: true, Scopes: access.NewScopes("read", "publish:a")}, nil
					},
				},
			}})
			ps := openPublishStream(t, srv, "/api/v1/sessions/s/events", nil)
			ps.send(line("a:b", 1), line("a:b", 2), tc.bad, line("a:b", 4))
			status, body := ps.end()
			if status != tc.status {
				t.Fatalf("reply = %d %s, want %d", status, body, tc.status)
			}
			var got streamErr
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("reply %s: %v", body, err)
			}
			if got.Error.Code != tc.code || !strings.Contains(got.Error.Message, "line 3") {
				t.Errorf("error = %+v, want code %s naming line 3", got.Error, tc.code)
			}
			if diff := cmp.Diff(&wire.StreamReply{Count: 2, FirstID: 1, LastID: 2, IDs: seq(1, 2)}, got.Published); diff != "" {
				t.Errorf("published (-want +got):\n%s", diff)
			}
			if n := lastID(t, srv, "s"); n != 2 {
				t.Errorf("session lastId = %d, want 2: nothing after the bad line", n)
			}
		})
	}
}

// TestStreamingPublishRefusesABadLineWhileTheBodyIsOpen: the error reply
// comes as soon as the bad line is read, not when a slow producer finally
// ends its body (or the idle limit cuts it).
func TestStreamingPublishRefusesABadLineWhileTheBodyIsOpen(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	ps := openPublishStream(t, srv, "/api/v1/sessions/s/events", nil)
	ps.send(line("a:b", 1), `{"type":"stream:ready"}`)
	r := ps.response() // the body stays open: the reply must not wait for it
	if r.StatusCode != http.StatusBadRequest {
		t.Fatalf("reply = %d, want 400", r.StatusCode)
	}
	var got streamErr
	if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Error.Code != "invalid_type" || got.Published == nil || got.Published.Count != 1 {
		t.Errorf("reply = %+v published %+v, want invalid_type after 1 published", got.Error, got.Published)
	}
}

// TestStreamingPublishLineAcks: with ?ack=line each event is acknowledged
// as it is published, while the body is still open, and the stream ends
// with the summary line, or an error line.
func TestStreamingPublishLineAcks(t *testing.T) {
	srv := newServer(t)
	ps := openPublishStream(t, srv, "/api/v1/sessions/s/events?ack=line", nil)
	ps.send(line("a:b", 1))
	r := ps.response()
	if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("reply = %d %s, want 200 application/x-ndjson", r.StatusCode, r.Header.Get("Content-Type"))
	}
	acks := bufio.NewScanner(r.Body)
	next := func() string {
		t.Helper()
		if !acks.Scan() {
			t.Fatalf("no acknowledgement line: %v", acks.Err())
		}
		return acks.Text()
	}
	if got := next(); got != `{"id":1}` {
		t.Fatalf("first acknowledgement = %s, want {\"id\":1}", got)
	}
	ps.send(line("a:b", 2))
	if got := next(); got != `{"id":2}` {
		t.Fatalf("second acknowledgement = %s, want {\"id\":2}", got)
	}
	ps.send(`{"type":"a:b","data":nope}`)
	var e streamErr
	if err := json.Unmarshal([]byte(next()), &e); err != nil || e.Error.Code != "invalid_event" || e.Published != nil {
		t.Errorf("error line = %+v (%v), want invalid_event", e, err)
	}
	if acks.Scan() {
		t.Errorf("a line after the error: %s", acks.Text())
	}

	// A clean end gives the summary.
	ps = openPublishStream(t, srv, "/api/v1/sessions/s/events?ack=line", nil)
	ps.send(line("a:b", 3))
	status, body := ps.end()
	if want := "{\"id\":3}\n{\"count\":1,\"firstId\":3,\"lastId\":3,\"ids\":[3]}\n"; status != http.StatusOK || string(body) != want {
		t.Errorf("reply = %d %q, want 200 %q", status, body, want)
	}
}

// TestStreamingPublishIdleTimeout: a stream that sends nothing for
// BodyTimeout is cut off with 408 and what it published; blank lines keep
// a quiet stream open.
func TestStreamingPublishIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{Settings: ipc.Settings{BodyTimeout: idle}}})
	ps := openPublishStream(t, srv, "/api/v1/sessions/s/events", nil)
	ps.send(line("a:b", 1))
	// Blank lines, each well within the timeout, for longer than it.
	tick := time.NewTicker(idle / 4)
	defer tick.Stop()
	for range 8 {
		<-tick.C
		ps.send("")
	}
	ps.send(line("a:b", 2))
	r := ps.response() // the stream goes quiet: the daemon cuts it off
	body, _ := io.ReadAll(r.Body)
	var e streamErr
	if err := json.Unmarshal(body, &e); err != nil || r.StatusCode != http.StatusRequestTimeout || e.Error.Code != "body_timeout" {
		t.Fatalf("reply = %d %s (%v), want 408 body_timeout", r.StatusCode, body, err)
	}
	if e.Published == nil || e.Published.Count != 2 {
		t.Errorf("published = %+v, want both lines sent before the silence", e.Published)
	}
}

// TestStreamingPublishEndsAtShutdown: Drain stops a streaming publish after
// the lines it has read, with 503.
func TestStreamingPublishEndsAtShutdown(t *testing.T) {
	srv := newServer(t)
	ps := openPublishStream(t, srv, "/api/v1/sessions/s/events", nil)
	ps.send(line("a:b", 1))
	bustest.Eventually(t, wait, "the first line published", func() bool {
		s, ok := srv.Hub.Session("s")
		return ok && s.Bus.LastID() == 1
	})
	srv.Handler.Drain()
	r := ps.response()
	body, _ := io.ReadAll(r.Body)
	var e streamErr
	if err := json.Unmarshal(body, &e); err != nil || r.StatusCode != http.StatusServiceUnavailable || e.Error.Code != "shutting_down" || e.Published == nil || e.Published.Count != 1 {
		t.Errorf("reply = %d %s (%v), want 503 shutting_down with 1 published", r.StatusCode, body, err)
	}
}

// TestPublishAckNeedsNDJSON: ?ack= is validated, and only applies to
// NDJSON bodies; an NDJSON body with a length and no ?ack= stays one
// all-or-nothing batch.
func TestPublishAckNeedsNDJSON(t *testing.T) {
	srv := newServer(t)
	nd := header("Content-Type", "application/x-ndjson")
	for _, tc := range []struct {
		name, query string
		hdr         http.Header
		body        string
		status      int
		code        string
	}{
		{"bad ack", "?ack=maybe", nd, line("a:b", 1), http.StatusBadRequest, "invalid_ack"},
		{"ack on JSON", "?ack=line", nil, line("a:b", 1), http.StatusBadRequest, "invalid_ack"},
		{"length, no ack: all or nothing", "", nd, line("a:b", 1) + "\n{bad}", http.StatusBadRequest, "invalid_event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events"+tc.query, tc.hdr, []byte(tc.body))
			if r.Status != tc.status || r.ErrorBody(t).Error.Code != tc.code {
				t.Errorf("publish = %d %s, want %d %s", r.Status, r.Body, tc.status, tc.code)
			}
		})
	}
	if s, ok := srv.Hub.Session("s"); ok && s.Bus.LastID() != 0 {
		t.Errorf("lastId = %d after refused publishes, want 0", s.Bus.LastID())
	}

	// ?ack=end on a body with a length streams it: the good line stays.
	r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events?ack=end", nd, []byte(line("a:b", 1)+"\n{bad}"))
	var e streamErr
	if err := json.Unmarshal(r.Body, &e); err != nil || r.Status != http.StatusBadRequest || e.Published == nil || e.Published.Count != 1 {
		t.Errorf("publish ?ack=end = %d %s, want 400 with 1 published", r.Status, r.Body)
	}
}
